"""The measures registry: each measure declares what it needs and computes its
values over groups of one size; ``score_groups`` is a thin adapter over it. Checked against
naive loops and hand-worked values, with G = 1, equal rewards, one cluster and all-distinct
clusters."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from helpers.embedders import HashEmbedder

from gcpo_analysis import vocab
from gcpo_analysis.measures import modulators
from gcpo_analysis.measures.entropy import entropy_weight
from gcpo_analysis.measures.modulators import GroupFeatures
from gcpo_analysis.measures.registry import MEASURE_REGISTRY
from gcpo_analysis.measures.score import MEASURES, parse_measures, score_groups

A = 0.6


def _naive_cd(e):
    G = len(e)
    return sum(min(1.0, max(0.0, 1.0 - float(e[i] @ e[j]))) for i in range(G) for j in range(G) if i != j) / G**2


def _naive_rd(r, r_min=0.0, r_max=2.0):
    G = len(r)
    if G == 1:
        return 0.0
    mean = sum(r) / G
    return min(1.0, sum(abs(x - mean) for x in r) / (2 / G * (G // 2) * -(-G // 2) * (r_max - r_min)))


def _naive_se(clusters, weights=None):
    w = np.ones(len(clusters)) if weights is None else np.asarray(weights, float)
    mass = {}
    for c, p in zip(clusters, w / w.sum()):
        mass[c] = mass.get(c, 0.0) + p
    return -sum(m * math.log(m) for m in mass.values())


def _groups(G, n=4, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        e = rng.normal(size=(G, 5))
        clusters = [np.zeros(G, int), np.arange(G), rng.integers(0, 2, G), rng.integers(0, 3, G)][k % 4]
        rewards = np.full(G, 1.0) if k == 1 else rng.uniform(0, 2, G)
        out.append(
            GroupFeatures(
                rewards=rewards,
                embeddings=e / np.linalg.norm(e, axis=1, keepdims=True),
                clusters=clusters,
                token_entropy=rng.uniform(0, 3, G),
                logprobs=-rng.uniform(1, 20, G),
                n_tokens=rng.integers(1, 10, G).astype(float),
            )
        )
    return out


def test_the_registry_is_the_measures_table():
    assert list(MEASURE_REGISTRY) == list(MEASURES) == ["token_entropy", "pe", "se", "se_lw", "kle", "cd", "bot", "rd"]
    assert {n: set(m.needs) for n, m in MEASURE_REGISTRY.items()} == MEASURES
    assert set().union(*MEASURES.values()) == {vocab.EMBEDDINGS, vocab.CLUSTERS}
    needs = {n: (set(m.needs), m.columns, m.rewards) for n, m in MEASURE_REGISTRY.items()}
    assert needs["bot"] == ({vocab.EMBEDDINGS, vocab.CLUSTERS}, (), False)
    assert needs["rd"] == (set(), (), True)
    assert needs["se_lw"] == ({vocab.CLUSTERS}, ("logprob",), False)
    assert needs["token_entropy"] == (set(), ("token_entropy",), False)
    assert MEASURE_REGISTRY["se_lw"].optional_columns == ("n_tokens",)
    weights = {n: m.weight_column for n, m in MEASURE_REGISTRY.items()}
    assert weights == {
        "token_entropy": None,
        "pe": None,
        "se": "w_se",
        "se_lw": "w_se_lw",
        "kle": "w_kle",
        "cd": "w_cd",
        "bot": "w_bot",
        "rd": "w_rd",
    }
    assert parse_measures("all") == list(MEASURES)
    with pytest.raises(ValueError, match=r"unknown measure\(s\) \['bott'\]; choose from"):
        parse_measures("cd,bott")


@pytest.mark.parametrize("G", [1, 2, 5])
def test_every_measure_against_a_naive_loop(G):
    groups = _groups(G)
    got = {name: m.values(groups, 0.0, 2.0) for name, m in MEASURE_REGISTRY.items()}
    for k, g in enumerate(groups):
        assert got["token_entropy"][k] == pytest.approx(sum(g.token_entropy) / G, abs=1e-12)
        assert got["pe"][k] == pytest.approx(0.0 if G == 1 else -sum(g.logprobs) / G, abs=1e-12)
        assert got["se"][k] == pytest.approx(_naive_se(g.clusters), abs=1e-12)
        assert got["se_lw"][k] == pytest.approx(_naive_se(g.clusters, np.exp(g.logprobs / g.n_tokens)), abs=1e-12)
        assert got["cd"][k] == pytest.approx(_naive_cd(g.embeddings), abs=1e-12)
        assert got["rd"][k] == pytest.approx(_naive_rd(g.rewards), abs=1e-12)
        if G == 1:  # BoT of one rollout is 1 - cos(mu, mu) = 0 up to rounding (~6e-17)
            assert got["kle"][k] == 0.0 and got["bot"][k] == pytest.approx(0.0, abs=1e-15)
    # the named edge cases: one cluster (k=0) and all distinct (k=1) clusters, equal rewards (k=1)
    assert got["se"][0] == 0.0 and got["se"][1] == pytest.approx(math.log(G), abs=1e-12)
    assert got["rd"][1] == 0.0


def test_bot_and_kle_by_hand():
    e = np.array([[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0, 1.0, 0]])
    two_modes = GroupFeatures(rewards=np.zeros(4), embeddings=e, clusters=np.array([0, 0, 1, 1]))
    orthogonal = GroupFeatures(rewards=np.zeros(4), embeddings=np.eye(4), clusters=np.arange(4))
    bot = MEASURE_REGISTRY["bot"].values([two_modes], 0.0, 2.0)
    assert bot[0] == pytest.approx((1 - 1 / math.sqrt(2)) / 2, abs=1e-12)
    # four orthogonal singletons: mu* = (1,1,1,1)/2, every cos = 1/2, BoT = (1 - 1/2) / 2
    assert MEASURE_REGISTRY["bot"].values([orthogonal], 0.0, 2.0)[0] == pytest.approx(0.25, abs=1e-12)
    kle = MEASURE_REGISTRY["kle"].values([orthogonal], 0.0, 2.0)
    assert kle[0] == pytest.approx(math.log(4), abs=1e-9)  # W = 0: rho = I / G


@pytest.mark.parametrize("G", [1, 2, 3, 8])
def test_weights_by_hand(G):
    u = np.array([0.0, 0.3, 0.9])
    aG = 0.0 if G == 1 else A / math.log(G)
    seed = [1.0 if G == 1 else max(0.0, 1 - A * x / math.log(G)) for x in u]
    np.testing.assert_allclose(MEASURE_REGISTRY["se"].weight(u, G, A), seed, rtol=0, atol=1e-15)
    np.testing.assert_allclose(MEASURE_REGISTRY["kle"].weight(u, G, A), seed, rtol=0, atol=1e-15)
    np.testing.assert_allclose(MEASURE_REGISTRY["cd"].weight(u, G, A), [1 - aG * x * x for x in u], atol=1e-15)
    np.testing.assert_allclose(MEASURE_REGISTRY["rd"].weight(u, G, A), [1 + aG * x for x in u], atol=1e-15)
    assert entropy_weight(math.log(max(G, 2)) * 10, G, A) == (1.0 if G == 1 else 0.0)  # clipped at 0


def test_the_modulators_use_the_same_formulas():
    # one formula each: a modulator's info holds the registry's value and weight for the group
    g = _groups(4, n=4, seed=5)[3]  # with log-probabilities: Seed-GRPO's SE is then SE-LW
    discrete = dataclasses.replace(g, logprobs=None, n_tokens=None)
    for measure, modulator, group in (
        ("se", "se", discrete),
        ("se_lw", "se", g),
        ("kle", "kle", g),
        ("cd", "cd", g),
        ("bot", "bot", g),
        ("rd", "rd", g),
    ):
        m = MEASURE_REGISTRY[measure]
        value = m.values([group], 0.0, 2.0)[0]
        _, info = modulators.modulate(modulator, group)
        assert info[modulator] == pytest.approx(value, rel=1e-12, abs=1e-15)
        assert info["w_" + modulator] == pytest.approx(m.weight(np.array([value]), 4, A)[0], rel=1e-12)


def _frame():
    # answers chosen so the lexical judge's clusters are known: identical strings join, disjoint
    # words never do (token-F1 0)
    answers = [["paris", "paris", "rome", "oslo"], ["x"], ["a", "a", "a"], ["one", "two", "three"]]
    rewards = [[0.0, 2.0, 2.0, 0.0], [2.0], [1.0, 1.0, 1.0], [0.0, 1.0, 2.0]]
    rows = []
    for q, (ans, rs) in enumerate(zip(answers, rewards)):
        for i, (a, r) in enumerate(zip(ans, rs)):
            rows.append(
                dict(
                    query_id=q,
                    rollout_id=i,
                    completion=f"so {a}",
                    answer=a,
                    reward=r,
                    token_entropy=0.5 + i,
                    logprob=-1.0 - i,
                    n_tokens=1 + i,
                )
            )
    return pd.DataFrame(rows), answers, rewards


def test_score_groups_is_the_registry_over_the_frame(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("score_groups must not call modulate")

    monkeypatch.setattr(modulators, "modulate", refuse)
    df, answers, rewards = _frame()
    with pytest.warns(UserWarning, match="G = 1"):
        out = score_groups(df, "all", embedder=HashEmbedder(), judge="lexical", progress=False)
    clusters = [[0, 0, 1, 2], [0], [0, 0, 0], [0, 1, 2]]
    emb = HashEmbedder()
    for k in range(4):
        G = len(answers[k])
        row = out.iloc[k]
        assert row["G"] == G and row["n_clusters"] == len(set(clusters[k]))
        assert row["token_entropy"] == pytest.approx(np.mean(0.5 + np.arange(G)), abs=1e-12)
        assert row["se"] == pytest.approx(_naive_se(clusters[k]), abs=1e-12)
        lw = np.exp((-1.0 - np.arange(G)) / (1 + np.arange(G)))
        assert row["se_lw"] == pytest.approx(_naive_se(clusters[k], lw), abs=1e-12)
        w_se = 1.0 if G == 1 else max(0.0, 1 - A * row["se"] / math.log(G))
        assert row["w_se"] == pytest.approx(w_se, abs=1e-12)
        e = emb.encode(answers[k]).astype(np.float64)
        assert row["cd"] == pytest.approx(_naive_cd(e), abs=1e-6)
        assert row["rd"] == pytest.approx(_naive_rd(rewards[k]), abs=1e-12)
        aG = 0.0 if G == 1 else A / math.log(G)
        assert row["w_rd"] == pytest.approx(1 + aG * row["rd"], abs=1e-12)
        assert row["w_cd"] == pytest.approx(1 - aG * row["cd"] ** 2, abs=1e-12)
    # the columns as gcpo has always written them
    assert list(out.columns) == [
        "query_id",
        "G",
        "mean_reward",
        "n_clusters",
        "rd",
        "w_rd",
        "cd",
        "w_cd",
        "bot",
        "w_bot",
        "token_entropy",
        "pe",
        "se",
        "w_se",
        "se_lw",
        "w_se_lw",
        "kle",
        "w_kle",
    ]


def test_score_groups_names_a_missing_column():
    df, _, _ = _frame()
    with pytest.raises(ValueError, match="measure 'se_lw' needs the rollouts column 'logprob', which is missing"):
        score_groups(df.drop(columns="logprob"), "se_lw", embedder=HashEmbedder(), judge="lexical", progress=False)
    # n_tokens is optional: without it SE-LW weighs by the sequence log-probabilities
    out = score_groups(df.drop(columns="n_tokens").query("query_id == 0"), "se_lw", judge="lexical", progress=False)
    assert out["se_lw"].iloc[0] == pytest.approx(_naive_se([0, 0, 1, 2], np.exp(-1.0 - np.arange(4))), abs=1e-12)


def test_token_entropy_keeps_a_float32_column_in_float32():
    # a trainer frame stores token_entropy in float32; the groups frame has always averaged it in
    # that dtype (pandas' mean), so the registry must not widen it to float64 first
    df, _, _ = _frame()
    df["token_entropy"] = (df["token_entropy"] * 1.1 + 0.123).astype(np.float32)
    out = score_groups(df, "token_entropy", progress=False)
    expected = [g["token_entropy"].mean() for _, g in df.sort_values(["query_id", "rollout_id"]).groupby("query_id")]
    assert out["token_entropy"].dtype == np.float32
    assert out["token_entropy"].tolist() == [float(v) for v in expected]  # exact, not approximate
    wide = score_groups(df.astype({"token_entropy": np.float64}), "token_entropy", progress=False)
    assert wide["token_entropy"].dtype == np.float64
