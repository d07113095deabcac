"""Seed-level statistics of a paired comparison (issue 35): the unit that varies independently
between two arms is the training seed, so the primary analysis works on the per-seed deltas.

For arms A (treated) and B (the reference, GRPO ``none``) trained with the same seeds s = 1..S and
evaluated on the same queries q = 1..Q, ``d[s, q] = score_A(s, q) − score_B(s, q)`` and the
per-seed delta is ``D_s = mean_q d[s, q]``. Under the model

    D_s = Δ + u_s + ē_s,   u_s ~ (0, τ²) between seeds,   ē_s ~ (0, σ_q² / Q) from the queries,

the seed-level analysis is:

* ``paired_t``: the paired t interval Δ̂ ± t_{S−1} · sd(D) / √S (df = S − 1), scipy's
  ``ttest_1samp(D).confidence_interval``. Exact coverage under normal D_s; the seeds, not the
  queries, set its width.
* ``sign_flip_p``: the exact randomisation p of H0 "the arm labels are exchangeable within a
  seed": under H0 each D_s is as likely to be −D_s, so p = share of the 2^S sign vectors ε whose
  |mean(ε·D)| ≥ |mean(D)|. Its smallest value is 2/2^S (0.25 at three seeds).
* ``two_level_bootstrap``: resample seeds with replacement, then queries with replacement within
  each drawn seed (the hierarchical bootstrap of Davison & Hinkley 1997, §3.8, "strategy 1");
  percentile interval. Written here: no scipy or statsmodels routine resamples a two-level design.
* ``tost``: two one-sided t tests of |Δ| ≥ δ (statsmodels ``ttost_paired`` on D against 0); p < α
  means "equivalent within ±δ" (the (1 − 2α) t interval lies inside ±δ).
* ``verdict``: "better" (the t interval above 0), "worse" (below 0), "equivalent within ±δ"
  (TOST p < α), else "inconclusive".

``variance_components`` and the power functions (``seeds_for_power``, ``detectable_delta``) plan
the number of seeds: the sd of D_s is √(τ² + σ_q²/Q), and a paired t test of S seeds has the
power of a one-sample t test with effect size Δ / sd(D) (statsmodels ``TTestPower``, the
noncentral t).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.typing import ArrayLike

VERDICTS = ("better", "worse", "equivalent within ±δ", "inconclusive")
EXACT_SIGN_FLIPS_MAX = 16  # 2^16 = 65,536 sign vectors: exact below this, Monte Carlo above


def _deltas(d: ArrayLike) -> np.ndarray:
    d = np.asarray(d, dtype=float)
    if d.ndim != 1 or d.size < 2:
        raise ValueError(f"per-seed deltas must be a finite 1-d array of at least 2 seeds, got shape {d.shape}")
    bad = np.flatnonzero(~np.isfinite(d))
    if bad.size:  # the shape is fine: say which seed is not
        raise ValueError(f"per-seed deltas must be finite: seed {bad[0]} (0-based) has {d[bad[0]]}, {bad.size} such")
    return d


def _power_of_two(d: np.ndarray) -> float:
    """A power of two near max |d| (d not all 0). Sums of deltas near 1e308 overflow in scipy and
    statsmodels; dividing by a power of two is exact, so the t statistics and p of d / scale are
    those of d, and intervals scale back exactly."""
    return float(2.0 ** (np.frexp(np.abs(d).max())[1] - 1))


def _matrix(d: ArrayLike) -> np.ndarray:
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or d.shape[0] < 2 or d.shape[1] < 1 or not np.isfinite(d).all():
        raise ValueError(f"d must be a finite (seeds, queries) array with at least 2 seeds, got shape {d.shape}")
    return d


def paired_t(deltas: ArrayLike, confidence: float = 0.95) -> dict:
    """Paired t of the per-seed deltas D: {"mean", "low", "high", "p", "df", "sd"} (two-sided p of
    Δ = 0; interval mean ± t_{S−1, (1+c)/2} · sd/√S)."""
    from scipy import stats

    d = _deltas(deltas)
    if np.all(d == d[0]):  # every seed the same delta: the t statistic is undefined, the interval a point
        mean = float(d[0])
        return {"mean": mean, "low": mean, "high": mean, "p": float(mean == 0), "df": int(d.size - 1), "sd": 0.0}
    scale = _power_of_two(d)
    x = d / scale
    res = stats.ttest_1samp(x, 0.0)
    ci = res.confidence_interval(confidence)
    return {
        "mean": float(x.mean()) * scale,
        "low": float(ci.low) * scale,
        "high": float(ci.high) * scale,
        "p": float(res.pvalue),
        "df": int(d.size - 1),
        "sd": float(x.std(ddof=1)) * scale,
    }


def sign_flip_p(deltas: ArrayLike, n_resamples: int = 65_536, seed: int = 0) -> float:
    """Two-sided randomisation p of the mean of D under sign flips: exact (all 2^S sign vectors)
    for S ≤ 16, else ``n_resamples`` random sign vectors (the observed one counted in, so p > 0)."""
    d = _deltas(deltas)
    observed = abs(d.mean())
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))  # the observed vector and its mirror tie exactly
    if d.size <= EXACT_SIGN_FLIPS_MAX:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        return float(np.mean(np.abs(signs @ d) / d.size >= observed - tol))
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(n_resamples, d.size))
    hits = np.sum(np.abs(signs @ d) / d.size >= observed - tol)
    return float((hits + 1) / (n_resamples + 1))


def two_level_bootstrap(
    d: ArrayLike, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0, chunk: int = 500
) -> tuple[float, float]:
    """Percentile interval of mean d over resamples that draw S seeds with replacement and then,
    for each drawn seed, Q of its queries with replacement (d: seeds x queries)."""
    d = _matrix(d)
    S, Q = d.shape
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        seeds = rng.integers(0, S, size=(b, S))
        queries = rng.integers(0, Q, size=(b, S, Q))
        means[start : start + b] = d[seeds[:, :, None], queries].mean(axis=(1, 2))
    a = (1.0 - confidence) / 2
    low, high = np.quantile(means, [a, 1 - a])
    return float(low), float(high)


def tost(deltas: ArrayLike, margin: float) -> float:
    """p of the two one-sided t tests of H0: |Δ| ≥ margin (statsmodels ``ttost_paired`` of D
    against 0, bounds ±margin): the larger of the two one-sided p-values."""
    from statsmodels.stats.weightstats import ttost_paired

    d = _deltas(deltas)
    if isinstance(margin, (bool, np.bool_)) or not (np.isfinite(margin) and margin > 0):
        raise ValueError(f"the equivalence margin δ must be a positive number, got {margin!r}")
    if np.all(d == d[0]):  # no spread: equivalent exactly when the common delta is inside ±margin
        return float(not abs(d[0]) < margin)
    scale = _power_of_two(d)
    p, _, _ = ttost_paired(d / scale, np.zeros_like(d), -margin / scale, margin / scale)
    return float(p)


def verdict(low: float, high: float, tost_p: float, alpha: float = 0.05) -> str:
    """One of ``VERDICTS`` from the (1 − α) t interval [low, high] and the TOST p at ±δ. A
    significant difference wins over equivalence (a difference inside ±δ but clear of 0 is
    "better"/"worse")."""
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    if tost_p < alpha:
        return "equivalent within ±δ"
    return "inconclusive"


def seed_level(d: ArrayLike, margin: float, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0) -> dict:
    """Every seed-level statistic of one arm against the reference from d (seeds x queries):
    the paired t interval, the sign-flip p, the two-level bootstrap interval, the TOST p at ±margin
    and the verdict (α = 1 − confidence)."""
    d = _matrix(d)
    per_seed = d.mean(axis=1)
    t = paired_t(per_seed, confidence)
    boot_low, boot_high = two_level_bootstrap(d, n_resamples, confidence, seed)
    p_eq = tost(per_seed, margin)
    return {
        "delta": t["mean"],
        "delta_low": t["low"],
        "delta_high": t["high"],
        "df": t["df"],
        "p_t": t["p"],
        "p": sign_flip_p(per_seed),
        "boot2_low": boot_low,
        "boot2_high": boot_high,
        "margin": float(margin),
        "p_tost": p_eq,
        "verdict": verdict(t["low"], t["high"], p_eq, 1.0 - confidence),
    }


# ---------------------------------------------------------------------- planning the seeds
def variance_components(d: ArrayLike) -> dict:
    """τ² and σ_q² of the model in the module docstring from d (seeds x queries), by the moment
    method of the one-way random-effects ANOVA: σ_q² = mean_s var_q(d[s, :]) (ddof 1), and
    τ² = max(0, var_s(D_s) − σ_q²/Q). Returns {"tau", "sigma_q", "sd_delta", "share_between",
    "seeds", "queries"}; sd_delta = sd of the per-seed deltas (ddof 1)."""
    d = _matrix(d)
    S, Q = d.shape
    per_seed = d.mean(axis=1)
    var_d = float(per_seed.var(ddof=1))
    sigma2 = float(d.var(axis=1, ddof=1).mean()) if Q > 1 else 0.0
    tau2 = max(0.0, var_d - sigma2 / Q)
    return {
        "tau": math.sqrt(tau2),
        "sigma_q": math.sqrt(sigma2),
        "sd_delta": math.sqrt(var_d),
        "share_between": tau2 / var_d if var_d > 0 else float("nan"),
        "seeds": S,
        "queries": Q,
    }


def planning_sd(tau: float, sigma_q: float, queries: int) -> float:
    """The sd of one seed's delta for a design of ``queries`` held-out queries: √(τ² + σ_q²/Q)."""
    return math.sqrt(tau**2 + sigma_q**2 / queries)


def power(delta: float, sd: float, seeds: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t test of S seeds at a true Δ = delta (statsmodels
    ``TTestPower``: the noncentral t with df S − 1 and noncentrality Δ√S / sd)."""
    from statsmodels.stats.power import TTestPower

    return float(TTestPower().power(effect_size=delta / sd, nobs=seeds, alpha=alpha, alternative="two-sided"))


def seeds_for_power(delta: float, sd: float, target: float = 0.8, alpha: float = 0.05, max_seeds: int = 1000) -> int:
    """The smallest number of seeds whose paired t test has power ≥ target at Δ = delta (a scan
    over S with ``power``; statsmodels' solve_power gives the real-valued root, whose ceiling is
    the same)."""
    if not (delta > 0 and sd > 0):
        raise ValueError(f"delta and sd must be positive, got delta={delta!r}, sd={sd!r}")
    for s in range(2, max_seeds + 1):
        if power(delta, sd, s, alpha) >= target:
            return s
    raise ValueError(f"more than {max_seeds} seeds would be needed for power {target} at Δ = {delta} (sd {sd})")


def detectable_delta(sd: float, seeds: int, target: float = 0.8, alpha: float = 0.05) -> float:
    """The Δ that S seeds detect with power ``target`` (two-sided paired t; statsmodels
    ``TTestPower.solve_power`` for the effect size, times sd)."""
    from statsmodels.stats.power import TTestPower

    if seeds < 2:
        raise ValueError(f"a paired t test needs at least 2 seeds, got {seeds}")
    es = TTestPower().solve_power(nobs=seeds, power=target, alpha=alpha, alternative="two-sided")
    return float(np.asarray(es).item()) * sd
