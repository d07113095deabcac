"""The shuffled control '<modulator>:shuffled': each step keeps the multiset of ω of
the modulator's groups and permutes it across them, on a tiny model; the permutation is the
seeded one, and a name without a group weight is refused."""

import numpy as np
import pytest

from gcpo_analysis.measures.shuffled import arm_folder_name, arm_of_folder, shuffle_weights, shuffled_names, split_arm

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("accelerate")


def test_shuffle_weights_permutes_only_the_eligible_groups():
    w = np.array([1.1, 1.2, 9.0, 1.3, 1.4])
    out = shuffle_weights(w, [True, True, False, True, True], seed=3)
    assert out[2] == 9.0 and sorted(out[[0, 1, 3, 4]]) == [1.1, 1.2, 1.3, 1.4]
    perm = np.random.default_rng(3).permutation([0, 1, 3, 4])
    np.testing.assert_array_equal(out[[0, 1, 3, 4]], w[perm])  # numpy's seeded permutation, by hand
    assert not np.array_equal(shuffle_weights(np.arange(8.0), [True] * 8, seed=0), np.arange(8.0))
    with pytest.raises(ValueError, match="one length"):
        shuffle_weights(w, [True], seed=0)


def test_names():
    from gcpo_analysis.measures.modulators import MODULATORS

    assert split_arm("bot_rd:shuffled") == ("bot_rd", True) and split_arm("bot_rd") == ("bot_rd", False)
    names = shuffled_names(MODULATORS)
    assert "bot_rd:shuffled" in names and "none:shuffled" not in names
    assert all(MODULATORS[split_arm(n)[0]].weight is not None for n in names)  # per-rollout ones have no ω


def test_an_arms_folder_name_has_no_colon_and_maps_back(tmp_path):
    """A ':' in a committed path breaks a Windows checkout, so ``bot_rd:shuffled`` lives in
    ``bot_rd-shuffled``; every arm name maps to one folder and back."""
    from gcpo_analysis.measures.modulators import MODULATORS
    from gcpo_train.compare.layout import arm_seed_folder

    arms = [*MODULATORS, *shuffled_names(MODULATORS)]
    folders = [arm_folder_name(a) for a in arms]
    assert arm_folder_name("bot_rd:shuffled") == "bot_rd-shuffled" and arm_folder_name("none") == "none"
    assert not any(set(f) & set(':<>"|?*\\/') for f in folders) and len(set(folders)) == len(arms)
    assert [arm_of_folder(f) for f in folders] == arms
    assert arm_seed_folder(tmp_path, "bot_rd:shuffled", 3) == tmp_path / "runs" / "bot_rd-shuffled" / "seed_3"
    with pytest.raises(ValueError, match="modulator"):
        arm_folder_name("../x")  # a path is refused as a path
    legacy = tmp_path / "old" / "runs" / "bot_rd:shuffled" / "seed_0"
    legacy.mkdir(parents=True)  # a run of an older gcpo: named, not silently retrained elsewhere
    with pytest.raises(ValueError, match="rename .*bot_rd:shuffled to .*bot_rd-shuffled"):
        arm_seed_folder(tmp_path / "old", "bot_rd:shuffled", 0)


def _omegas(frame):
    from gcpo_train.compare.treatment import omega_groups

    return omega_groups(frame).set_index("query_id")["omega"]


def test_the_shuffled_arm_keeps_each_steps_multiset_of_omega(tmp_path):
    """Step 1 samples the same rollouts in both arms (common random numbers): the shuffled arm's ω
    read back from its advantages are bot_rd's, permuted across the groups; at every step the
    multiset is the step's own ω (logged in info as omega_own)."""
    from helpers.loop_setup import make

    from gcpo_train.config import TrainConfig

    kw = dict(steps=3, queries_per_step=4, group_size=4)
    plain = make(tmp_path, "plain", modulator="bot_rd", **kw)
    shuffled = make(tmp_path, "shuffled", modulator="bot_rd:shuffled", **kw)
    _, a = plain.train_step(1)
    _, b = shuffled.train_step(1)
    assert a["completion"].tolist() == b["completion"].tolist()
    wa, wb = _omegas(a), _omegas(b)
    assert len(wa) >= 2
    np.testing.assert_allclose(np.sort(wa.to_numpy()), np.sort(wb.to_numpy()), rtol=1e-6)
    for step in (2, 3):
        _, frame = shuffled.train_step(step)
        omega = _omegas(frame)
        assert len(omega) == 0 or omega.to_numpy().min() > 0
    with pytest.raises(ValueError, match="modulator must be one of"):
        TrainConfig(modulator="eg_spo:shuffled").validate()


def test_the_shuffled_advantages_are_the_step_permutation_of_own_omega(tmp_path):
    """Ã = ω_π(k) · A_k exactly, with π the permutation seeded by (seed, step) (an independent
    recomputation from the group_weight of each group)."""
    from helpers.loop_setup import make

    from gcpo_analysis.measures.advantages import grpo_advantages
    from gcpo_train.loop.trainer import SHUFFLE_STREAM, step_seed

    tr = make(tmp_path, "s", modulator="bot_rd:shuffled", steps=2, queries_per_step=4, group_size=4, seed=3)
    plain = make(tmp_path, "p", modulator="bot_rd", steps=2, queries_per_step=4, group_size=4, seed=3)
    _, frame = tr.train_step(1)
    _, ref = plain.train_step(1)  # the same samples: its ω are each group's own
    order = list(dict.fromkeys(frame["query_id"]))
    own = _omegas(ref)
    adv = {q: grpo_advantages(g["reward"].to_numpy(float), 1e-6) for q, g in frame.groupby("query_id", sort=False)}
    eligible = [bool(np.any(adv[q] != 0)) for q in order]
    w = np.array([own.get(q, 1.0) for q in order])
    expected = shuffle_weights(w, eligible, step_seed(tr.config.seed, 1, SHUFFLE_STREAM))
    assert sum(eligible) >= 2 and not np.allclose(expected, w)  # this step's permutation moves ω
    for q, omega in zip(order, expected, strict=True):
        got = frame.loc[frame["query_id"] == q, "advantage"].to_numpy()
        np.testing.assert_allclose(got, adv[q] * omega, rtol=1e-5, atol=1e-7)


def test_a_derangement_leaves_no_eligible_group_its_own_weight():
    """``:deranged`` moves every eligible group's ω to another group (checked on the positions,
    so equal ω values cannot hide a fixed point); the ineligible keep theirs; k = 1 has none to
    move; the draws are uniform over the derangements (k = 3 has two, each about half the time)."""
    from gcpo_analysis.measures.shuffled import derangement

    for seed in range(200):
        k = 2 + seed % 5
        w = np.arange(k + 1, dtype=float)  # distinct values: a position is its value
        eligible = [True] * k + [False]
        out = shuffle_weights(w, eligible, seed=seed, derange=True)
        assert out[-1] == w[-1] and sorted(out[:k]) == list(w[:k])
        assert np.all(out[:k] != w[:k]), (seed, out)
    assert shuffle_weights([1.5, 2.0], [True, False], seed=0, derange=True).tolist() == [1.5, 2.0]
    rng = np.random.default_rng(0)
    counts: dict[tuple, int] = {}
    for _ in range(2000):
        key = tuple(derangement(3, rng))
        counts[key] = counts.get(key, 0) + 1
    assert set(counts) == {(1, 2, 0), (2, 0, 1)} and min(counts.values()) > 900
    # the plain shuffle is unchanged: the committed shuffled arm's permutations
    w = np.array([1.1, 1.2, 1.3, 1.4])
    np.testing.assert_array_equal(
        shuffle_weights(w, [True] * 4, seed=5), w[np.random.default_rng(5).permutation(np.arange(4))]
    )


def test_the_deranged_arm_trains_with_no_group_keeping_its_omega(tmp_path):
    """On a tiny model, each step of 'bot_rd:deranged' gives group k the ω of another eligible
    group: Ã_k = ω_π(k) A_k with π the seeded derangement, π(k) ≠ k for every eligible k."""
    from helpers.loop_setup import make

    from gcpo_analysis.measures.advantages import grpo_advantages
    from gcpo_analysis.measures.shuffled import derangement
    from gcpo_train.loop.trainer import SHUFFLE_STREAM, step_seed

    tr = make(tmp_path, "d", modulator="bot_rd:deranged", steps=1, queries_per_step=4, group_size=4, seed=3)
    plain = make(tmp_path, "p", modulator="bot_rd", steps=1, queries_per_step=4, group_size=4, seed=3)
    _, frame = tr.train_step(1)
    _, ref = plain.train_step(1)
    order = list(dict.fromkeys(frame["query_id"]))
    own = _omegas(ref)
    adv = {q: grpo_advantages(g["reward"].to_numpy(float), 1e-6) for q, g in frame.groupby("query_id", sort=False)}
    idx = [i for i, q in enumerate(order) if np.any(adv[q] != 0)]
    assert len(idx) >= 2
    perm = derangement(len(idx), np.random.default_rng(step_seed(tr.config.seed, 1, SHUFFLE_STREAM)))
    assert np.all(perm != np.arange(len(idx)))
    for j, i in enumerate(idx):
        q, source = order[i], order[idx[perm[j]]]
        got = frame.loc[frame["query_id"] == q, "advantage"].to_numpy()
        np.testing.assert_allclose(got, adv[q] * own[source], rtol=1e-5, atol=1e-7)


def test_a_dose_arm_trains_with_its_alpha_base_and_has_one_folder(tmp_path):
    """'bot_rd:alpha5' is bot_rd with alpha_base 5 in its runs' configs, in folder bot_rd-alpha5;
    a dose has one spelling, and plain GRPO takes none."""
    from gcpo_analysis.measures.shuffled import check_arm_name, parse_arm
    from gcpo_train.compare.run import run_config
    from gcpo_train.config import TrainConfig

    assert parse_arm("bot_rd:alpha5") == ("bot_rd", 5.0) and parse_arm("rd:alpha2.5") == ("rd", 2.5)
    assert parse_arm("bot_rd:shuffled:alpha5") == ("bot_rd:shuffled", 5.0) and parse_arm("bot_rd") == ("bot_rd", None)
    assert arm_folder_name("bot_rd:alpha5") == "bot_rd-alpha5" and arm_of_folder("bot_rd-alpha5") == "bot_rd:alpha5"
    assert arm_of_folder(arm_folder_name("bot_rd:deranged:alpha0.6")) == "bot_rd:deranged:alpha0.6"
    for bad, match in (("bot_rd:alpha05", "alpha5"), ("bot_rd:alpha5.0", "alpha5"), ("none:alpha5", "none")):
        with pytest.raises(ValueError, match=match):
            check_arm_name(bad)
    base = TrainConfig(model="tiny:2", modulator="none", steps=1)
    cfg = run_config(base, "bot_rd:alpha5", 2, tmp_path, 0, 10, 0)
    assert (cfg.modulator, cfg.alpha_base, cfg.seed) == ("bot_rd", 5.0, 2)
    assert cfg.output_dir.endswith("runs/bot_rd-alpha5/seed_2")
    assert run_config(base, "bot_rd", 2, tmp_path, 0, 10, 0).alpha_base == base.alpha_base
