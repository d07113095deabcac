"""The update-alignment statistics: does a group weighting point a batch's gradient
closer to the expected gradient? Pure numpy on a Gram; the model half is ``gcpo_train.align``.

Pool groups q = 1..P with GRPO gradients g_q enter only through their Gram K_pq = g_p·g_q. A batch
B of k pool positions with weights w (one per group) gives the weighted batch gradient

    ĝ_w(B) = (1/k) Σ_{q∈B} w̃_q g_q,    w̃ = w / mean_{q∈B live} |w_q|

(live: g_q ≠ 0, i.e. K_qq > 0; a dead group adds nothing whatever its weight, so it does not set
the scale). Dividing by the batch's mean weight makes every statistic blind to a uniform
rescaling of w, per batch, as Adam nearly is. The reference r_B is the mean gradient over the
pool groups not in B (leave-batch-out, so r_B is independent of the batch) or a fixed r (the mean
of a disjoint reference pool; then ``b_q = g_q·r`` and ‖r‖² are given). With c_q = g_q·r_B,

    ĝ·r_B = (1/k) Σ_q w̃_q c_q,   ‖ĝ‖² = (1/k²) w̃ᵀ K_B w̃,   cos_w(B) = ĝ·r_B / (‖ĝ‖ ‖r_B‖),
    ‖r_B‖² = (1/m²) Σ_{p,p'∉B} K_pp'   (m = P − k pool groups outside B).

SNR over the n batch draws of one size: S = (1/(n(n−1))) Σ_{b≠b'} ĝ_b·ĝ_b' (unbiased for ‖E ĝ‖²),
E‖ĝ‖² = (1/n) Σ_b ‖ĝ_b‖², SNR_w = S / (E‖ĝ‖² − S) = ‖E ĝ‖² / E‖ĝ − E ĝ‖².

The oracle ceiling: w*_B = (K_B + λI)⁻¹ c_B, λ = ridge · tr(K_B)/k. By Cauchy–Schwarz in the K_B
metric, K_B⁻¹c_B maximises wᵀc_B / √(wᵀK_B w), the cosine, over all real w (for λ → 0); its weights
may be negative, so it bounds every per-group reweighting, measurable or not. Its SNR uses the
same normalisation (mean |w| over live groups).

The oracle is fitted to the reference that scores it, which is a noisy mean of the other groups:
its in-sample Δcos overstates the room. ``alignment_ceilings`` adds the cross-fitted oracle
(fitted on half the outside groups, scored on the other half), the noise-corrected scale
(cos_μ: ‖μ‖ estimated by a U-statistic in place of the reference's norm) and the U-statistic
estimate of the ideal room; ``alignment`` reports them beside the oracle (``CEILINGS``).

Uncertainty: a group bootstrap. Each replicate resamples the P pool groups with replacement,
redraws the batches from the resample, and recomputes every weighting's mean Δcos (paired by
batch), Δcos_μ and ΔSNR against ``none``; a copy of a batch member never serves as its
reference, and the halves of a cross-fit keep a group's copies together. CIs are percentile
intervals, p the two-sided bootstrap p with the add-one (``bootstrap_p``), Holm over the
modulators of one (snapshot, batch size, statistic); the ceilings are maxima by construction and
are described, never tested. Hand-written: no library computes a cosine from a Gram; tests check
it against explicit gradients.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ORACLE = "oracle"
ORACLE_CF = "oracle, cross-fitted"  # fitted on half the outside groups, scored on the other half
IDEAL_ROOM = "ideal room"  # the U-statistic estimate of max cos with μ − equal weights' (against μ)
CEILINGS = (ORACLE, ORACLE_CF, IDEAL_ROOM)  # described with CIs, never in the Holm family
SHUFFLED = " (shuffled)"
from .alignment_ceilings import RIDGE  # noqa: E402  (one λ for the in-sample and cross-fitted oracles)


def draw_batches(n: int, k: int, n_batches: int, rng: np.random.Generator) -> np.ndarray:
    """(n_batches, k) positions, each row k distinct positions of 0..n−1, uniformly at random."""
    if not 1 <= k <= n:
        raise ValueError(f"a batch of {k} groups needs 1 <= k <= {n} pool groups")
    return np.argsort(rng.random((n_batches, n)), axis=1)[:, :k]


def reference_terms(
    K: np.ndarray,
    idx: np.ndarray,
    ids: np.ndarray | None = None,
    b: np.ndarray | None = None,
    ref_norm2: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(c, ‖r_B‖²): c (n_batches, k) the inner products g_q·r_B of each batch member with its
    batch's reference, ‖r_B‖² (n_batches,). K is the Gram of the (resampled) pool; ``ids`` the
    original group of each position, in a resample (a copy of a batch member is left out of its
    reference; a batch whose groups are all the resample holds gets no reference: cos NaN);
    ``b``/``ref_norm2``: a fixed reference's inner products (P,) and squared norm instead."""
    n = K.shape[0]
    resampled = ids is not None
    if b is not None:
        if ref_norm2 is None:
            raise ValueError("a fixed reference needs ref_norm2 (its squared norm) with b")
        return np.asarray(b, float)[idx], np.full(len(idx), float(ref_norm2))
    ids = np.arange(n) if ids is None else np.asarray(ids)
    member = np.zeros((len(idx), int(ids.max()) + 1), bool)
    member[np.arange(len(idx))[:, None], ids[idx]] = True  # the batch's original groups
    rest = ~member[:, ids]  # (n_batches, n): positions whose group is outside the batch
    m = rest.sum(1)
    if (m == 0).any() and not resampled:
        raise ValueError("a batch holds every pool group: no leave-batch-out reference is left")
    KR = rest.astype(float) @ K  # (n_batches, n): Σ_{p∉B} K_pq
    # a resample can hold only a batch's groups: that batch has no reference (cos NaN, c = 0)
    m_safe = np.maximum(m, 1)
    c = np.take_along_axis(KR, idx, axis=1) / m_safe[:, None]
    rnorm2 = np.where(m > 0, (KR * rest).sum(1) / m_safe**2, np.nan)
    return c, rnorm2


def normalise_weights(W: np.ndarray, live: np.ndarray) -> np.ndarray:
    """w̃ = w / mean |w| over the batch's live groups (module docstring); a batch with no live
    group, or whose live weights are all 0, gets w̃ = 0 (its ĝ is 0 whatever the weights)."""
    W = np.asarray(W, float)
    live = np.asarray(live, bool)
    scale = np.where(live, np.abs(W), 0.0).sum(1) / np.maximum(live.sum(1), 1)
    ok = scale > 0
    out = np.zeros_like(W)
    out[ok] = W[ok] / scale[ok, None]
    return out


def oracle_weights(K: np.ndarray, idx: np.ndarray, c: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """w*_B = (K_B + λI)⁻¹ c_B per batch, λ = ridge · tr(K_B)/k (a tiny floor for an all-dead batch)."""
    KB = K[idx[:, :, None], idx[:, None, :]]  # (n_batches, k, k)
    k = idx.shape[1]
    lam = ridge * np.maximum(np.trace(KB, axis1=1, axis2=2) / k, 1e-300)
    return np.linalg.solve(KB + lam[:, None, None] * np.eye(k), c[..., None])[..., 0]


def shuffle_weights(W: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each row's weights permuted at random: the same multiset, no link to the group."""
    return rng.permuted(np.asarray(W, float), axis=1)


def batch_statistics(
    K: np.ndarray, idx: np.ndarray, Wn: np.ndarray, c: np.ndarray, rnorm2: np.ndarray, KB: np.ndarray | None = None
) -> tuple[dict[str, np.ndarray], float]:
    """Per batch: inner ĝ·r_B, norm2 ‖ĝ‖², cos; and the weighting's SNR over the batches.
    Wn: normalised weights (n_batches, k); KB: the batches' Gram blocks K[idx, idx] if at hand.
    Σ_{b,b'} ĝ_b·ĝ_b' = sᵀKs with s = Σ_b (the coefficients of ĝ_b on the pool)."""
    nb, k = idx.shape
    if KB is None:
        KB = K[idx[:, :, None], idx[:, None, :]]
    norm2 = np.clip(((KB @ Wn[..., None])[..., 0] * Wn).sum(1) / k**2, 0.0, None)
    inner = (Wn * c).sum(1) / k
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where((norm2 > 0) & (rnorm2 > 0), inner / np.sqrt(norm2 * rnorm2), np.nan)
    s = np.bincount(idx.ravel(), weights=(Wn / k).ravel(), minlength=K.shape[0])
    signal = (s @ K @ s - norm2.sum()) / (nb * (nb - 1))
    noise = norm2.mean() - signal
    snr = float(signal / noise) if noise > 0 else float("nan")
    return {"inner": inner, "norm2": norm2, "cos": cos}, snr


def weight_matrix(
    weights: dict[str, np.ndarray], idx: np.ndarray, rng: np.random.Generator, shuffled: bool = True
) -> dict[str, np.ndarray]:
    """Per weighting its (n_batches, k) raw weights: every modulator's ω at the batch's groups, and
    (``shuffled``) each one shuffled within the batch (``SHUFFLED`` suffix; ``none`` has no
    shuffle, it is constant)."""
    out = {}
    for name, w in weights.items():
        out[name] = np.asarray(w, float)[idx]
    for name in weights if shuffled else ():
        if name != "none":
            out[name + SHUFFLED] = shuffle_weights(out[name], rng)
    return out


def alignment(
    K: np.ndarray,
    weights: dict[str, np.ndarray],
    batch_size: int,
    n_batches: int,
    rng: np.random.Generator,
    ids: np.ndarray | None = None,
    b: np.ndarray | None = None,
    ref_norm2: float | None = None,
    ridge: float = RIDGE,
    shuffled: bool = True,
    ceilings: bool = True,
) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, float], np.ndarray]:
    """Every weighting's per-batch statistics and SNR on ``n_batches`` random batches of
    ``batch_size``; weights: name → (P,) ω per pool position (``none`` required). Returns
    (per weighting {inner, norm2, cos, cos_mu}, per weighting SNR, the batches (n_batches, k)).
    cos_mu: the cosine on the noise-corrected scale, ‖μ‖_U for the reference's norm
    (``alignment_ceilings``; NaN with a fixed reference). ``ceilings``: the in-sample oracle, and
    with the leave-batch-out reference the cross-fitted oracle ({dcos, dcos_mu} per batch) and the
    ideal room's terms ({q, cos_none_mu}); ``shuffled``: each weighting shuffled within the batch."""
    from .alignment_ceilings import block, crossfit, half_references, ideal_terms, mean_norm2, oracle_fitter

    if "none" not in weights:
        raise ValueError("weights must include 'none' (equal weights), the baseline")
    idx = draw_batches(K.shape[0], batch_size, n_batches, rng)
    c, rnorm2 = reference_terms(K, idx, ids, b, ref_norm2)
    live = np.diag(K)[idx] > 0
    KB = block(K, idx)
    mu2 = mean_norm2(K, ids) if b is None else float("nan")
    raw = weight_matrix(weights, idx, rng, shuffled)
    if ceilings:
        raw[ORACLE] = oracle_weights(K, idx, c, ridge)
    per_batch, snr = {}, {}
    for name, W in raw.items():
        per_batch[name], snr[name] = batch_statistics(K, idx, normalise_weights(W, live), c, rnorm2, KB)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_batch[name]["cos_mu"] = per_batch[name]["cos"] * np.sqrt(rnorm2 / mu2) if mu2 > 0 else np.nan * c[:, 0]
    if ceilings and b is None:
        halves = half_references(K, idx, rng, ids)
        per_batch[ORACLE_CF] = crossfit(oracle_fitter(KB, ridge), KB, halves, mu2)
        q, cos_none_mu = ideal_terms(K, idx, c, mu2, ids, ridge)
        per_batch[IDEAL_ROOM] = {"q": q, "cos_none_mu": cos_none_mu}
        snr[ORACLE_CF] = snr[IDEAL_ROOM] = float("nan")
    return per_batch, snr, idx


def deltas(per_batch: dict, snr: dict) -> dict[str, dict[str, float]]:
    """Per statistic (``dcos``, ``dcos_mu``, ``dsnr``) and weighting: the mean Δcos against
    ``none`` over the batches where both cosines exist (paired), the same on the noise-corrected
    scale, and ΔSNR. A cross-fitted ceiling carries its own per-batch Δ (against equal weights on
    its half references); the ideal room is ``ideal_room`` of its terms."""
    from .alignment_ceilings import ideal_room

    def mean(d):
        return float(np.nanmean(d)) if np.isfinite(d).any() else float("nan")

    out: dict[str, dict[str, float]] = {"dcos": {}, "dcos_mu": {}, "dsnr": {}}
    for name, stats in per_batch.items():
        if "q" in stats:
            room = ideal_room(stats["q"], stats["cos_none_mu"])
            out["dcos"][name], out["dcos_mu"][name] = float("nan"), room
        elif "dcos" in stats:
            out["dcos"][name], out["dcos_mu"][name] = mean(stats["dcos"]), mean(stats["dcos_mu"])
        else:
            out["dcos"][name] = mean(stats["cos"] - per_batch["none"]["cos"])
            out["dcos_mu"][name] = mean(stats["cos_mu"] - per_batch["none"]["cos_mu"])
        out["dsnr"][name] = snr[name] - snr["none"]
    return out


def bootstrap_p(samples: np.ndarray) -> float:
    """Two-sided bootstrap p of 0 over the B finite replicates, with the add-one of Davison &
    Hinkley (1997, eq. 4.11): min(1, 2 (1 + min(#{Δ* ≤ 0}, #{Δ* ≥ 0})) / (B + 1)). Never 0: its
    floor 2/(B + 1) says what B can resolve (a p of 0 from 200 replicates passed Holm over 19
    weightings, which 200 replicates cannot support)."""
    s = np.asarray(samples, float)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return float("nan")
    tail = min(int((s <= 0).sum()), int((s >= 0).sum()))
    return float(min(1.0, 2 * (1 + tail) / (s.size + 1)))


def group_bootstrap(
    K: np.ndarray,
    weights: dict[str, np.ndarray],
    batch_size: int,
    n_batches: int,
    n_boot: int,
    rng: np.random.Generator,
    b: np.ndarray | None = None,
    ref_norm2: float | None = None,
    ridge: float = RIDGE,
    shuffled: bool = True,
    ceilings: bool = True,
) -> dict[str, dict[str, np.ndarray]]:
    """Replicates of every weighting's ``deltas``: pool groups resampled with replacement, batches
    redrawn from the resample (module docstring). Returns {statistic: {name: (n_boot,)}}."""
    P = K.shape[0]
    reps: dict[str, dict[str, list]] = {}
    for _ in range(n_boot):
        ids = np.asarray(rng.integers(P, size=P))
        Kr = K[np.ix_(ids, ids)]
        wr = {name: np.asarray(w, float)[ids] for name, w in weights.items()}
        br = None if b is None else np.asarray(b, float)[ids]
        per_batch, snr, _ = alignment(
            Kr, wr, batch_size, n_batches, rng, ids, br, ref_norm2, ridge, shuffled=shuffled, ceilings=ceilings
        )
        for stat, values in deltas(per_batch, snr).items():
            for name, v in values.items():
                reps.setdefault(stat, {}).setdefault(name, []).append(v)
    return {stat: {k: np.array(v) for k, v in d.items()} for stat, d in reps.items()}


def batch_frame(per_batch: dict, idx: np.ndarray, batch_size: int, n_rows: int | None = None) -> pd.DataFrame:
    """The per-batch frame: one row per (batch, weighting) with cos, ĝ·r_B, ‖ĝ‖² and the groups,
    for the first ``n_rows`` batches (all by default) and the weightings with a per-batch cosine."""
    n_rows = len(idx) if n_rows is None else min(n_rows, len(idx))
    idx = idx[:n_rows]
    per_batch = {name: {k: v[:n_rows] for k, v in s.items()} for name, s in per_batch.items() if "cos" in s}
    groups = [" ".join(map(str, row)) for row in idx]
    frames = [
        pd.DataFrame(
            {
                "batch_size": batch_size,
                "batch": np.arange(len(idx)),
                "weighting": name,
                "groups": groups,
                "cos": s["cos"],
                "inner": s["inner"],
                "norm2": s["norm2"],
            }
        )
        for name, s in per_batch.items()
    ]
    return pd.concat(frames, ignore_index=True)
