"""The Lipschitz check's confounds (gcpo_analysis.stats.lipschitz_confounds) against independent
computations, and every Lipschitz table of a study folder from its files
(gcpo_analysis.study.lipschitz_checks: the exact-tokens subset, the confounds from the sidecar)."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers.embedders import HashEmbedder
from scipy import stats

from gcpo_analysis.stats.lipschitz_confounds import (
    COLUMNS,
    group_confounds,
    jaccard_distances,
    rank_partial,
    summarise_confounds,
)
from gcpo_analysis.study.collect import gram_frame, grams_by_query
from gcpo_analysis.study.lipschitz import SIDECAR, embed_rollouts, read_embeddings, write_embeddings
from gcpo_analysis.study.lipschitz_checks import confounds_table, exact_token_queries, write_lipschitz_checks


def test_jaccard_by_hand():
    d = jaccard_distances(["the cat sat", "The cat", "dog", ""])
    assert d[0, 1] == pytest.approx(1 - 2 / 3)  # {the, cat} of {the, cat, sat}
    assert d[0, 2] == 1 and d[2, 3] == 1 and d[3, 3] == 0
    assert jaccard_distances(["", ""])[0, 1] == 0  # two empty answers: nothing differs
    np.testing.assert_array_equal(d, d.T)


def test_rank_partial_is_the_partial_of_the_spearman_matrix():
    rng = np.random.default_rng(0)
    z = rng.normal(size=40)
    x, y = z + rng.normal(size=40), z + rng.normal(size=40)
    r = lambda a, b: stats.spearmanr(a, b).statistic  # noqa: E731
    expect = (r(x, y) - r(x, z) * r(y, z)) / np.sqrt((1 - r(x, z) ** 2) * (1 - r(y, z) ** 2))
    assert rank_partial(x, y, z) == pytest.approx(expect)
    assert np.isnan(rank_partial(x, y, np.ones(40)))  # a constant control: undefined


def test_group_confounds_against_scipy():
    rng = np.random.default_rng(1)
    G = 6
    g = rng.normal(size=(G, 9))
    K, E = g @ g.T, rng.normal(size=(G, 5))
    n = rng.integers(3, 20, G)
    texts = ["a b c", "a b", "c d", "a", "b c d e", "e"]
    out = group_confounds(K, E, n, texts)
    i, j = np.triu_indices(G, 1)
    dg = np.array([np.sum((g[a] - g[b]) ** 2) for a, b in zip(i, j)])
    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    de = np.array([1 - U[a] @ U[b] for a, b in zip(i, j)])
    dn = np.abs(n[i] - n[j]).astype(float)
    words = [set(t.split()) for t in texts]
    dj = np.array([1 - len(words[a] & words[b]) / len(words[a] | words[b]) for a, b in zip(i, j)])
    norms = np.array([g[a] @ g[a] + g[b] @ g[b] for a, b in zip(i, j)])
    assert out["rho_g_e"] == pytest.approx(stats.spearmanr(dg, de).statistic)
    assert out["rho_e_length"] == pytest.approx(stats.spearmanr(de, dn).statistic)
    assert out["rho_g_jaccard"] == pytest.approx(stats.spearmanr(dg, dj).statistic)
    assert out["partial_given_norms"] == pytest.approx(rank_partial(dg, de, norms))
    assert out["partial_given_length"] == pytest.approx(rank_partial(dg, de, dn))
    same_length = group_confounds(K, E, np.full(G, 7), texts)  # no length gap: undefined, not 0
    assert np.isnan(same_length["rho_g_length"]) and np.isnan(same_length["partial_given_length"])


def test_summary_mean_ci_and_counts():
    per_group = pd.DataFrame({c: np.linspace(-0.5, 0.5, 12) for c in COLUMNS})
    per_group.loc[:3, "rho_g_length"] = np.nan
    s = summarise_confounds(per_group, n_boot=300, seed=0).set_index("statistic")
    assert s.loc["rho_g_e", "mean"] == pytest.approx(0.0, abs=1e-12) and s.loc["rho_g_e", "n_groups"] == 12
    assert s.loc["rho_g_length", "n_groups"] == 8
    assert s.loc["rho_g_length", "mean"] == pytest.approx(per_group["rho_g_length"].mean())
    assert (s["ci_low"] <= s["mean"]).all() and (s["mean"] <= s["ci_high"]).all()
    again = summarise_confounds(per_group, n_boot=300, seed=0)
    pd.testing.assert_frame_equal(again.set_index("statistic"), s)  # one seed, the same numbers


def _folder(tmp_path, n=6, G=5, seed=0):
    rng = np.random.default_rng(seed)
    words = ["paris", "london", "rome", "big city", "the city"]
    rows, grams = [], []
    for k in range(n):
        g = rng.normal(size=(G, 7))
        for i in range(G):
            a = words[rng.integers(0, len(words))]
            rows.append(
                dict(
                    query_id=f"q{k}",
                    rollout_id=i,
                    completion=f"It is {a}.",
                    answer=a,
                    reward=float(rng.integers(0, 3)),
                    n_tokens=int(rng.integers(2, 9)),
                )
            )
        grams.append(gram_frame(f"q{k}", g @ g.T))
    rollouts, grams = pd.DataFrame(rows), pd.concat(grams, ignore_index=True)
    rollouts.to_parquet(tmp_path / "rollouts.parquet")
    grams.to_parquet(tmp_path / "grams.parquet")
    write_embeddings(embed_rollouts(rollouts, embedder=HashEmbedder(), judge="embedding"), tmp_path / SIDECAR)
    (tmp_path / "run_card.json").write_text(json.dumps({"settings": {"dataset": "narrativeqa", "judge": "embedding"}}))
    return rollouts, grams


@pytest.mark.slow
def test_every_lipschitz_table_from_the_folder(tmp_path):
    rollouts, grams = _folder(tmp_path)
    tables = tmp_path / "tables"
    write_lipschitz_checks(tmp_path, seed=0, rollouts=rollouts, grams=grams, figures=False, n_boot=40)
    assert exact_token_queries(tmp_path) is None and not (tables / "lipschitz_exact_tokens.md").exists()
    assert not (tmp_path / "figures").exists()
    side = read_embeddings(tmp_path / SIDECAR)
    _, expect = confounds_table(rollouts, grams, side, n_boot=40)
    got = pd.read_csv(tables / "lipschitz_confounds.csv")
    np.testing.assert_allclose(got["mean"], expect["mean"].to_numpy(float), equal_nan=True)
    # the confounds from the sidecar's embeddings, not a live embedder: a group by hand
    K = grams_by_query(grams)["q2"]
    E = np.stack(side[side.query_id == "q2"]["embedding"].to_list()).astype(float)
    g = rollouts[rollouts.query_id == "q2"]
    per_group, _ = confounds_table(rollouts, grams, side)
    by_hand = group_confounds(K, E, g["n_tokens"].to_numpy(), g["answer"].tolist())
    assert per_group.set_index("query_id").loc["q2", "rho_g_e"] == pytest.approx(by_hand["rho_g_e"], nan_ok=True)

    # scripts/recompute_grams.py's check: q1 and q4 have a rollout whose tokens did not match
    check = rollouts[["query_id", "rollout_id"]].assign(tokens_match=True)
    check.loc[(check.query_id == "q1") & (check.rollout_id == 2), "tokens_match"] = False
    check.loc[(check.query_id == "q4") & (check.rollout_id == 0), "tokens_match"] = False
    check.to_csv(tables / "gram_recompute_rollouts.csv", index=False)
    assert exact_token_queries(tmp_path) == ["q0", "q2", "q3", "q5"]
    write_lipschitz_checks(tmp_path, seed=0, rollouts=rollouts, grams=grams, figures=False, n_boot=40)
    meta = json.loads((tables / "lipschitz_exact_tokens_meta.json").read_text())
    assert meta["queries"] == ["q0", "q2", "q3", "q5"] and meta["n_groups"] == 4
    sub = pd.read_csv(tables / "lipschitz_exact_tokens_groups.csv")
    full = pd.read_csv(tables / "lipschitz_groups.csv").set_index("query_id").loc[sub["query_id"]]
    np.testing.assert_allclose(sub["rho"], full["rho"], equal_nan=True)  # the same groups, subset
    assert not (tables / "lipschitz_exact_tokens_bound.csv").exists()  # the bound: on the full check only

    check["tokens_match"] = False
    check.to_csv(tables / "gram_recompute_rollouts.csv", index=False)
    with pytest.raises(ValueError, match="no query has every rollout"):
        write_lipschitz_checks(tmp_path, seed=0, rollouts=rollouts, grams=grams, figures=False, n_boot=40)
    check.drop(columns=["tokens_match"]).to_csv(tables / "gram_recompute_rollouts.csv", index=False)
    with pytest.raises(ValueError, match="tokens_match"):
        exact_token_queries(tmp_path)
    with pytest.raises(ValueError, match="n_tokens"):
        confounds_table(rollouts.drop(columns=["n_tokens"]), grams, side)
