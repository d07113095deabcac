"""Hostile input to the field's group weights (gcpo_analysis.measures.field_weights): a NaN,
infinite or negative std, an empty or inverted reward range, a subnormal gradient norm, a bool
or text norm, mismatched columns."""

import numpy as np
import pytest

from gcpo_analysis.measures.field_weights import (
    frame_weights,
    inv_reward_std_weight,
    inv_variance_weight,
    reward_std_weight,
    sigma_max,
)
from gcpo_analysis.measures.modulators import GroupFeatures, group_weight


@pytest.mark.parametrize("spread", [[np.nan], [np.inf], [-1.0], [0.5, np.nan]])
def test_a_spread_that_is_no_std_is_refused(spread):
    # NaN and -1 were weighted 1 (as equal rewards), inf gave ω = inf or 0
    for weigh in (reward_std_weight, inv_reward_std_weight):
        with pytest.raises(ValueError, match="reward_spread must be finite and >= 0"):
            weigh(spread)


def test_an_empty_or_inverted_reward_range_is_refused():
    for lo, hi in ((1.0, 1.0), (1.0, 0.0), (0.0, np.inf)):  # ω was inf, negative or 0
        with pytest.raises(ValueError, match="reward range must have finite r_max > r_min"):
            sigma_max(lo, hi)
        with pytest.raises(ValueError, match="reward range must have finite r_max > r_min"):
            frame_weights([0.1], [1.0], lo, hi)
    assert reward_std_weight([0.0, 0.5], r_min=0.0, r_max=1.0).tolist() == [1.0, pytest.approx(1.000002)]


def test_gamma_and_an_overflowing_weight():
    with pytest.raises(ValueError, match="overflows for grad_norm2"):
        inv_variance_weight([1e-320])  # was inf, with a RuntimeWarning
    for gamma in (np.nan, -1.0, "1"):
        with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
            inv_variance_weight([4.0], gamma)
    assert inv_variance_weight([1e-200], 1.0)[0] == pytest.approx(1e200)


def test_mismatched_columns_are_refused():
    with pytest.raises(ValueError, match=r"one shape, got \(2,\) and \(1,\)"):
        frame_weights([0.1, 0.2], [1.0], 0.0, 1.0)


@pytest.mark.parametrize("name", ["inv_grad_norm", "inv_variance"])
def test_the_gradient_weights_check_the_group_as_the_others_do(name):
    def g(rewards, v):
        return GroupFeatures(rewards=np.asarray(rewards, float), grad_norm2=v)

    with pytest.raises(ValueError, match="empty group: no rewards"):  # was "zero-size array to reduction"
        group_weight(name, g([], 4.0), r_min=0.0, r_max=1.0)
    with pytest.raises(ValueError, match=r"reward 2 of rollout 1 lies outside the declared range \[0.0, 1.0\]"):
        group_weight(name, g([0.0, 2.0], 4.0), r_min=0.0, r_max=1.0)  # was weighted
    for bad in (True, "4"):  # were read as 1.0 and 4.0
        with pytest.raises(ValueError, match="grad_norm2 must be a number"):
            group_weight(name, g([0.0, 1.0], bad), r_min=0.0, r_max=1.0)
    assert group_weight(name, g([0.0, 1.0], 4.0), r_min=0.0, r_max=1.0)[0] == pytest.approx(
        0.5 if name == "inv_grad_norm" else 0.25
    )
