"""Group-sequential boundaries (gcpo_analysis.stats.sequential) against the classical constants of
Pocock and O'Brien-Fleming (Jennison & Turnbull 2000, Tables 2.1 and 2.3), against a simulation of
the canonical joint distribution, and the two-look seed-level reading against scipy's t interval
at the nominal levels."""

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

from gcpo_analysis.stats.sequential import (
    boundaries,
    crossing_probabilities,
    nominal_levels,
    obrien_fleming_spending,
    pocock_spending,
    sequential_seed_level,
)


def test_classical_constants():
    """A constant boundary crossing with total probability 0.05 is Pocock's 2.178 (K = 2) and 2.289
    (K = 3); c_k = C/√t_k gives O'Brien-Fleming's C = 1.977 (K = 2)."""
    pocock2 = brentq(lambda c: crossing_probabilities([0.5, 1], [c, c]).sum() - 0.05, 1.5, 3)
    pocock3 = brentq(lambda c: crossing_probabilities([1 / 3, 2 / 3, 1], [c, c, c]).sum() - 0.05, 1.5, 3)
    obf = brentq(lambda c: crossing_probabilities([0.5, 1], [c / np.sqrt(0.5), c]).sum() - 0.05, 1.5, 3)
    assert round(pocock2, 3) == 2.178 and round(pocock3, 3) == 2.289 and round(obf, 3) == 1.977


def test_one_look_is_the_plain_test_and_spending_reaches_alpha():
    assert boundaries([1.0])[0] == pytest.approx(stats.norm.isf(0.025), abs=1e-9)
    assert boundaries([1.0], sides=1)[0] == pytest.approx(stats.norm.isf(0.05), abs=1e-9)
    for spend in (obrien_fleming_spending, pocock_spending):
        assert spend(1.0, 0.05) == pytest.approx(0.05) and np.all(np.diff(spend([0.1, 0.5, 0.9])) > 0)
    # O'Brien-Fleming-type spends little early, Pocock-type much
    assert obrien_fleming_spending(0.5) < 0.01 < pocock_spending(0.5)


@pytest.mark.parametrize("sides", [1, 2])
@pytest.mark.parametrize("spending", ["obrien_fleming", "pocock"])
def test_boundaries_spend_what_the_function_says_in_a_simulation(sides, spending):
    """Brownian motion at the looks (independent normal increments): the share of paths first
    crossing at each look matches α(t_k) − α(t_{k−1}) within 4 standard errors."""
    t = np.array([13 / 22, 1.0])
    c = boundaries(t, 0.05, spending, sides)
    rng = np.random.default_rng(0)
    n = 400_000
    s1 = rng.normal(0, np.sqrt(t[0]), n)
    s2 = s1 + rng.normal(0, np.sqrt(t[1] - t[0]), n)
    z1, z2 = s1 / np.sqrt(t[0]), s2 / np.sqrt(t[1])
    cross1 = (np.abs(z1) if sides == 2 else z1) > c[0]
    cross2 = ~cross1 & ((np.abs(z2) if sides == 2 else z2) > c[1])
    spend = (obrien_fleming_spending if spending == "obrien_fleming" else pocock_spending)(t, 0.05)
    expected = np.diff(np.concatenate([[0], spend]))
    for observed, p in ((cross1.mean(), expected[0]), (cross2.mean(), expected[1])):
        assert abs(observed - p) < 4 * np.sqrt(p * (1 - p) / n)
    assert np.all(nominal_levels(t, 0.05, spending, sides) < 0.05)


def test_bad_looks_are_refused():
    for bad in ([0.5, 0.5], [0.0, 1.0], [0.5, 1.2], [1.0, 0.5]):
        with pytest.raises(ValueError, match="information fractions"):
            boundaries(bad)
    with pytest.raises(ValueError, match="spending"):
        boundaries([0.5, 1], spending="haybittle")
    with pytest.raises(ValueError, match="alpha"):
        boundaries([0.5, 1], alpha=1.5)


def test_the_two_look_reading_is_scipys_t_at_the_nominal_levels():
    rng = np.random.default_rng(3)
    d = rng.normal(0.5, 4.0, 22)
    out = sequential_seed_level(d, first_look=13, planned=22, margin=3.26)
    two = nominal_levels([13 / 22, 1.0])
    one = nominal_levels([13 / 22, 1.0], sides=1)
    for look, n, lv2, lv1 in zip(out["looks"], (13, 22), two, one, strict=True):
        ci = stats.ttest_1samp(d[:n], 0).confidence_interval(1 - lv2)
        assert look["low"] == pytest.approx(ci.low) and look["high"] == pytest.approx(ci.high)
        # TOST by hand: the larger one-sided p of mean ± δ
        se = d[:n].std(ddof=1) / np.sqrt(n)
        p = max(stats.t.sf((d[:n].mean() + 3.26) / se, n - 1), stats.t.cdf((d[:n].mean() - 3.26) / se, n - 1))
        assert look["p_tost"] == pytest.approx(p, rel=1e-6) and look["level_one_sided"] == pytest.approx(lv1)
        expect = "equivalent within ±δ" if (ci.low <= 0 <= ci.high and p < lv1) else look["verdict"]
        assert look["verdict"] == expect
    alone = stats.ttest_1samp(d[13:], 0).confidence_interval(0.95)
    assert out["stage2_alone"]["seeds"] == 9 and out["stage2_alone"]["low"] == pytest.approx(alone.low)
    with pytest.raises(ValueError, match="more than the first look"):
        sequential_seed_level(d[:13], 13, 22, 3.26)
