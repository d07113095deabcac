"""The field's group weights (gcpo_analysis.measures.field_weights) against hand computations."""

import numpy as np
import pytest

from gcpo_analysis.measures.advantages import grpo_advantages
from gcpo_analysis.measures.field_weights import frame_weights, inv_variance_weight, trainer_refusal
from gcpo_analysis.measures.modulators import MODULATORS, GroupFeatures, group_weight, modulate


def group(rewards, grad_norm2=None):
    return GroupFeatures(rewards=np.asarray(rewards, float), grad_norm2=grad_norm2)


def test_reward_std_turns_grpo_advantages_into_dr_grpos():
    r = np.array([0.0, 2.0, 2.0, 0.5])
    sigma = np.sqrt(np.mean((r - r.mean()) ** 2))  # population std by hand
    w, info = group_weight("reward_std", group(r))
    assert w == pytest.approx((sigma + 1e-6) / 1.0)  # σ_max = (2 − 0)/2 = 1
    assert info["reward_std"] == pytest.approx(sigma)
    # A_i · ω = (r_i − r̄)/σ_max: Dr. GRPO's advantage, no std scaling
    adv, _ = modulate("reward_std", group(r), eps=1e-6)
    np.testing.assert_allclose(adv, (r - r.mean()) / 1.0, rtol=1e-12)


def test_inv_reward_std_divides_by_the_std_once_more():
    r = np.array([1.0, 1.5, 0.5])
    sigma = np.sqrt(np.mean((r - r.mean()) ** 2))
    w, _ = group_weight("inv_reward_std", group(r), r_min=0.0, r_max=3.0)
    assert w == pytest.approx(1.5 / (sigma + 1e-6))
    adv, _ = modulate("inv_reward_std", group(r), r_min=0.0, r_max=3.0, eps=1e-6)
    np.testing.assert_allclose(adv, (r - r.mean()) / (sigma + 1e-6) * 1.5 / (sigma + 1e-6))
    assert group_weight("inv_reward_std", group([1.0, 1.0]))[0] == 1.0  # no spread: no gradient, ω = 1


def test_inverse_gradient_norm_and_variance_by_hand():
    g = group([0.0, 2.0, 1.0], grad_norm2=6.25)
    assert group_weight("inv_grad_norm", g)[0] == pytest.approx(1 / 2.5)
    assert group_weight("inv_variance", g)[0] == pytest.approx(1 / 6.25)
    np.testing.assert_allclose(inv_variance_weight([4.0, 0.0, 0.25], 0.5), [0.5, 1.0, 2.0])
    np.testing.assert_allclose(inv_variance_weight([4.0, 0.0, 0.25], 1.0), [0.25, 1.0, 4.0])
    adv, _ = modulate("inv_variance", g)
    np.testing.assert_allclose(adv, grpo_advantages(g.rewards) / 6.25)
    with pytest.raises(ValueError, match="grad_norm2"):
        inv_variance_weight([-1.0], 1.0)


def test_the_frame_adapter_equals_the_registered_weights():
    rng = np.random.default_rng(0)
    rows = [rng.uniform(0, 2, 8) for _ in range(5)] + [np.ones(8)]
    norms = np.r_[rng.uniform(0.1, 3, 5), 0.0]
    spread = np.array([r.std() for r in rows])
    framed = frame_weights(spread, norms, 0.0, 2.0)
    for name, w in framed.items():
        direct = [group_weight(name, group(r, v))[0] for r, v in zip(rows, norms)]
        np.testing.assert_allclose(w, direct, rtol=1e-15, err_msg=name)
    np.testing.assert_allclose(framed["inv_grad_norm"][:5], 1 / np.sqrt(norms[:5]))


def test_without_the_gradient_norm_the_modulator_says_what_is_missing():
    with pytest.raises(ValueError, match="inv_grad_norm.*grad_norm2.*backward pass per group"):
        group_weight("inv_grad_norm", group([0.0, 2.0]))
    assert trainer_refusal("inv_variance", MODULATORS["inv_variance"].needs)
    assert trainer_refusal("reward_std", MODULATORS["reward_std"].needs) is None
