"""A snapshot's per-group frame matched to its Gram, row by row (``gcpo align --restat``).

Row i of the groups frame (sorted by ``position``) describes the group whose gradient g_i is row
and column i of the Gram K = G Gᵀ. ``gcpo align`` writes ‖g_i‖² beside it (``grad_norm2``, the
float64 dot product of the float32 gradient with itself), so K_ii = ‖g_i‖² up to the summation
order of the Gram's blocks (a relative 1e-13 on the committed snapshots). A frame edited by hand
(rows moved to other positions, a position repeated, a norm changed) is no longer the Gram's and
is refused, naming the file and the row; restat would otherwise weigh one group's gradient by
another's ω without a word.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RTOL = 1e-9  # K_ii and grad_norm2 agree to ~1e-13: anything wider than rounding is another group


def check_frame_matches_gram(groups: pd.DataFrame, K: np.ndarray, source: str, gram: str) -> None:
    """Refuse a groups frame (sorted by position) whose rows are not the Gram's: a repeated
    position, or a ``grad_norm2`` (where the frame has it: frames written by ``gcpo align``) that
    differs from the Gram's diagonal beyond rounding. Each error names the file, the row and the
    position."""
    positions = groups["position"]
    repeated = positions.duplicated(keep="first").to_numpy(bool)
    if repeated.any():
        i = int(np.flatnonzero(repeated)[0])
        raise ValueError(
            f"{source}: row {i} repeats position {positions.iloc[i]}: each pool position is one group, one row "
            f"and column of {gram}; restore the frame gcpo align wrote"
        )
    if "grad_norm2" not in groups.columns:
        return
    norms = pd.to_numeric(groups["grad_norm2"], errors="coerce").to_numpy(float)
    diag = np.diag(K)
    off = ~np.isclose(norms, diag, rtol=RTOL, atol=0.0)
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise ValueError(
            f"{source}: row {i} (position {positions.iloc[i]}) has grad_norm2 {float(norms[i])!r}, but {gram} has "
            f"K[{i}, {i}] = {float(diag[i])!r}: the frame's rows are not the Gram's groups ({int(off.sum())} "
            "row(s) differ; edited, or from another snapshot); restore the frame gcpo align wrote"
        )
