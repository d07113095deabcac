"""The weight API of the group-level modulators: ``group_weight`` gives omega(q),
``modulate`` is exactly ``grpo_advantages * omega``, the weights equal hand-worked values, and
the per-rollout modulators (eg_spo, r2vpo, empo) have no group weight and say why."""

import dataclasses
import math

import numpy as np
import pytest
from helpers.embedders import HashEmbedder

from gcpo_analysis.measures import modulators
from gcpo_analysis.measures.advantages import grpo_advantages
from gcpo_analysis.measures.modulators import MODULATORS, GroupFeatures, group_weight, modulate

GROUP_LEVEL = ["none", "se", "kle", "care", "cd", "bot", "rd", "cd_rd", "bot_rd", "q_hawkeye"]
GROUP_LEVEL += ["reward_std", "inv_reward_std", "inv_grad_norm", "inv_variance"]  # the field's (field_weights)
PER_ROLLOUT = ["empo", "eg_spo", "r2vpo"]
A = 0.6  # alpha_base


def _unit(*rows):
    e = np.asarray(rows, dtype=np.float64)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def _group(rewards, clusters, embeddings=None, **kw):
    G = len(rewards)
    e = np.eye(max(G, 2))[:G] if embeddings is None else embeddings
    return GroupFeatures(
        rewards=np.asarray(rewards, float),
        embeddings=e,
        clusters=np.asarray(clusters),
        token_entropy=np.linspace(0.5, 1.5, G),
        ratio_var=np.linspace(0.0, 0.2, G),
        grad_norm2=kw.pop("grad_norm2", 0.7),  # the update-alignment study's ‖g_q‖² (inv_grad_norm)
        **kw,
    )


def _cases():
    rng = np.random.default_rng(3)
    yield "G=1", _group([1.0], [0])
    yield "equal rewards", _group([1.0, 1.0, 1.0], [0, 1, 1])
    yield "one cluster", _group([0.0, 2.0, 1.0, 2.0], [5, 5, 5, 5])
    yield "all distinct", _group([0.0, 2.0, 1.0, 0.5, 2.0], [0, 1, 2, 3, 4])
    e = rng.normal(size=(6, 5))
    yield "random", _group(rng.uniform(0, 2, 6), [0, 1, 0, 2, 1, 0], e / np.linalg.norm(e, axis=1, keepdims=True))
    yield "with logprobs", _group([0.0, 2.0, 2.0], [0, 0, 1], logprobs=np.array([-3.0, -1.0, -8.0]))


def test_the_registry_says_which_kind():
    assert sorted(n for n, m in MODULATORS.items() if m.weight is not None) == sorted(GROUP_LEVEL)
    assert sorted(n for n, m in MODULATORS.items() if m.weight is None) == sorted(PER_ROLLOUT)
    for name in PER_ROLLOUT:
        assert MODULATORS[name].per_rollout is not None and MODULATORS[name].no_weight
    assert not hasattr(modulators, "group_weight_from")  # the least-squares recovery is gone


@pytest.mark.parametrize("name", GROUP_LEVEL)
@pytest.mark.parametrize("case", [c for c, _ in _cases()])
def test_modulate_is_grpo_advantages_times_the_weight_bit_for_bit(name, case):
    g = dict(_cases())[case]
    params = dict(alpha_base=0.45, r_min=0.0, r_max=2.0, q_alpha=0.3)
    adv, info = modulate(name, g, eps=1e-4, **params)
    w, winfo = group_weight(name, g, **params)
    assert isinstance(w, float) and np.isfinite(w)
    assert info == winfo
    expected = grpo_advantages(g.rewards, 1e-4) * w
    assert adv.dtype == expected.dtype and adv.tobytes() == expected.tobytes()


def test_hand_worked_weights():
    aG4 = A / math.log(4)
    e = _unit([1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0])  # two orthogonal pairs
    g = _group([0.0, 2.0, 0.0, 2.0], [0, 0, 1, 1], e)
    # SE of two equal clusters = ln 2; Seed-GRPO: 1 - 0.6 ln 2 / ln 4 = 0.7
    assert group_weight("se", g)[0] == pytest.approx(0.7, abs=1e-12)
    # CARE: agreement (2*1 + 2*1) / (4*3) = 1/3
    assert group_weight("care", g)[0] == pytest.approx(1 - aG4 * (2 / 3), abs=1e-12)
    # CD: 8 of the 16 pairs are orthogonal (D = 1): CD = 1/2
    w_cd = 1 - aG4 * 0.25
    assert group_weight("cd", g)[0] == pytest.approx(w_cd, abs=1e-12)
    # BoT: centroids e1, e2 with mass 1/2; mu* at 45 degrees: BoT = (1 - 1/sqrt 2) / 2
    bot = (1 - 1 / math.sqrt(2)) / 2
    w_bot = 1 - aG4 * bot**2
    assert group_weight("bot", g)[0] == pytest.approx(w_bot, abs=1e-12)
    # RD: sum |r - 1| = 4 = RD_max(4) over [0, 2]: RD = 1, omega_RD = 1 + alpha_G
    w_rd = 1 + aG4
    assert group_weight("rd", g)[0] == pytest.approx(w_rd, abs=1e-12)
    assert group_weight("cd_rd", g)[0] == pytest.approx(w_cd * w_rd, abs=1e-12)
    assert group_weight("bot_rd", g)[0] == pytest.approx(w_bot * w_rd, abs=1e-12)
    # Q-Hawkeye: Var = 1 = Var_max(4): 1 - q_alpha
    assert group_weight("q_hawkeye", g, q_alpha=0.25)[0] == pytest.approx(0.75, abs=1e-12)
    assert group_weight("none", g) == (1.0, {})


def test_edge_cases_by_hand():
    # G = 1: no dispersion, every weight 1 (Q-Hawkeye's Var_max(1) = 0 too)
    one = _group([2.0], [0], _unit([1, 0]))
    for name in GROUP_LEVEL:
        assert group_weight(name, one)[0] == 1.0, name
    # one cluster: SE = 0 and CARE's agreement = 1 give 1; all distinct: SE = ln G gives 1 - alpha
    same = _group([0.0, 1.0, 2.0], [7, 7, 7])
    assert group_weight("se", same)[0] == 1.0 and group_weight("care", same)[0] == 1.0
    distinct = _group([0.0, 1.0, 2.0], [0, 1, 2])
    assert group_weight("se", distinct)[0] == pytest.approx(1 - A, abs=1e-12)
    assert group_weight("care", distinct)[0] == pytest.approx(max(0.0, 1 - A / math.log(3)), abs=1e-12)
    # orthogonal embeddings: KLE = ln G, so 1 - alpha
    assert group_weight("kle", distinct)[0] == pytest.approx(1 - A, abs=1e-9)
    # equal rewards: RD = 0 and Var = 0 give 1, and the advantages are 0 whatever the weight
    equal = _group([1.0, 1.0, 1.0], [0, 1, 2])
    assert group_weight("rd", equal)[0] == 1.0 and group_weight("q_hawkeye", equal)[0] == 1.0
    assert not modulate("se", equal)[0].any()


def test_se_weight_uses_the_likelihood_weighted_se_with_logprobs():
    lp, n = np.array([-2.0, -4.0, -1.0]), np.array([2.0, 4.0, 1.0])  # every mean token log-prob is -1
    g = _group([0.0, 1.0, 2.0], [0, 0, 1], logprobs=lp, n_tokens=n)
    c = np.array([2 / 3, 1 / 3])  # equal p_i: the cluster fractions
    se = float(-(c * np.log(c)).sum())
    w, info = group_weight("se", g)
    assert info["se"] == pytest.approx(se, abs=1e-12) and w == pytest.approx(1 - A * se / math.log(3), abs=1e-12)
    # without lengths the sums weigh: rollout 2 (log p = -1) dominates cluster 1
    w2, info2 = group_weight("se", dataclasses.replace(g, n_tokens=None))
    p = np.exp(lp) / np.exp(lp).sum()
    c2 = np.array([p[0] + p[1], p[2]])
    assert info2["se"] == pytest.approx(float(-(c2 * np.log(c2)).sum()), abs=1e-12)


@pytest.mark.parametrize("name", PER_ROLLOUT)
def test_per_rollout_modulators_have_no_group_weight(name):
    g = _group([0.0, 1.0, 2.0], [0, 1, 1])
    with pytest.raises(ValueError, match=f"modulator '{name}' has no group weight: .+; modulate\\(\\) gives"):
        group_weight(name, g)
    adv, _ = modulate(name, g)  # their advantages still come from modulate
    assert adv.shape == (3,) and np.isfinite(adv).all()


def test_group_weight_checks_its_inputs_as_modulate_does():
    g = _group([0.0, 3.0], [0, 1])
    with pytest.raises(ValueError, match="outside the declared range"):
        group_weight("rd", g)
    with pytest.raises(ValueError, match="alpha_base must be a finite number >= 0"):
        group_weight("cd", _group([0.0, 1.0], [0, 1]), alpha_base=-1.0)
    with pytest.raises(ValueError, match="unknown modulator 'bott'"):
        group_weight("bott", g)


# ----------------------------------------------------------------------------- gcpo_train side
def test_group_modulator_weigh_groups_equals_group_weight_per_group():
    pytest.importorskip("torch")
    from gcpo_analysis.measures.judges import make_judge
    from gcpo_train.modulation import GroupModulator, ModulationSettings

    texts = [["red", "red", "blue", "green"], ["one", "two", "one"], ["x"]]
    rewards = [np.array([0.0, 2.0, 1.0, 2.0]), np.array([1.0, 1.0, 1.0]), np.array([2.0])]
    for name in ("bot_rd", "se", "care", "q_hawkeye"):
        gm = GroupModulator(ModulationSettings(modulator=name, judge="lexical"), embedder=HashEmbedder())
        weights, infos, stats = gm.weigh_groups(rewards, texts, texts)
        advantages, adv_infos, _ = gm.modulate_groups(rewards, texts, texts)
        assert weights.shape == (3,) and infos == adv_infos
        from gcpo_analysis.measures.clustering import greedy_nli_clusters

        for k, (t, r) in enumerate(zip(texts, rewards)):
            g = GroupFeatures(
                rewards=r,
                embeddings=HashEmbedder().encode(t).astype(np.float64),
                clusters=np.asarray(greedy_nli_clusters(t, make_judge("lexical"), threshold=0.35)),
            )
            assert weights[k] == group_weight(name, g)[0]
            assert np.array_equal(advantages[k], grpo_advantages(r) * weights[k])


def test_weigh_groups_refuses_a_per_rollout_modulator_before_building_anything():
    pytest.importorskip("torch")
    from gcpo_train.modulation import GroupModulator, ModulationSettings

    gm = GroupModulator(ModulationSettings(modulator="eg_spo"))
    with pytest.raises(ValueError, match="'eg_spo' has no group weight"):
        gm.weigh_groups([np.zeros(2)], [["a", "b"]], [["a", "b"]])
    assert gm._tools is None


def test_modulation_settings_fields_and_help():
    pytest.importorskip("torch")
    from gcpo_train.config import TrainConfig
    from gcpo_train.modulation import ModulationSettings

    names = [f.name for f in dataclasses.fields(ModulationSettings)]
    assert names == [  # the measurement tools, the group weight's knobs, then the per-rollout ones
        "embedder",
        "judge",
        "nli_threshold",
        "modulator",
        "alpha_base",
        "r_min",
        "r_max",
        "q_hawkeye_alpha",
        "modulator_params",
        "use_full_completion",
        "eps",
        "eg_spo_alpha",
        "r2vpo_lambda",
        "empo_low",
        "empo_high",
    ]
    assert all(len(f.metadata.get("help", "")) > 10 for f in dataclasses.fields(ModulationSettings))
    cfg = TrainConfig(modulator="q_hawkeye", q_hawkeye_alpha=0.3, eg_spo_alpha=2.0, eps=1e-3, output_dir="unused")
    s = cfg.modulation_settings()
    assert isinstance(s, ModulationSettings)
    assert all(getattr(s, n) == getattr(cfg, n) for n in names)
    partial = {n: getattr(cfg, n) for n in names if n != "q_hawkeye_alpha"}  # GCPOConfig's old gap
    with pytest.raises(ValueError, match=r"lacks the modulation settings \['q_hawkeye_alpha'\]"):
        ModulationSettings.from_config(type("Partial", (), partial)())
