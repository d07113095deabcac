"""Every group weight is checked at one boundary (gcpo_analysis.measures.weights_checked): a
finite number >= 0, one per group, else an error naming the modulator or measure, the group and
the value. Before, a plug-in's NaN or inf weight passed the ``:shuffled`` arm (the run then died
blaming the learning rate), a measure's NaN weight was written to the frame with exit 0, and an
array of per-rollout weights trained in gcpo's loop but crashed the TRL path with a numpy error."""

import math

import numpy as np
import pytest

from gcpo_analysis.measures.modulators import MODULATORS, GroupFeatures, group_weight, modulate, register_modulator
from gcpo_analysis.measures.registry import MEASURE_REGISTRY, register_measure
from gcpo_analysis.measures.weights_checked import checked_weight, checked_weights

BAD = {
    "nan": (math.nan, "not finite"),
    "inf": (math.inf, "not finite"),
    "negative": (-0.5, "negative"),
    "per rollout": (np.array([0.5, 1.0, 1.5]), r"one number per group expected, got an array of shape \(3,\)"),
    "a string": ("0.5", "a real number expected, got str"),
}


@pytest.mark.parametrize("case", BAD)
def test_the_check_refuses_each_bad_weight_naming_source_group_and_value(case):
    value, why = BAD[case]
    with pytest.raises(ValueError, match=rf"^modulator 'toy' gave the weight .* for group 3: {why}"):
        checked_weight(value, "modulator 'toy'", "group 3")


def test_the_check_keeps_good_weights():
    assert [checked_weight(v, "m") for v in (0, 0.0, 1.5, np.float32(0.25), np.int64(2))] == [0.0, 0.0, 1.5, 0.25, 2.0]
    np.testing.assert_array_equal(checked_weights([0.5, 1], "m", ["a", "b"]), [0.5, 1.0])
    with pytest.raises(ValueError, match=r"weights of shape \(3,\) for 2 groups"):
        checked_weights([0.5, 1, 1], "m", ["a", "b"])
    with pytest.raises(ValueError, match="gave the weight nan for b: not finite"):
        checked_weights([0.5, math.nan], "m", ["a", "b"])


@pytest.fixture(params=list(BAD))
def bad_modulator(request):
    value, why = BAD[request.param]
    register_modulator("toy_bad", source="toy: a broken weight")(lambda g, **_: (value, {}))
    yield "toy_bad", why
    MODULATORS.pop("toy_bad")


GROUP = GroupFeatures(rewards=np.array([0.0, 2.0, 1.0]))


def test_modulate_and_group_weight_refuse_a_bad_weight(bad_modulator):
    name, why = bad_modulator
    for call in (modulate, group_weight):
        with pytest.raises(ValueError, match=f"modulator 'toy_bad' gave the weight .* for this group: {why}"):
            call(name, GROUP)


def _settings(modulator):
    from gcpo_train.modulation import ModulationSettings

    return ModulationSettings(modulator=modulator)


REWARDS = [np.array([0.0, 2.0, 1.0]), np.array([2.0, 0.0, 0.0])]
TEXTS = [["a", "b", "c"], ["d", "e", "f"]]


@pytest.mark.parametrize("arm", ["toy_bad", "toy_bad:shuffled"])
def test_the_own_loop_and_the_shuffled_arm_refuse_a_bad_weight_naming_the_query(bad_modulator, arm):
    from gcpo_train.modulation import GroupModulator

    _, why = bad_modulator
    gm = GroupModulator(_settings(arm))
    names = ["query 'q0' at step 1", "query 'q1' at step 1"]
    with pytest.raises(ValueError, match=f"^query 'q0' at step 1: modulator 'toy_bad' gave the weight .*{why}"):
        gm.modulate_groups(REWARDS, TEXTS, TEXTS, shuffle_seed=0, names=names)


def test_the_trl_path_refuses_a_bad_weight_naming_the_group(bad_modulator):
    from gcpo_train.modulation import GroupModulator

    _, why = bad_modulator
    with pytest.raises(ValueError, match=f"^group 0 of the batch: modulator 'toy_bad' gave the weight .*{why}"):
        GroupModulator(_settings("toy_bad")).weigh_groups(REWARDS, TEXTS, TEXTS)


def test_good_weights_pass_every_path_unchanged():
    from gcpo_train.modulation import GroupModulator

    weights, _, _ = GroupModulator(_settings("rd")).weigh_groups(REWARDS, TEXTS, TEXTS)
    expected = [group_weight("rd", GroupFeatures(rewards=r))[0] for r in REWARDS]
    np.testing.assert_array_equal(weights, expected)
    adv, _, _ = GroupModulator(_settings("rd")).modulate_groups(REWARDS, TEXTS, TEXTS)
    np.testing.assert_allclose(adv[0], modulate("rd", GroupFeatures(rewards=REWARDS[0]))[0])


@pytest.mark.parametrize("case", ["nan", "negative"])
def test_a_measure_whose_weight_is_bad_is_refused_by_gcpo_score(tmp_path, capsys, case):
    from gcpo_analysis.cli import main

    value, why = BAD[case]
    register_measure(
        "toy_badw", rewards=True, weight=lambda u, G, alpha: np.full(len(u), value), source="toy: a broken weight"
    )(lambda groups, r_min, r_max: np.zeros(len(groups)))
    try:
        out = tmp_path / "groups.parquet"
        rc = main(["score", "examples/rollouts_small.jsonl", "-o", str(out), "--measures", "toy_badw"])
    finally:
        MEASURE_REGISTRY.pop("toy_badw")
    err = capsys.readouterr().err
    assert rc == 2 and "measure 'toy_badw' gave the weight" in err and "for query " in err and why in err, err
    assert not out.exists()
