"""Seed-level statistics of a paired comparison: the unit that varies independently
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

The t interval and TOST divide by sd(D): when the per-seed deltas have no spread (sd 0, or float
noise against their size) both are undefined and ``paired_t`` and ``tost`` raise ``NoSpreadError``
(a ValueError); ``seed_level`` then reports the interval, the t p and the TOST p as missing, the
verdict "inconclusive", and warns. The sign-flip p and the bootstrap stay defined.

``variance_components`` and the power functions (``seeds_for_power``, ``detectable_delta``) plan
the number of seeds: the sd of D_s is √(τ² + σ_q²/Q), and a paired t test of S seeds has the
power of a one-sample t test with effect size Δ / sd(D) (the noncentral t, ``scipy.stats.nct``;
``detectable_delta`` is its root in Δ by ``scipy.optimize.brentq``).
"""

from __future__ import annotations

import itertools
import math
import numbers
import warnings

import numpy as np
from numpy.typing import ArrayLike

VERDICTS = ("better", "worse", "equivalent within ±δ", "inconclusive")
EXACT_SIGN_FLIPS_MAX = 16  # 2^16 = 65,536 sign vectors: exact below this, Monte Carlo above
# Relative float noise: two sums of the deltas closer than FLOAT_NOISE x sum |D| are a tie, and
# deltas whose sd is at most FLOAT_NOISE x max |D| have no spread. Rounding alone puts about
# n·eps·sum|D| (eps = 2.2e-16) into a sum of n deltas, and each D_s, a mean of Q query deltas,
# carries about Q·eps of its size (0.1 + 0.2 and 0.3 differ by 1.9e-16 relative): 1e-12 stays above
# that for n, Q up to thousands, and far below any spread a t interval could use (sd / |mean| =
# 1e-12 is a t statistic of 1e12).
FLOAT_NOISE = 1e-12


class NoSpreadError(ValueError):
    """The per-seed deltas have no spread: the t interval and the t tests (TOST) are undefined."""


def _count(name: str, value: object, low: int) -> int:
    """An integer (not a bool) >= low, else a ValueError naming ``name`` and the value."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _fraction(name: str, value: object) -> float:
    """A number strictly between 0 and 1 (a level, a confidence, a power), else a ValueError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not 0 < float(value) < 1:
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    return float(value)


def _positive(name: str, value: object) -> float:
    """A finite number > 0 (not a bool), else a ValueError naming ``name`` and the value."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not 0 < float(value) < math.inf:
        raise ValueError(
            f"{name} must be a positive number, got {value!r}" + ("" if value != math.inf else " (not finite)")
        )
    return float(value)


def _deltas(d: ArrayLike) -> np.ndarray:
    d = np.asarray(d, dtype=float)
    if d.ndim != 1 or d.size < 2:
        raise ValueError(f"per-seed deltas must be a finite 1-d array of at least 2 seeds, got shape {d.shape}")
    bad = np.flatnonzero(~np.isfinite(d))
    if bad.size:  # the shape is fine: say which seed is not
        raise ValueError(f"per-seed deltas must be finite: seed {bad[0]} (0-based) has {d[bad[0]]}, {bad.size} such")
    return d


def _power_of_two(d: np.ndarray) -> float:
    """A power of two near max |d| (0.5 when d is all 0). Sums of deltas near 1e308 overflow in scipy and
    statsmodels; dividing by a power of two is exact, so the t statistics and p of d / scale are
    those of d, and intervals scale back exactly."""
    return float(2.0 ** (np.frexp(np.abs(d).max())[1] - 1))


def _spread(d: np.ndarray) -> tuple[np.ndarray, float]:
    """(d / scale, scale), scale = ``_power_of_two(d)``; a ``NoSpreadError`` when sd(d) ≤
    FLOAT_NOISE · max |d| (a t statistic would divide by 0 or by rounding noise)."""
    scale = _power_of_two(d)
    x = d / scale
    sd = float(x.std(ddof=1))
    if not sd > FLOAT_NOISE * float(np.abs(x).max()):
        raise NoSpreadError(
            f"the per-seed deltas have no spread (sd = {sd * scale:.3g}, mean {float(x.mean()) * scale:.6g}, "
            f"{d.size} seeds; a spread at most {FLOAT_NOISE:g} of max |D| is float noise): the t interval and the "
            "t tests are undefined; the exact sign-flip p still holds"
        )
    return x, scale


def _matrix(d: ArrayLike) -> np.ndarray:
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or d.shape[0] < 2 or d.shape[1] < 1 or not np.isfinite(d).all():
        raise ValueError(f"d must be a finite (seeds, queries) array with at least 2 seeds, got shape {d.shape}")
    return d


def paired_t(deltas: ArrayLike, confidence: float = 0.95) -> dict:
    """Paired t of the per-seed deltas D: {"mean", "low", "high", "p", "df", "sd"} (two-sided p of
    Δ = 0 from t = mean / (sd/√S); interval mean ± t_{S−1, (1+c)/2} · sd/√S). Deltas with no spread
    (every seed the same delta, up to float noise) raise ``NoSpreadError``: the interval is undefined."""
    from scipy import stats

    d = _deltas(deltas)
    confidence = _fraction("confidence", confidence)
    x, scale = _spread(d)
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
    """Two-sided randomisation p of the mean of D under sign flips: the share of sign vectors ε
    with |Σ ε·D| ≥ |Σ D| (ties within FLOAT_NOISE · Σ|D| count as ties); exact (all 2^S sign
    vectors) for S ≤ 16, else ``n_resamples`` random sign vectors (the observed one counted in,
    p = (hits + 1) / (n_resamples + 1) > 0)."""
    d = _deltas(deltas)
    n_resamples = _count("n_resamples", n_resamples, 1)
    x = d / _power_of_two(d)  # exact; keeps the sums of deltas near 1e308 finite
    threshold = abs(float(x.sum())) - FLOAT_NOISE * float(np.abs(x).sum())  # relative: ties are scale-free
    if d.size <= EXACT_SIGN_FLIPS_MAX:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        return float(np.mean(np.abs(signs @ x) >= threshold))
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(n_resamples, d.size))
    hits = np.sum(np.abs(signs @ x) >= threshold)
    return float((hits + 1) / (n_resamples + 1))


def two_level_bootstrap(
    d: ArrayLike, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0, chunk: int = 500
) -> tuple[float, float]:
    """Percentile interval of mean d over resamples that draw S seeds with replacement and then,
    for each drawn seed, Q of its queries with replacement (d: seeds x queries)."""
    d = _matrix(d)
    n_resamples = _count("n_resamples", n_resamples, 1)
    confidence = _fraction("confidence", confidence)
    chunk = _count("chunk", chunk, 1)
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
    against 0, bounds ±margin): the larger of the two one-sided p-values, t = (mean ± margin) /
    (sd/√S). Deltas with no spread raise ``NoSpreadError``, as in ``paired_t``."""
    from statsmodels.stats.weightstats import ttost_paired

    d = _deltas(deltas)
    margin = _positive("the equivalence margin δ", margin)
    x, scale = _spread(d)
    p, _, _ = ttost_paired(x, np.zeros_like(x), -margin / scale, margin / scale)
    return float(p)


def verdict(low: float, high: float, tost_p: float, alpha: float = 0.05) -> str:
    """One of ``VERDICTS`` from the (1 − α) t interval [low, high] and the TOST p at ±δ. A
    significant difference wins over equivalence (a difference inside ±δ but clear of 0 is
    "better"/"worse"). A NaN, low > high or a p outside [0, 1] is refused."""
    alpha = _fraction("alpha", alpha)
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or math.isnan(value):
            raise ValueError(f"the interval bound {name} must be a number, got {value!r}")
    if low > high:
        raise ValueError(f"the interval's low bound exceeds its high bound: low={low!r}, high={high!r}")
    if isinstance(tost_p, (bool, np.bool_)) or not isinstance(tost_p, numbers.Real) or not 0 <= tost_p <= 1:
        raise ValueError(f"tost_p must be a p-value in [0, 1], got {tost_p!r}")
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    if tost_p < alpha:
        return "equivalent within ±δ"
    return "inconclusive"


def seed_level(
    d: ArrayLike, margin: float, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0, label: str = ""
) -> dict:
    """Every seed-level statistic of one arm against the reference from d (seeds x queries):
    the paired t interval, the sign-flip p, the two-level bootstrap interval, the TOST p at ±margin
    and the verdict (α = 1 − confidence). Per-seed deltas with no spread (``NoSpreadError``) give
    NaN for the t interval, the t p and the TOST p, the verdict "inconclusive" and a warning that
    names ``label`` (e.g. the arm)."""
    d = _matrix(d)
    margin = _positive("the equivalence margin δ", margin)
    confidence = _fraction("confidence", confidence)
    per_seed = d.mean(axis=1)
    t, p_eq = t_and_tost(per_seed, confidence, margin, label, stacklevel=3)
    boot_low, boot_high = two_level_bootstrap(d, n_resamples, confidence, seed)
    return {
        "delta": t["mean"],
        "delta_low": t["low"],
        "delta_high": t["high"],
        "df": int(per_seed.size - 1),
        "p_t": t["p"],
        "p": sign_flip_p(per_seed),
        "boot2_low": boot_low,
        "boot2_high": boot_high,
        "margin": margin,
        "p_tost": p_eq,
        "verdict": defined_verdict(t["low"], t["high"], p_eq, 1.0 - confidence),
    }


def t_and_tost(
    deltas: ArrayLike, confidence: float, margin: float, label: str = "", stacklevel: int = 2
) -> tuple[dict, float]:
    """``paired_t`` at ``confidence`` and ``tost`` at ±``margin`` of per-seed deltas. Deltas with
    no spread (``NoSpreadError``: every seed the same delta) give NaN for the interval, its p and
    the TOST p, the mean as it is, and a warning that names ``label``: a reading of arms that
    never diverged says so instead of stopping."""
    try:
        return paired_t(deltas, confidence), tost(deltas, margin)
    except NoSpreadError as exc:
        warnings.warn(
            f"{label + ': ' if label else ''}{exc}; the row leaves out the t interval, its p and the TOST p, "
            "and its verdict is 'inconclusive'",
            stacklevel=stacklevel,
        )
        d = _deltas(deltas)
        scale = _power_of_two(d)
        nan = float("nan")
        return {"mean": float((d / scale).mean()) * scale, "low": nan, "high": nan, "p": nan}, nan


def defined_verdict(low: float, high: float, tost_p: float, alpha: float = 0.05) -> str:
    """``verdict``, or "inconclusive" where ``t_and_tost`` found no spread (a NaN TOST p)."""
    return "inconclusive" if isinstance(tost_p, float) and math.isnan(tost_p) else verdict(low, high, tost_p, alpha)


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
    """Power of the two-sided paired t test of S seeds at a true Δ = delta: with T noncentral t
    (df S − 1, noncentrality nc = Δ√S / sd) and c = t_{S−1, 1−α/2}, P(T > c) + P(T < −c) =
    ``nct.sf(c, S−1, nc) + nct.sf(c, S−1, −nc)``. This is statsmodels' ``TTestPower`` to 1e-16,
    whose lower tail ``nctdtr(S−1, nc, −c)`` is NaN at many ordinary effect sizes under scipy 1.17
    (Δ/sd = 7 at 2 seeds; ``seeds_for_power`` skipped such S silently)."""
    from scipy import stats

    if isinstance(delta, (bool, np.bool_)) or not isinstance(delta, numbers.Real) or not math.isfinite(delta):
        raise ValueError(f"delta must be a finite number, got {delta!r}")
    sd = _positive("sd", sd)
    seeds = _count("seeds", seeds, 2)
    alpha = _fraction("alpha", alpha)
    df, nc = seeds - 1, delta / sd * math.sqrt(seeds)
    crit = stats.t.isf(alpha / 2, df)
    p = float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc))
    if not math.isfinite(p):  # scipy's noncentral t gives nan past a noncentrality of about 3e9
        raise ValueError(f"the power at Δ/sd = {delta / sd:g} with {seeds} seeds is not computable (scipy gives nan)")
    return p


def seeds_for_power(delta: float, sd: float, target: float = 0.8, alpha: float = 0.05, max_seeds: int = 1000) -> int:
    """The smallest number of seeds whose paired t test has power ≥ target at Δ = delta (a scan
    over S with ``power``)."""
    delta, sd = _positive("delta", delta), _positive("sd", sd)
    target, alpha = _fraction("target power", target), _fraction("alpha", alpha)
    max_seeds = _count("max_seeds", max_seeds, 2)
    for s in range(2, max_seeds + 1):
        if power(delta, sd, s, alpha) >= target:
            return s
    raise ValueError(f"more than {max_seeds} seeds would be needed for power {target} at Δ = {delta} (sd {sd})")


def detectable_delta(sd: float, seeds: int, target: float = 0.8, alpha: float = 0.05) -> float:
    """The Δ that S seeds detect with power ``target`` (two-sided paired t): sd times the effect
    size e solving ``power(e, 1, S, alpha) = target``, found by brentq on [0, h] with h doubled
    until the power there reaches the target (statsmodels' ``TTestPower.solve_power`` returned
    non-roots silently, e.g. 10.0 with power 0.018 at 2 seeds, α = 0.001)."""
    from scipy.optimize import brentq

    sd = _positive("sd", sd)
    seeds = _count("seeds", seeds, 2)
    target, alpha = _fraction("target power", target), _fraction("alpha", alpha)
    if target <= alpha:  # the power at Δ = 0 is α and grows with |Δ|: no Δ > 0 has a lower one
        raise ValueError(f"target power must exceed alpha (the power at Δ = 0), got target={target}, alpha={alpha}")

    def short(effect: float) -> float:
        return power(effect, 1.0, seeds, alpha) - target

    high = 1.0
    while short(high) < 0:  # the power tends to 1 > target: this ends (or power() refuses where scipy gives nan)
        high *= 2.0
    return float(brentq(short, 0.0, high, xtol=1e-14, rtol=1e-14)) * sd
