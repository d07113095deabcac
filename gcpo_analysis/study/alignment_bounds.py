"""The bounded and ordering ceilings of the update-alignment study, per snapshot and modulator, at
the protocol's batch size (``gcpo_analysis.stats.alignment_ceilings`` has the maths).

For every modulator: the best weights within its own range of ω at the snapshot (the box
[min ω, max ω] over the pool's groups with a gradient), and the best assignment of its own batch
weights to the batch's groups (every order); each fitted and scored on the same leave-batch-out
reference ("in-sample", upper-biased) and cross-fitted over halves of the outside groups (raw, and
on the noise-corrected scale against μ). The fixed box ``FIXED_BOX`` is one more row. The
modulator's own Δcos on the same batches and reference stands beside them. Point estimates on
the study's batches, without a CI (a per-batch optimisation for every modulator).
"""

from __future__ import annotations

import warnings

import numpy as np

from gcpo_analysis.stats.alignment import draw_batches, reference_terms
from gcpo_analysis.stats.alignment_ceilings import (
    block,
    box_fitter,
    cosine,
    crossfit,
    half_references,
    in_sample,
    mean_norm2,
    order_fitter,
)

FIXED_BOX = (0.4, 1.3)
FIXED = "any weights in 0.4–1.3"


def _mean(x: np.ndarray) -> float:
    return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")


def bound_rows(
    name: str, K: np.ndarray, weights: dict[str, np.ndarray], batch_size: int, n_batches: int, rng
) -> list[dict]:
    """One row per (modulator, ceiling): the box (``bounded``) and order (``ordering``) ceilings,
    in-sample and cross-fitted, with the modulator's own Δcos on the same batches."""
    idx = draw_batches(K.shape[0], batch_size, n_batches, rng)
    c, n2 = reference_terms(K, idx)
    KB = block(K, idx)
    halves = half_references(K, idx, rng)
    mu2 = mean_norm2(K)
    live = np.diag(K) > 0
    ones = np.ones(idx.shape)
    base, base_mu = cosine(ones, KB, c, n2), cosine(ones, KB, c, mu2)
    rows = []
    if not live.any():  # no group has a gradient: no cosine, no ceiling (the summary says so)
        return []
    boxes = {m: (float(w[live].min()), float(w[live].max())) for m, w in weights.items() if m != "none"}
    boxes[FIXED] = FIXED_BOX
    for m, (lo, hi) in boxes.items():
        own = weights.get(m)
        row = dict(snapshot=name, batch_size=batch_size, weighting=m, omega_min=lo, omega_max=hi)
        if own is not None:
            W = np.asarray(own, float)[idx]
            row.update(own_dcos=_mean(cosine(W, KB, c, n2) - base), own_dcos_mu=_mean(cosine(W, KB, c, mu2) - base_mu))
        if lo < 0:
            warnings.warn(f"snapshot {name}: {m}'s ω reaches {lo} < 0: no bounded ceiling", stacklevel=2)
        else:
            for kind, est in (
                ("in_sample", in_sample(box_fitter(KB, lo, hi), KB, c, n2, mu2)),
                ("crossfit", crossfit(box_fitter(KB, lo, hi), KB, halves, mu2)),
            ):
                row[f"bounded_{kind}"], row[f"bounded_{kind}_mu"] = _mean(est["dcos"]), _mean(est["dcos_mu"])
        if own is not None and batch_size <= 6:
            fit = order_fitter(KB, np.asarray(own, float)[idx])
            for kind, est in (
                ("in_sample", in_sample(fit, KB, c, n2, mu2)),
                ("crossfit", crossfit(fit, KB, halves, mu2)),
            ):
                row[f"ordering_{kind}"], row[f"ordering_{kind}_mu"] = _mean(est["dcos"]), _mean(est["dcos_mu"])
        rows.append(row)
    return rows
