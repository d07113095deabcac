"""Group-sequential analysis of a seed-level comparison: a comparison read at several looks (a
first stage of seeds, then more), with the type I error spread over the looks by an α-spending
function (Lan & DeMets 1983).

The statistic at look k is Z_k = S_k / √I_k with I_k the information (here, the number of paired
seeds) and S_k a sum of independent increments, so corr(Z_j, Z_k) = √(I_j / I_k) (the canonical
joint distribution; Jennison & Turnbull 2000, §3.1). With information fractions t_k = I_k / I_K,
a spending function α(t) (α(0) = 0, α(1) = α) sets the boundary c_k of look k so that the chance
of first crossing at look k under H0 is α(t_k) − α(t_{k−1}):

* ``obrien_fleming_spending``: α(t) = 2 − 2Φ(z_{1−α/2} / √t) = 2 Φ̄(z_{1−α/2} / √t), which spends little early
  (Lan & DeMets' approximation of O'Brien & Fleming's boundaries);
* ``pocock_spending``: α(t) = α · ln(1 + (e − 1) t).

``boundaries`` computes the c_k by the recursive numerical integration of Armitage, McPherson &
Rowe (1969) on the score scale (the density of S_k on the continuation region, propagated through
the normal increments on a fine grid), for two-sided (|Z| > c) or one-sided (Z > c) tests.
Written here: scipy and statsmodels have no group-sequential boundaries (R's gsDesign and rpact
do); checked against the classical Pocock and O'Brien-Fleming constants and by simulation
(tests/analysis/stats/test_sequential.py).

The seed-level tests are t tests with few seeds, so each look's boundary is used as a *nominal
level* p_k = P(|Z| > c_k) (two-sided) or P(Z > c_k) (one-sided) for the t interval and the TOST
(Jennison & Turnbull §3.8: nominal levels carried over to t statistics keep the error close to
α). ``sequential_seed_level`` applies them to the per-seed deltas: the (1 − p_K) t interval and
the TOST at one-sided level p_K at the final look, the first look's own result, and the second
stage read alone as a replication at the plain level.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike

SPENDING = ("obrien_fleming", "pocock")
HIGHEST = 40.0  # the largest boundary searched: P(Z > 40) is 0 in float, an early look of 1 seed in 100 needs 14
GRID = 401  # odd: Simpson's rule on the score's density (boundaries within 1e-6 of a 4001-point grid)


def obrien_fleming_spending(t: ArrayLike, alpha: float = 0.05) -> np.ndarray:
    """α(t) = 2 − 2Φ(z_{1−α/2} / √t) for t in (0, 1]: Lan & DeMets' O'Brien-Fleming-type spending."""
    from scipy.stats import norm

    t = _fractions(t)
    # as 2 Φ̄(·): 2 − 2Φ(·) rounds to 0 once Φ(·) rounds to 1 (t below about 0.056 at α = 0.05),
    # which gave the first look an infinite boundary and the solver a NaN
    return 2.0 * norm.sf(norm.isf(_alpha(alpha) / 2.0) / np.sqrt(t))


def pocock_spending(t: ArrayLike, alpha: float = 0.05) -> np.ndarray:
    """α(t) = α · ln(1 + (e − 1) t) for t in (0, 1]: Lan & DeMets' Pocock-type spending."""
    return _alpha(alpha) * np.log1p((math.e - 1.0) * _fractions(t))


def _alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    return float(alpha)


def _fractions(t: ArrayLike) -> np.ndarray:
    t = np.asarray(t, dtype=np.float64)
    if not np.all(np.isfinite(t)) or np.any(t <= 0) or np.any(t > 1):
        raise ValueError(f"information fractions must lie in (0, 1], got {t.tolist()}")
    return t


def _looks(fractions: ArrayLike) -> np.ndarray:
    t = _fractions(np.atleast_1d(np.asarray(fractions, dtype=np.float64)))
    if t.size == 0:
        raise ValueError("give at least one look's information fraction, got none")
    if t.ndim != 1 or np.any(np.diff(t) <= 0):
        raise ValueError(f"the looks' information fractions must increase strictly, got {t.tolist()}")
    return t


def _sides(sides: int) -> int:
    if sides not in (1, 2) or isinstance(sides, bool):
        raise ValueError(f"sides must be 1 or 2, got {sides!r}")
    return int(sides)


def _tail(c: float, sides: int) -> float:
    """P(reject) of one look at boundary c: P(|Z| > c) or P(Z > c)."""
    from scipy.stats import norm

    return float(sides * norm.sf(c))


def crossing_probabilities(fractions: ArrayLike, bounds: ArrayLike, sides: int = 2) -> np.ndarray:
    """P(first crossing at look k) under H0 for boundaries ``bounds`` (Z scale) at the information
    fractions ``fractions``: two-sided |Z_k| > c_k, or one-sided Z_k > c_k (``sides`` 1)."""
    from scipy.stats import norm

    t, c, sides = _looks(fractions), np.asarray(bounds, dtype=np.float64), _sides(sides)
    if c.shape != t.shape or not np.all(c > 0) or not np.all(np.isfinite(c)):
        raise ValueError(f"give one positive, finite boundary per look, got {c.tolist()} for {t.size} looks")
    out = np.empty(t.size)
    # the continuation region of the score S_k = Z_k √t_k: |S| <= c√t (two-sided) or S <= c√t
    lo_z = 8.0 + float(c.max())  # the one-sided region's lower end: below it the density is < 1e-14
    s, w, dens = None, None, None
    for k in range(t.size):
        hi = c[k] * math.sqrt(t[k])
        lo = -hi if sides == 2 else -lo_z * math.sqrt(t[k])
        grid = np.linspace(lo, hi, GRID)
        weights = np.full(GRID, 2.0)
        weights[1::2] = 4.0
        weights[[0, -1]] = 1.0
        weights *= (hi - lo) / (GRID - 1) / 3.0  # Simpson's rule
        if k == 0:
            sd = math.sqrt(t[0])
            out[0] = _tail(c[0], sides)
            if t.size == 1:
                break
            new = norm.pdf(grid, scale=sd)
        else:
            sd = math.sqrt(t[k] - t[k - 1])
            assert s is not None and w is not None and dens is not None
            if sd < 3.0 * (s[1] - s[0]):  # a kernel narrower than the grid: a wrong boundary (2.69 for 1.98), no error
                raise ValueError(
                    f"looks {k} and {k + 1} are too close (information fractions {t[k - 1]:.10g} and {t[k]:.10g}): the "
                    f"score's increment sd {sd:.3g} is below 3 steps of the integration grid ({s[1] - s[0]:.3g})"
                )
            mass = w * dens  # the mass of each grid point of the previous continuation region
            upper = norm.sf((hi - s) / sd)
            lower = norm.cdf((-hi - s) / sd) if sides == 2 else 0.0
            out[k] = float(np.sum(mass * (upper + lower)))
            if k == t.size - 1:
                break  # the last look's density is not needed
            new = norm.pdf((grid[:, None] - s[None, :]) / sd) / sd @ mass
        s, w, dens = grid, weights, new
    return out


def boundaries(
    fractions: Sequence[float], alpha: float = 0.05, spending: str = "obrien_fleming", sides: int = 2
) -> np.ndarray:
    """The Z boundaries c_k whose first-crossing probabilities under H0 are the spending
    function's increments α(t_k) − α(t_{k−1}) (``spending``: 'obrien_fleming' or 'pocock'). A look
    that spends nothing in floating point (an information fraction or α too small), or whose
    boundary lies outside [0.5, 40] (α near 1), is refused naming the look."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    t, sides = _looks(fractions), _sides(sides)
    spend = _spending(spending)(t, alpha)
    increments = np.diff(np.concatenate([[0.0], spend]))
    bounds: list[float] = []
    for k in range(t.size):
        if not increments[k] > 0:  # its boundary would be infinite, which the integration cannot carry
            raise ValueError(
                f"look {k + 1} (information fraction {t[k]:g}) spends {increments[k]:.3g} of α = {alpha:g} under "
                f"{spending} spending, too little for a finite boundary; drop the look or move it later"
            )
        if k == 0:
            bounds.append(float(norm.isf(increments[0] / sides)))
            if not bounds[0] > 0:
                raise ValueError(f"a one-sided α of {alpha:g} puts the first look's boundary at {bounds[0]:.3g} <= 0")
            continue

        def excess(c: float, k: int = k) -> float:
            return float(crossing_probabilities(t[: k + 1], [*bounds, c], sides)[k] - increments[k])

        if not excess(0.5) > 0 > excess(HIGHEST):  # brentq would say only that the signs agree
            raise ValueError(
                f"look {k + 1}'s boundary lies outside [0.5, {HIGHEST:g}] at α = {alpha:g} ({spending} spending, "
                f"{sides}-sided)"
            )
        bounds.append(float(brentq(excess, 0.5, HIGHEST, xtol=1e-10)))
    return np.array(bounds)


def _spending(name: str) -> Callable[..., np.ndarray]:
    if name == "obrien_fleming":
        return obrien_fleming_spending
    if name == "pocock":
        return pocock_spending
    raise ValueError(f"spending must be one of {', '.join(SPENDING)}, got {name!r}")


def nominal_levels(
    fractions: Sequence[float], alpha: float = 0.05, spending: str = "obrien_fleming", sides: int = 2
) -> np.ndarray:
    """Each look's nominal level: P(|Z| > c_k) (two-sided) or P(Z > c_k) (one-sided)."""
    return np.array([_tail(c, sides) for c in boundaries(fractions, alpha, spending, sides)])


def sequential_seed_level(
    deltas: ArrayLike,
    first_look: int,
    planned: int,
    margin: float,
    alpha: float = 0.05,
    spending: str = "obrien_fleming",
) -> dict:
    """The two-look reading of per-seed deltas ``deltas`` (seeds in the order they were planned:
    the first ``first_look`` form stage 1, the rest stage 2; ``planned`` seeds in all).

    Information fractions t_1 = first_look / planned and t_2 = n / planned (n, the seeds given; 1
    when all planned seeds are in). The t interval uses the two-sided nominal level of each look,
    the TOST at ±``margin`` the one-sided one (each of its two tests at one-sided α, as the plain
    TOST). Returns the levels and, per look, the interval, the t p, the TOST p and the verdict
    (``seeds.verdict`` at the look's levels), plus ``stage2_alone``: the second stage's seeds read
    alone at the plain level α, a replication."""
    from gcpo_analysis.stats.seeds import defined_verdict, t_and_tost

    d = np.asarray(deltas, dtype=np.float64)
    if d.ndim != 1 or not np.all(np.isfinite(d)):
        raise ValueError("deltas must be a 1-d array of finite per-seed deltas")
    for name, value in (("first_look", first_look), ("planned", planned)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 2:
            raise ValueError(f"{name} must be an integer >= 2, got {value!r}")
    if not first_look < d.size <= planned:
        raise ValueError(
            f"a second look needs more than the first look's {first_look} seeds and at most the planned "
            f"{planned}, got {d.size}"
        )
    first_look, planned = int(first_look), int(planned)
    fractions = [first_look / planned, d.size / planned]
    two = nominal_levels(fractions, alpha, spending, sides=2)
    one = nominal_levels(fractions, alpha, spending, sides=1)
    if not 1.0 - two[0] < 1.0:  # the t interval at confidence 1 − p rounds to 1: refused as a confidence of 1
        raise ValueError(
            f"the first look's nominal level {two[0]:.3g} ({first_look} of {planned} seeds, {spending} spending) is "
            "below float resolution: its t interval has no finite end; plan a later first look"
        )
    looks = []
    for k, n in enumerate((first_look, d.size)):
        t, p_eq = t_and_tost(d[:n], 1.0 - two[k], margin, f"look {k + 1}", stacklevel=3)
        looks.append(
            {
                "seeds": n,
                "fraction": fractions[k],
                "level_two_sided": float(two[k]),
                "level_one_sided": float(one[k]),
                "delta": t["mean"],
                "low": t["low"],
                "high": t["high"],
                "p_t": t["p"],
                "p_tost": p_eq,
                # the interval at the look's two-sided level; equivalence when TOST p < its one-sided level
                "verdict": defined_verdict(t["low"], t["high"], p_eq, float(one[k])),
            }
        )
    stage2 = d[first_look:]
    alone = None
    if stage2.size >= 2:
        t, p_eq = t_and_tost(stage2, 1.0 - alpha, margin, "the second stage alone", stacklevel=3)
        alone = {"seeds": int(stage2.size), "delta": t["mean"], "low": t["low"], "high": t["high"]}
        alone.update(p_t=t["p"], p_tost=p_eq, verdict=defined_verdict(t["low"], t["high"], p_eq, alpha))
    return {
        "spending": spending,
        "alpha": alpha,
        "margin": margin,
        "planned": planned,
        "looks": looks,
        "stage2_alone": alone,
    }
