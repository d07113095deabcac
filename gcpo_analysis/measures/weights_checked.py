"""The one check of every group weight, wherever a weight is made: a modulator's ω(q)
(``Modulator.__call__`` and ``Modulator.group_weight``, which gcpo's own loop, the TRL
``GCPOTrainer``, the ``:shuffled`` arm, ``gcpo align`` and ``gcpo study`` all reach through
``modulate``/``group_weight``) and a measure's weight column (``gcpo score``, ``score_groups``).

A group weight scales every GRPO advantage of its group, A~_i = A_i · ω(q) (Section 3), so it is
one real number per group, finite and >= 0. A plug-in that breaks this (NaN, inf, a negative
weight, an array of per-rollout weights, a string) is refused here, naming the modulator or
measure, the group and the value, instead of surfacing later as a diverged loss blamed on the
learning rate, a NaN written to an output frame, or a numpy error inside TRL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _why_not(value: Any) -> str | None:
    """Why ``value`` is no group weight (None when it is one)."""
    arr = np.asarray(value)
    if arr.ndim != 0:
        return f"one number per group expected, got an array of shape {arr.shape}"
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        return f"a real number expected, got {type(value).__name__}"
    if not np.isfinite(arr):
        return "not finite"
    if arr < 0:
        return "negative"
    return None


def checked_weight(value: Any, source: str, group: str = "a group") -> float:
    """``value`` as the float weight of one group, else a ValueError naming ``source`` (e.g.
    "modulator 'toy'"), ``group`` and the value."""
    why = _why_not(value)
    if why is not None:
        raise ValueError(f"{source} gave the weight {_shown(value)} for {group}: {why} (a weight is finite and >= 0)")
    return float(value)


def checked_weights(values: Any, source: str, groups: Sequence[str]) -> np.ndarray:
    """``values`` (one weight per group, in the order of ``groups``) as a float64 array, each
    checked by ``checked_weight``; a count that is not one per group is refused too."""
    arr = np.asarray(values)
    if arr.shape != (len(groups),):
        raise ValueError(f"{source} gave weights of shape {arr.shape} for {len(groups)} groups: one per group expected")
    return np.array([checked_weight(v, source, g) for v, g in zip(arr.tolist(), groups)], dtype=np.float64)


def _shown(value: Any) -> str:
    text = repr(value.tolist() if isinstance(value, np.ndarray) else value)
    return text if len(text) <= 80 else text[:77] + "..."
