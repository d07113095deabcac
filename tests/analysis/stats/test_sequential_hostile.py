"""Hostile input to the group-sequential boundaries (gcpo_analysis.stats.sequential): each refusal
names the look, the flag or the value, and an early first look (2 of 40 seeds), which crashed
the solver with a NaN, now gets O'Brien-Fleming's closed-form first boundary."""

import numpy as np
import pytest
from scipy import stats

from gcpo_analysis.stats.sequential import boundaries, crossing_probabilities, nominal_levels, sequential_seed_level


def test_no_look_and_a_bad_sides_are_refused():
    with pytest.raises(ValueError, match="at least one look"):
        boundaries([])  # was an empty array of boundaries
    with pytest.raises(ValueError, match="at least one look"):
        nominal_levels([])
    for bad in (0, 3, True):  # one look: was isf(α/3) or NaN, never checked
        with pytest.raises(ValueError, match="sides must be 1 or 2"):
            boundaries([1.0], sides=bad)


def test_an_early_first_look_gets_its_closed_form_boundary():
    """α(t) = 2Φ̄(z/√t), so the first boundary is z_{1−α/2}/√t; 2 − 2Φ(·) rounded it to an infinite one."""
    b = boundaries([2 / 40, 1.0])
    assert b[0] == pytest.approx(stats.norm.isf(0.025) / np.sqrt(2 / 40), rel=1e-9)
    assert 1.9 < b[1] < 1.97  # the last look spends nearly all of α
    b = boundaries([1 / 100, 2 / 100, 1.0])  # the second look's boundary (about 13.9) is above the old bracket's 12
    assert b[1] == pytest.approx(13.86, abs=0.01)


def test_a_look_that_spends_nothing_or_sits_on_the_last_is_named():
    with pytest.raises(ValueError, match=r"look 1 \(information fraction 0.0001\) spends 0 of α = 0.05"):
        boundaries([1e-4, 1.0])
    # looks 1e-9 apart: the grid could not resolve the increment, the third boundary came out 2.69 for 1.98
    with pytest.raises(ValueError, match="looks 1 and 2 are too close"):
        boundaries([0.5, 0.5 + 1e-9, 1.0])


def test_a_one_sided_alpha_of_a_half_or_more_and_an_alpha_near_one():
    with pytest.raises(ValueError, match=r"one-sided α of 0.999 puts the first look's boundary at -2.99 <= 0"):
        boundaries([0.5, 1.0], alpha=0.999, sides=1)
    with pytest.raises(ValueError, match=r"look 2's boundary lies outside \[0.5, 40\] at α = 0.9"):
        boundaries([0.5, 1.0], alpha=0.9, spending="pocock")  # was brentq's "signs must differ"


def test_infinite_boundaries_are_refused():
    with pytest.raises(ValueError, match="one positive, finite boundary per look"):
        crossing_probabilities([0.5, 1.0], [np.inf, 2.0])  # was [0, nan]


def test_the_two_look_reading_takes_numpy_integers_and_names_a_level_below_float():
    d = np.random.default_rng(0).normal(0, 4, 10)
    plain = sequential_seed_level(d, 5, 10, 3.0)
    numpy_ints = sequential_seed_level(d, np.int64(5), np.int64(10), 3.0)  # was "must be an integer"
    assert numpy_ints["looks"][1]["low"] == plain["looks"][1]["low"] and numpy_ints["planned"] == 10
    d40 = np.random.default_rng(0).normal(0, 4, 40)
    with pytest.raises(ValueError, match=r"first look's nominal level 1.86e-18 \(2 of 40 seeds"):
        sequential_seed_level(d40, 2, 40, 3.0)  # was "confidence must be a number in (0, 1)"
