"""Hostile arm names and sizes for the arm grammar (gcpo_analysis.measures.shuffled): a malformed
dose is named as a dose, a dose without a spelling is refused, ``none`` has no permuted control,
and a derangement's size and the eligible mask are checked."""

import re

import numpy as np
import pytest

from gcpo_analysis.measures.shuffled import check_arm_name, derangement, parse_arm, shuffle_weights


@pytest.mark.parametrize(
    "name",
    [
        "bot_rd:alpha",
        "bot_rd:alpha-1",
        "bot_rd:alphanan",
        "bot_rd:alpha1e400",
        "bot_rd:alpha.5",
        "bot_rd:alpha5:shuffled",
    ],
)
def test_a_malformed_dose_is_named_as_a_dose(name):
    # was "a modulator name must be an identifier", which said nothing of the dose
    with pytest.raises(ValueError, match=r"a dose is written last, as :alpha<x> with x a plain decimal"):
        parse_arm(name)


@pytest.mark.parametrize("name, shown", [("bot_rd:alpha1000000", "1e+06"), ("bot_rd:alpha0.00001", "1e-05")])
def test_a_dose_without_a_plain_spelling_is_refused(name, shown):
    # was "write its dose as alpha1e+06", a spelling no arm parses
    with pytest.raises(ValueError, match=re.escape(f"plain decimals, from 0.0001 to below 1e6; got {shown}")):
        parse_arm(name)


def test_good_doses_and_the_zero_dose_still_parse():
    assert parse_arm("bot_rd:alpha0") == ("bot_rd", 0.0)  # alpha_base >= 0 is the knob's range
    assert parse_arm("bot_rd:shuffled:alpha2.5") == ("bot_rd:shuffled", 2.5)
    assert parse_arm("bot_rd:alpha999999") == ("bot_rd", 999999.0)


def test_a_name_that_is_no_text_and_a_permuted_none():
    with pytest.raises(TypeError, match="an arm name is a text"):
        parse_arm(None)  # was "expected string or bytes-like object"
    for name in ("none:shuffled", "none:deranged"):  # ω = 1 everywhere: permuting it trains GRPO
        with pytest.raises(ValueError, match="plain GRPO .* so a permuted control is GRPO"):
            check_arm_name(name)
    with pytest.raises(ValueError, match="identifier"):
        check_arm_name(":shuffled")


def test_derangement_sizes():
    rng = np.random.default_rng(0)
    assert derangement(0, rng).tolist() == [] and derangement(1, rng).tolist() == [0]
    assert derangement(2, rng).tolist() == [1, 0]
    for bad in (-1, 2.0, True):  # -1 was an empty permutation, 2.0 an AxisError, True the identity
        with pytest.raises(ValueError, match="a derangement's size is an integer >= 0"):
            derangement(bad, rng)


def test_eligible_must_be_a_mask():
    # indices [0, 2, 1] were read as the mask [False, True, True]
    with pytest.raises(ValueError, match="eligible must be one True/False per group"):
        shuffle_weights([1.0, 2.0, 3.0], [0, 2, 1], seed=0)
    assert shuffle_weights([1.0, 2.0, 3.0], [True, False, False], 0, derange=True).tolist() == [1.0, 2.0, 3.0]
