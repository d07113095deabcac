"""Every registered measure and modulator passes the same checks (scikit-learn's
``parametrize_with_checks`` habit): a new entry is tested by being registered.

Measures: permutation invariance within a group, G = 1, equal rewards, one cluster and all-distinct
clusters, NaN/inf refused, float64 preserved, the batched form equals the per-group loop, and the
measure reaches ``gcpo score``'s frame. Modulators: permutation equivariance of the advantages, G = 1,
equal rewards (no advantage), finite float64 output, and the TRL bridge's verdict (run or refuse
with the reason, never a KeyError).
"""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from helpers.embedders import HashEmbedder

from gcpo_analysis.measures.modulators import MODULATORS, GroupFeatures, modulate
from gcpo_analysis.measures.registry import MEASURE_REGISTRY, frame_order, table_order
from gcpo_analysis.measures.score import score_groups

MEASURES = sorted(MEASURE_REGISTRY)
PER_ROLLOUT_FIELDS = ("rewards", "embeddings", "clusters", "token_entropy", "logprobs", "n_tokens", "ratio_var")


def _group(G: int, seed: int = 0, clusters=None, rewards=None) -> GroupFeatures:
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(G, 6))
    return GroupFeatures(
        rewards=rng.uniform(0, 2, G) if rewards is None else np.asarray(rewards, float),
        embeddings=e / np.linalg.norm(e, axis=1, keepdims=True),
        clusters=rng.integers(0, 3, G) if clusters is None else np.asarray(clusters),
        token_entropy=rng.uniform(0.1, 3, G),
        logprobs=-rng.uniform(1, 20, G),
        n_tokens=rng.integers(1, 10, G).astype(float),
        ratio_var=rng.uniform(0, 0.3, G),
        answers=[f"a{i}" for i in range(G)],
    )


def _permuted(g: GroupFeatures, perm: np.ndarray) -> GroupFeatures:
    changes = {f: np.asarray(getattr(g, f))[perm] for f in PER_ROLLOUT_FIELDS if getattr(g, f) is not None}
    return dataclasses.replace(g, answers=[g.answers[i] for i in perm] if g.answers else None, **changes)


def _values(name, groups):
    return MEASURE_REGISTRY[name].compute(groups, 0.0, 2.0)


# ------------------------------------------------------------------------------------ measures
@pytest.mark.parametrize("name", MEASURES)
def test_measure_is_invariant_to_the_order_of_rollouts(name):
    groups = [_group(6, seed) for seed in range(4)]
    perm = np.random.default_rng(9).permutation(6)
    np.testing.assert_allclose(_values(name, [_permuted(g, perm) for g in groups]), _values(name, groups), atol=1e-12)


@pytest.mark.parametrize("name", MEASURES)
def test_measure_batched_equals_the_per_group_loop(name):
    groups = [_group(5, seed) for seed in range(6)]
    loop = np.concatenate([_values(name, [g]) for g in groups])
    np.testing.assert_allclose(_values(name, groups), loop, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", MEASURES)
@pytest.mark.parametrize(
    "case",
    ["G=1", "equal rewards", "one cluster", "all distinct"],
)
def test_measure_edge_cases_give_finite_float64_and_weight_one_at_G1(name, case):
    G = 1 if case == "G=1" else 5
    clusters = np.zeros(G, int) if case == "one cluster" else np.arange(G) if case == "all distinct" else None
    rewards = np.ones(G) if case == "equal rewards" else None
    groups = [_group(G, seed, clusters=clusters, rewards=rewards) for seed in range(3)]
    m = MEASURE_REGISTRY[name]
    u = _values(name, groups)
    assert u.dtype == np.float64 and u.shape == (3,) and np.isfinite(u).all()
    if m.weight is not None:
        w = np.asarray(m.weight(u, G, 0.6), dtype=float)
        assert np.isfinite(w).all() and (w >= 0).all()
        if G == 1:  # alpha_G = 0: no modulation of a group of one
            np.testing.assert_array_equal(w, 1.0)
    if case == "equal rewards" and m.rewards and name == "rd":
        np.testing.assert_array_equal(u, 0.0)


@pytest.mark.parametrize("name", MEASURES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_measure_refuses_nan_and_inf_in_what_it_reads(name, bad):
    m = MEASURE_REGISTRY[name]
    assert m.reads(), f"measure {name!r} reads no number"
    for field in m.reads():
        g = _group(4)
        value = np.array(getattr(g, field), dtype=float)
        value.flat[1] = bad
        with pytest.raises(ValueError, match=rf"{name}.*group 0.*{field}"):
            _values(name, [dataclasses.replace(g, **{field: value})])


def _rollouts(n_queries=3, G=4):
    rows = []
    rng = np.random.default_rng(0)
    for q in range(n_queries):
        for i in range(G):
            rows.append(
                dict(
                    query_id=f"q{q}",
                    rollout_id=i,
                    completion=f"Answer: {'abc'[(q + i) % 3]}",
                    answer="abc"[(q + i) % 3],
                    reward=float(rng.uniform(0, 2)),
                    token_entropy=float(rng.uniform(0.1, 2)),
                    logprob=float(-rng.uniform(1, 9)),
                    n_tokens=int(rng.integers(1, 6)),
                )
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("name", MEASURES)
def test_measure_reaches_the_groups_frame(name):
    out = score_groups(_rollouts(), [name], embedder=HashEmbedder(), judge="lexical", progress=False)
    m = MEASURE_REGISTRY[name]
    assert name in out.columns and out[name].notna().all()
    assert (m.weight_column in out.columns) if m.weight is not None else True
    assert name in frame_order() and name in table_order()


# ------------------------------------------------------------------------------------ modulators
MODULATOR_NAMES = sorted(MODULATORS)


def _modulate(name, g):
    return modulate(name, g, r_min=0.0, r_max=2.0)


@pytest.mark.parametrize("name", MODULATOR_NAMES)
def test_modulator_advantages_follow_a_permutation_of_rollouts(name):
    g = _group(6, 3)
    perm = np.random.default_rng(1).permutation(6)
    a, _ = _modulate(name, g)
    b, _ = _modulate(name, _permuted(g, perm))
    np.testing.assert_allclose(b, np.asarray(a)[perm], atol=1e-12)


@pytest.mark.parametrize("name", MODULATOR_NAMES)
@pytest.mark.parametrize("case", ["G=1", "equal rewards", "one cluster", "all distinct"])
def test_modulator_edge_cases_are_finite_float64(name, case):
    G = 1 if case == "G=1" else 5
    clusters = np.zeros(G, int) if case == "one cluster" else np.arange(G) if case == "all distinct" else None
    g = _group(G, 4, clusters=clusters, rewards=np.ones(G) if case == "equal rewards" else None)
    adv, info = _modulate(name, g)
    adv = np.asarray(adv)
    assert adv.shape == (G,) and adv.dtype == np.float64 and np.isfinite(adv).all()
    assert all(np.isfinite(v) for v in info.values())
    if case in ("G=1", "equal rewards") and name != "empo":  # no spread of rewards: no advantage
        np.testing.assert_allclose(adv, 0.0, atol=1e-12)


@pytest.mark.parametrize("name", MODULATOR_NAMES)
def test_modulator_refuses_nan_rewards(name):
    g = _group(4, 5)
    g.rewards[2] = np.nan
    with pytest.raises(ValueError):
        _modulate(name, g)


@pytest.mark.parametrize("name", MODULATOR_NAMES)
def test_modulator_has_a_verdict_under_trl(name):
    pytest.importorskip("trl")
    from gcpo_train.trl import check_trl_modulator

    m = MODULATORS[name]
    if m.weight is not None:
        check_trl_modulator(name)
        weight, _ = m.group_weight(_group(5, 6), r_min=0.0, r_max=2.0)
        assert np.isfinite(weight) and weight >= 0
    else:
        with pytest.raises(ValueError, match=f"{name}.*cannot run inside TRL.*{m.no_weight[:20]}"):
            check_trl_modulator(name)
