"""Honest ceilings of the update-alignment study: how much room a per-group weighting has, measured
without scoring a fit on the reference it was fitted to. Pure numpy on a Gram, like
``gcpo_analysis.stats.alignment`` (whose notation this follows: K the pool's Gram, idx the batches,
c_B the batch members' inner products with a reference, K_B the batch's Gram block).

Why. The in-sample oracle w* = (K_B + λI)⁻¹ c_B maximises the cosine with the leave-batch-out
reference r_B, which is itself a noisy mean of the other groups; the fit chases that noise, so its
Δcos overstates what any weighting could gain against the expected gradient μ of the pool. Here:

* **Cross-fitting.** For each batch the groups outside it are split at random into halves A and B
  (by original group, so a bootstrap copy never straddles the halves). Weights fitted on A's mean
  r_A are scored on B's mean r_B and vice versa; Δcos is against equal weights on the same half,
  and the two directions are averaged. Each batch draws its own split, so the mean over batches is
  also a mean over splits. r_B is independent of a fit on A, so the score is not inflated.
* **Noise-corrected scale.** A cosine against a noisy reference is attenuated by ‖μ‖/‖r‖. The
  numerator ĝ·r is unbiased for ĝ·μ (r is independent of the batch and of a fit on the other
  half); replacing ‖r‖ by ‖μ‖, estimated without bias by the U-statistic
  ‖μ‖²_U = Σ_{p≠p'} K_pp' / #pairs over the pool's distinct groups (``mean_norm2``), gives the
  cosine against μ: cos_μ(w) = ĝ_w·r / (‖ĝ_w‖ ‖μ‖_U). A fit on half the groups is noisier than a
  fit on μ, so the cross-fitted Δcos_μ is a *lower* estimate of the room.
* **Split-half estimate of the ideal room.** The best cosine with μ over all real weights is
  √(c_μᵀ K_B⁻¹ c_μ) / ‖μ‖ (Cauchy–Schwarz in the K_B metric), c_μ = G_Bᵀμ. Two independent
  halves give unbiased c_A, c_B, so c_Aᵀ K_B⁻¹ c_B is unbiased for c_μᵀ K_B⁻¹ c_μ (the noise
  terms have mean 0 in a product of independent halves: the split-half idea); averaged over every
  split it is the U-statistic over pairs of distinct outside groups (``ideal_terms``). The room is
  √(mean over batches of Q/‖μ‖²_U) − mean cos_μ(none) (``ideal_room``); a test holds it near the
  room computed from a known μ.
* **Bounded ceiling.** The best weights within a box lo ≤ w_q ≤ hi (a modulator's own range of ω;
  0 ≤ lo): ``box_cosine_max``. The cosine is scale-invariant, so the box matters only through
  hi/lo; f(w) = c·w / √(wᵀK_B w) is quasi-concave where c·w > 0 (its upper level sets are
  second-order cones), so projected gradient ascent from equal weights finds the box maximum.
* **Ordering ceiling.** A modulator's own batch weights given to the batch's groups in the best of
  the k! orders (``best_order``; k ≤ 6).

Every fitter is a function c ↦ W (n_batches, k); ``crossfit`` runs one both ways over the halves.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import permutations

import numpy as np

RIDGE = 1e-6  # λ of the oracle weights (K_B + λI)⁻¹ c_B (stats.alignment uses it too)

Fitter = Callable[[np.ndarray], np.ndarray]
MAX_ORDER_K = 6  # 720 orders a batch


def pool_ids(K: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
    """The original group of each pool position (``ids``, default each its own), checked with the
    pool's Gram ``K``: K square and finite (a NaN entry turned into a NaN ‖μ‖² or, through
    nan_to_num, into a fitted weight without a word), ids one integer >= 0 per position (a
    negative one indexed from the end)."""
    K = np.asarray(K)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"the pool's Gram K must be a square matrix, got shape {K.shape}")
    if not np.isfinite(K).all():
        i, j = np.argwhere(~np.isfinite(K))[0]
        raise ValueError(f"the pool's Gram K must be finite, K[{i}, {j}] is {K[i, j]}")
    n = K.shape[0]
    if ids is None:
        return np.arange(n)
    ids = np.asarray(ids)
    if ids.shape != (n,) or ids.dtype.kind not in "iu" or (ids < 0).any():
        raise ValueError(f"ids must give one original group (an integer >= 0) per pool position ({n}), got {ids}")
    return ids


def mean_norm2(K: np.ndarray, ids: np.ndarray | None = None) -> float:
    """‖μ‖²_U: the mean of K_pp' over pairs of positions holding distinct original groups (``ids``;
    in a bootstrap resample two copies of a group are no independent pair). Unbiased for ‖μ‖²
    when the groups are independent draws; may be ≤ 0 when the signal is small."""
    ids = pool_ids(K, ids)
    distinct = ids[:, None] != ids[None, :]
    if not distinct.any():
        return float("nan")
    return float(K[distinct].mean())


def split_outside(
    idx: np.ndarray, n_ids: int, ids: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Position masks (n_batches, n) of the two halves of each batch's outside groups: the distinct
    original groups present and outside the batch, split at random, ⌊m/2⌋ to A, the rest to B (a
    group's copies go together)."""
    nb = len(idx)
    present = np.zeros(n_ids, bool)
    present[ids] = True
    member = np.zeros((nb, n_ids), bool)
    member[np.arange(nb)[:, None], ids[idx]] = True
    outside = present[None, :] & ~member
    keys = np.where(outside, rng.random((nb, n_ids)), 2.0)
    rank = np.argsort(np.argsort(keys, axis=1), axis=1)
    in_a = rank < (outside.sum(1) // 2)[:, None]
    return in_a[:, ids], (outside & ~in_a)[:, ids]


def half_references(
    K: np.ndarray, idx: np.ndarray, rng: np.random.Generator, ids: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(c, ‖r‖²) of the two halves (``split_outside``) of each batch's outside groups: c
    (2, n_batches, k) the members' inner products with each half's mean, ‖r‖² (2, n_batches);
    NaN for a half with no group."""
    ids = pool_ids(K, ids)
    cs, n2s = [], []
    for half in split_outside(idx, int(ids.max()) + 1, ids, rng):
        pos = half.astype(float)
        m = pos.sum(1)
        KR = pos @ K
        with np.errstate(invalid="ignore", divide="ignore"):
            cs.append(np.take_along_axis(KR, idx, axis=1) / m[:, None])
            n2s.append((KR * pos).sum(1) / m**2)
    return np.stack(cs), np.stack(n2s)


def block(K: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """K_B of every batch: (n_batches, k, k)."""
    return K[idx[:, :, None], idx[:, None, :]]


def inner_and_norm(W: np.ndarray, KB: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w·c, ‖ĝ_w‖ = √(wᵀK_B w)) per batch; W (nb, k) or (nb, m, k) for m candidates a batch."""
    if W.ndim == 2:
        return (W * c).sum(-1), np.sqrt(np.clip(((KB @ W[..., None])[..., 0] * W).sum(-1), 0.0, None))
    return (W * c[:, None, :]).sum(-1), np.sqrt(np.clip(((W @ KB) * W).sum(-1), 0.0, None))


def cosine(W: np.ndarray, KB: np.ndarray, c: np.ndarray, ref_norm2: np.ndarray | float) -> np.ndarray:
    """cos(ĝ_w, r) = w·c / (‖ĝ_w‖ ‖r‖) per batch (NaN where ĝ_w = 0 or ‖r‖ = 0)."""
    inner, norm = inner_and_norm(W, KB, c)
    with np.errstate(invalid="ignore"):  # a negative ‖μ‖²_U: no scale (NaN)
        rn = np.sqrt(np.asarray(ref_norm2, float))
    if W.ndim == 3 and np.ndim(rn) == 1:
        rn = rn[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((norm > 0) & (rn > 0), inner / (norm * rn), np.nan)


def oracle_fitter(KB: np.ndarray, ridge: float = RIDGE) -> Fitter:
    """c ↦ (K_B + λI)⁻¹ c, λ = ridge · tr(K_B)/k: the cosine's maximiser over all real weights."""
    if not (np.isfinite(ridge) and ridge >= 0):  # NaN gave NaN weights; a negative λ, a singular solve
        raise ValueError(f"ridge must be a finite number >= 0, got {ridge!r}")
    k = KB.shape[1]
    lam = ridge * np.maximum(np.trace(KB, axis1=1, axis2=2) / k, 1e-300)
    A = KB + lam[:, None, None] * np.eye(k)
    return lambda c: np.linalg.solve(A, np.nan_to_num(c)[..., None])[..., 0]


def box_cosine_max(KB: np.ndarray, c: np.ndarray, lo: float, hi: float, n_iter: int = 300) -> np.ndarray:
    """argmax of cos(ĝ_w, r) over the box lo ≤ w_q ≤ hi, per batch (module docstring): projected
    gradient ascent from equal weights, a step per batch that grows by 1.5 on success and halves
    on failure; a step is kept only if it raises the cosine, so the result is never below equal
    weights. ∇f = c/‖ĝ‖ − (w·c) K_B w / ‖ĝ‖³ for f = w·c/‖ĝ‖ (‖r‖ is a constant factor)."""
    if not 0 <= lo <= hi < np.inf:  # hi = inf: the weights went to inf
        raise ValueError(f"a box of weights needs finite 0 <= lo <= hi, got [{lo}, {hi}]")
    c = np.nan_to_num(np.asarray(c, float))
    nb, k = c.shape
    W = np.full((nb, k), (lo + hi) / 2 if hi > 0 else 1.0)
    if hi == lo:
        return W

    def f(W):
        inner, norm = inner_and_norm(W, KB, c)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(norm > 0, inner / norm, -np.inf)

    best = f(W)
    step = np.full(nb, hi - lo)
    active = np.arange(nb)  # batches still moving: a step above 1e-9 of the box
    for _ in range(n_iter):
        active = active[step[active] > 1e-9 * (hi - lo)]
        if not active.size:
            break
        Wa, Ka, ca = W[active], KB[active], c[active]
        KW = (Ka @ Wa[..., None])[..., 0]
        norm = np.sqrt(np.clip((Wa * KW).sum(1), 1e-300, None))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            grad = ca / norm[:, None] - ((Wa * ca).sum(1) / norm**3)[:, None] * KW
        grad = np.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0)
        scale = np.abs(grad).max(1)
        direction = grad / np.where(scale > 0, scale, 1.0)[:, None]
        with np.errstate(invalid="ignore"):  # a batch with no gradient: NaN, never taken
            cand = np.clip(Wa + step[active, None] * direction, lo, hi)
            inner, cn = inner_and_norm(cand, Ka, ca)
            fc = np.where(cn > 0, inner / cn, -np.inf)
        up = fc > best[active]
        W[active[up]], best[active[up]] = cand[up], fc[up]
        step[active] = np.where(up, np.minimum(step[active] * 1.5, hi - lo), step[active] * 0.5)
    return W


def box_fitter(KB: np.ndarray, lo: float, hi: float, n_iter: int = 300) -> Fitter:
    return lambda c: box_cosine_max(KB, c, lo, hi, n_iter)


def orders(k: int) -> np.ndarray:
    """Every permutation of range(k): (k!, k)."""
    if k < 1:
        raise ValueError(f"the ordering ceiling orders a batch of k >= 1 groups, got k = {k}")
    if k > MAX_ORDER_K:
        raise ValueError(f"the ordering ceiling tries all k! orders; k = {k} > {MAX_ORDER_K} is too many")
    return np.array(list(permutations(range(k))))


def best_order(W: np.ndarray, KB: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Each batch's own weights W (nb, k) in the order (of all k!) whose cosine with c is highest."""
    candidates = np.asarray(W, float)[:, orders(W.shape[1])]  # (nb, k!, k)
    inner, norm = inner_and_norm(candidates, KB, np.nan_to_num(c))
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(norm > 0, inner / norm, -np.inf)
    return candidates[np.arange(len(W)), np.argmax(score, axis=1)]


def order_fitter(KB: np.ndarray, W: np.ndarray) -> Fitter:
    return lambda c: best_order(W, KB, c)


def crossfit(fit: Fitter, KB: np.ndarray, halves: tuple[np.ndarray, np.ndarray], mu2: float) -> dict[str, np.ndarray]:
    """Per batch, weights fitted on one half scored on the other, both ways, averaged: ``dcos``
    (Δcos against equal weights, both scored on the same half reference) and ``dcos_mu`` (the same
    on the noise-corrected scale, ‖μ‖_U in place of the half's norm). NaN where a half is empty."""
    c, n2 = halves
    ones = np.ones(c.shape[1:])
    dcos, dmu = [], []
    for fit_half, score_half in ((0, 1), (1, 0)):
        W = fit(c[fit_half])
        cs, n2s = c[score_half], n2[score_half]
        dcos.append(cosine(W, KB, cs, n2s) - cosine(ones, KB, cs, n2s))
        dmu.append(cosine(W, KB, cs, mu2) - cosine(ones, KB, cs, mu2))
    return {"dcos": np.mean(dcos, axis=0), "dcos_mu": np.mean(dmu, axis=0)}


def in_sample(fit: Fitter, KB: np.ndarray, c: np.ndarray, ref_norm2: np.ndarray, mu2: float) -> dict[str, np.ndarray]:
    """The same fitter fitted on and scored against the one reference c (upper-biased)."""
    W = fit(c)
    ones = np.ones(c.shape)
    return {
        "dcos": cosine(W, KB, c, ref_norm2) - cosine(ones, KB, c, ref_norm2),
        "dcos_mu": cosine(W, KB, c, mu2) - cosine(ones, KB, c, mu2),
    }


def ideal_terms(
    K: np.ndarray, idx: np.ndarray, c: np.ndarray, mu2: float, ids: np.ndarray | None = None, ridge: float = RIDGE
) -> tuple[np.ndarray, np.ndarray]:
    """Per batch (Q / ‖μ‖²_U, cos_μ(none)): Q the U-statistic of c_μᵀ K_B⁻¹ c_μ over pairs of
    distinct outside groups, Q = Σ_{p≠p'} c_pᵀ S c_p' / #pairs with c_p = K_{B,p} and
    S = (K_B + λI)⁻¹ (the split-half product averaged over every split), and equal weights'
    cosine with μ on the full reference c. The room estimate is ``ideal_room`` of the two."""
    ids = pool_ids(K, ids)
    nb, k = idx.shape
    KB = block(K, idx)
    S = np.linalg.inv(KB + (ridge * np.maximum(np.trace(KB, axis1=1, axis2=2) / k, 1e-300))[:, None, None] * np.eye(k))
    member = np.zeros((nb, int(ids.max()) + 1), bool)
    member[np.arange(nb)[:, None], ids[idx]] = True
    outside = ~member[:, ids]  # (nb, n) positions whose group is outside the batch
    copies = np.bincount(ids)[ids]  # of each position's group in the pool
    m = outside.sum(1)
    rows = K[idx]  # (nb, k, n): c_p of every position p
    total = m[:, None] * np.nan_to_num(c)  # Σ_p c_p over outside positions
    # Σ over pairs of copies of one group: a group of n copies adds n² c cᵀ, n c cᵀ from each copy
    weight = outside * copies[None, :]
    same = (rows * weight[:, None, :]) @ rows.transpose(0, 2, 1)
    pairs = m**2 - weight.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        Q = (((S @ total[..., None])[..., 0] * total).sum(1) - (S * same).sum((1, 2))) / pairs  # S, same symmetric
    Q = np.where(pairs > 0, Q, np.nan)  # outside groups of one original group: no pair, no estimate (was ±inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        return Q / mu2, cosine(np.ones(c.shape), KB, c, mu2)


def ideal_room(q_over_mu2: np.ndarray, cos_none_mu: np.ndarray) -> float:
    """Estimate of the mean room E_B[max_w cos(ĝ_w, μ) − cos(ĝ_none, μ)] from ``ideal_terms``:
    √(mean_B Q/‖μ‖²) − mean_B cos_μ(none). The mean of Q is unbiased for mean cos*²; its square
    root is at least the mean cos* (Jensen), so the room is, if anything, overstated (by 0.001–0.004
    in cosine on the test's pools). A per-batch √Q would be biased down where Q is noisy."""
    ok = np.isfinite(q_over_mu2) & np.isfinite(cos_none_mu)
    if not ok.any():
        return float("nan")
    mean_q = float(np.mean(q_over_mu2[ok]))
    return float(np.sign(mean_q) * np.sqrt(abs(mean_q)) - np.mean(cos_none_mu[ok]))
