"""GRPO/GCPO advantages and every modulator against hand computations."""

import math

import numpy as np
import pytest

from gcpo_analysis.measures import advantages as ADV
from gcpo_analysis.measures import dispersion as D
from gcpo_analysis.measures.modulators import MODULATORS, GroupFeatures, modulate


def test_grpo_advantages_hand_worked():
    A = ADV.grpo_advantages([0.0, 2.0], eps=0.0)
    assert A == pytest.approx([-1.0, 1.0])
    r = np.array([0.0, 1.0, 2.0, 2.0])
    assert ADV.grpo_advantages(r, eps=0.0) == pytest.approx((r - r.mean()) / r.std())


@pytest.mark.parametrize("r", [[1.0], [0.7] * 5, [2.0, 2.0]])
def test_equal_rewards_have_zero_advantage(r):
    A = ADV.grpo_advantages(r)
    assert np.all(A == 0.0) and np.isfinite(A).all()
    assert np.all(ADV.grpo_advantages_batch([r]) == 0.0)


def test_batch_matches_single():
    rng = np.random.default_rng(0)
    r = rng.uniform(0, 2, size=(5, 6))
    r[2] = 1.0
    batch = ADV.grpo_advantages_batch(r)
    for n in range(5):
        assert batch[n] == pytest.approx(ADV.grpo_advantages(r[n]))


def test_gcpo_advantages_are_grpo_times_the_two_weights():
    rng = np.random.default_rng(3)
    e = rng.normal(size=(8, 5))
    c = [0, 0, 1, 1, 1, 2, 0, 1]
    r = rng.uniform(0, 2, size=8)
    a = 0.6 / math.log(8)
    w_bot = max(0.0, 1 - a * D.barycentric_transport(e, c) ** 2)
    w_rd = 1 + a * D.reward_dispersion(r)
    expected = ADV.grpo_advantages(r) * w_bot * w_rd
    assert ADV.gcpo_advantages(r, e, c, geometry="bot") == pytest.approx(expected)
    w_cd = max(0.0, 1 - a * D.cosine_dispersion(e) ** 2)
    got = ADV.gcpo_advantages(r, e, geometry="cd", use_rd=False)
    assert got == pytest.approx(ADV.grpo_advantages(r) * w_cd)


def test_gcpo_errors():
    with pytest.raises(ValueError, match="needs cluster labels"):
        ADV.gcpo_advantages([0, 1], np.eye(2), geometry="bot")
    with pytest.raises(ValueError, match="unknown geometry"):
        ADV.gcpo_advantages([0, 1], np.eye(2), geometry="wasserstein")
    with pytest.raises(ValueError, match="one embedding per rollout"):
        ADV.gcpo_advantages([0, 1, 2], np.eye(2), geometry="cd")


def _group(G=6, seed=0):
    rng = np.random.default_rng(seed)
    return GroupFeatures(
        rewards=rng.uniform(0, 2, G),
        embeddings=rng.normal(size=(G, 4)),
        clusters=np.array([0, 0, 1, 2, 1, 0][:G]),
        token_entropy=rng.uniform(0.1, 2.0, G),
        logprobs=-rng.uniform(1, 10, G),
        ratio_var=rng.uniform(0, 0.5, G),
        grad_norm2=0.8,  # the update-alignment study's ‖g_q‖² (inv_grad_norm, inv_variance)
    )


def test_every_modulator_runs_and_keeps_sign():
    g = _group()
    A = ADV.grpo_advantages(g.rewards)
    for name in MODULATORS:
        out, info = modulate(name, g)
        assert out.shape == A.shape and np.isfinite(out).all(), name
        if name != "empo":  # EMPO replaces the reward, so its advantages differ in sign
            assert np.all(out * A >= -1e-12), name


def test_seed_grpo_by_hand():
    g = _group()
    g.logprobs = None
    out, info = modulate("se", g)
    # clusters [0,0,1,2,1,0]: fractions 3/6, 2/6, 1/6
    se = -(0.5 * math.log(0.5) + (1 / 3) * math.log(1 / 3) + (1 / 6) * math.log(1 / 6))
    assert info["se"] == pytest.approx(se)
    assert out == pytest.approx(ADV.grpo_advantages(g.rewards) * (1 - 0.6 * se / math.log(6)))


def test_empo_by_hand():
    g = _group()
    out, info = modulate("empo", g, empo_high=1.0)
    freq = np.array([3, 3, 2, 1, 2, 3]) / 6
    assert out == pytest.approx(ADV.grpo_advantages(freq))
    out, info = modulate("empo", g, empo_high=0.5)  # SE / ln 6 = 0.79 > 0.5: filtered
    assert info["w_empo"] == 0.0 and np.all(out == 0)


def test_care_by_hand():
    g = _group()
    out, info = modulate("care", g)
    agreement = (3 * 2 + 2 * 1 + 0) / (6 * 5)
    w = 1 - 0.6 / math.log(6) * (1 - agreement)
    assert info["care"] == pytest.approx(agreement)
    assert out == pytest.approx(ADV.grpo_advantages(g.rewards) * w)


def test_q_hawkeye_by_hand():
    g = GroupFeatures(rewards=np.array([0.0, 0.0, 2.0, 2.0]))
    out, info = modulate("q_hawkeye", g, q_alpha=0.5)
    assert info["reward_var"] == pytest.approx(1.0)  # the maximum variance
    assert out == pytest.approx(ADV.grpo_advantages(g.rewards) * 0.5)


def test_eg_spo_gate_by_hand():
    g = GroupFeatures(rewards=np.array([0.0, 2.0]), token_entropy=np.array([1.0, 3.0]))
    out, _ = modulate("eg_spo", g, eg_alpha=1.0)
    z = np.exp(-np.array([1.0, 3.0]) / 2.0)
    gate = z / z.mean()
    assert out == pytest.approx(ADV.grpo_advantages(g.rewards) * gate)
    g.token_entropy = np.array([2.0, 2.0])
    assert modulate("eg_spo", g)[0] == pytest.approx(ADV.grpo_advantages(g.rewards))


def test_r2vpo_by_hand():
    g = GroupFeatures(rewards=np.array([0.0, 2.0]), ratio_var=np.array([0.0, 1.0]))
    out, _ = modulate("r2vpo", g, r2vpo_lambda=2.0)
    assert out == pytest.approx(ADV.grpo_advantages(g.rewards) * np.array([1.0, 1 / 3]))


def test_rd_only_and_gcpo_names_match_advantages_module():
    g = _group()
    for name, geometry, use_rd in [("cd", "cd", False), ("bot_rd", "bot", True), ("cd_rd", "cd", True)]:
        out, _ = modulate(name, g)
        ref = ADV.gcpo_advantages(g.rewards, g.embeddings, g.clusters, geometry=geometry, use_rd=use_rd)
        assert out == pytest.approx(ref)
    out, info = modulate("rd", g)
    assert out == pytest.approx(ADV.grpo_advantages(g.rewards) * D.rd_weight(D.reward_dispersion(g.rewards), 6))


def test_modulator_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown modulator 'sep'"):
        modulate("sep", _group())
    with pytest.raises(ValueError, match="needs 'clusters'"):
        modulate("bot", GroupFeatures(rewards=np.array([0.0, 1.0]), embeddings=np.eye(2)))
    with pytest.raises(ValueError, match="outside the declared range"):
        modulate("none", GroupFeatures(rewards=np.array([0.0, 3.0])))


def test_seed_grpo_length_normalises_likelihood_weights():
    # two rollouts per cluster; sums differ a lot, means per token are equal -> SE = ln 2
    g = GroupFeatures(
        rewards=np.array([0.0, 1.0, 2.0, 1.0]),
        clusters=np.array([0, 0, 1, 1]),
        logprobs=np.array([-2.0, -2.0, -40.0, -40.0]),
        n_tokens=np.array([2, 2, 40, 40]),
    )
    _, info = modulate("se", g)
    assert info["se"] == pytest.approx(math.log(2))
    g.n_tokens = None  # raw sums: cluster 1 has e^-38 of the mass -> SE ~ 0
    assert modulate("se", g)[1]["se"] == pytest.approx(0.0, abs=1e-12)
    g.n_tokens = np.array([2, 2, 0, 40])
    with pytest.raises(ValueError, match="n_tokens must be positive"):
        modulate("se", g)
