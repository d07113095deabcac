"""The Lipschitz measurement (gcpo_analysis.stats.lipschitz): distances against brute force, the
statistics against independent computations, the simulator's planted settings, edge cases,
and the study-folder writer."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers.embedders import HashEmbedder
from scipy import stats

from gcpo_analysis.stats.lipschitz import (
    embedding_distances,
    gradient_distances,
    group_pairs,
    group_stats,
    lipschitz_pairs,
    summarise,
)
from gcpo_analysis.study.collect import gram_frame
from gcpo_analysis.study.lipschitz import lipschitz_study, write_lipschitz
from gcpo_analysis.theory.simulate import simulate_study


def test_distances_match_brute_force():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(6, 11))
    e = rng.normal(size=(6, 5)) * rng.uniform(0.5, 3, size=(6, 1))  # unnormalised rows
    D = gradient_distances(g @ g.T)
    De = embedding_distances(e)
    for i in range(6):
        for j in range(6):
            assert D[i, j] == pytest.approx(np.sum((g[i] - g[j]) ** 2), rel=1e-10, abs=1e-10)
            cos = e[i] @ e[j] / np.linalg.norm(e[i]) / np.linalg.norm(e[j])
            assert De[i, j] == pytest.approx(1 - cos, abs=1e-11)


def test_identical_rows_give_zero_distance_and_bad_input_is_named():
    g = np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 1.0]])
    assert gradient_distances(g @ g.T)[0, 1] == 0.0
    assert embedding_distances(np.array([[0.3, 0.4], [0.3, 0.4], [1.0, 0.0]]))[0, 1] == 0.0
    with pytest.raises(ValueError, match="row 1"):
        embedding_distances(np.array([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="square"):
        gradient_distances(np.ones((2, 3)))


def _groups(n=5, G=6, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for k in range(n):
        g = rng.normal(size=(G, 9)) * rng.uniform(1, 50)  # a different gradient scale per group
        e = g[:, :4] + rng.normal(size=(G, 4))
        out[f"q{k}"] = (g @ g.T, e, rng.integers(0, 3, size=G), g)
    return out


def test_statistics_against_independent_computation():
    groups = _groups()
    pairs, per_group = lipschitz_pairs(
        {q: v[0] for q, v in groups.items()}, {q: v[1] for q, v in groups.items()}, {q: v[2] for q, v in groups.items()}
    )
    summary = summarise(pairs, per_group, n_boot=50).set_index("statistic")
    rows, rhos, ratios_same, ratios_diff, directions = [], [], [], [], []
    for _q, (_, e, lab, g) in groups.items():
        dg, de, same, dc = [], [], [], []
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                dg.append(np.sum((g[i] - g[j]) ** 2))
                dc.append(1 - g[i] @ g[j] / np.linalg.norm(g[i]) / np.linalg.norm(g[j]))
                de.append(1 - e[i] @ e[j] / np.linalg.norm(e[i]) / np.linalg.norm(e[j]))
                same.append(lab[i] == lab[j])
        dg, de, same = np.array(dg), np.array(de), np.array(same)
        rhos.append(pd.Series(dg).corr(pd.Series(de), method="spearman"))
        directions.append(pd.Series(dc).corr(pd.Series(de), method="spearman"))
        rows.append(pd.DataFrame({"g": dg / dg.mean(), "e": de / de.mean(), "same": same}))
        ratios_same.append(dg[same].mean() / dg.mean())
        ratios_diff.append(dg[~same].mean() / dg.mean())
    np.testing.assert_allclose(per_group["rho"], rhos, atol=1e-12)
    assert summary.loc["mean_rho", "estimate"] == pytest.approx(np.mean(rhos))
    np.testing.assert_allclose(per_group["rho_direction"], directions, atol=1e-12)
    assert summary.loc["mean_rho_direction", "estimate"] == pytest.approx(np.mean(directions))
    allp = pd.concat(rows, ignore_index=True)
    assert summary.loc["pooled_rho", "estimate"] == pytest.approx(allp["g"].corr(allp["e"], method="spearman"))
    assert summary.loc["cluster_ratio", "estimate"] == pytest.approx(np.mean(ratios_diff) / np.mean(ratios_same))
    d, s = allp.loc[~allp["same"], "g"].to_numpy(), allp.loc[allp["same"], "g"].to_numpy()
    auc = np.mean([(a > b) + 0.5 * (a == b) for a in d for b in s])
    assert summary.loc["cluster_auc", "estimate"] == pytest.approx(auc)
    for stat in ("mean_rho", "pooled_rho", "cluster_ratio", "cluster_auc", "mean_rho_direction"):
        lo, hi = summary.loc[stat, ["ci_low", "ci_high"]]
        assert lo <= hi and np.isfinite([lo, hi]).all()


def _sim_summary(lipschitz, shuffle=False, seed=3):
    _, _, arr = simulate_study(n_queries=40, G=8, lipschitz=lipschitz, seed=seed, return_arrays=True)
    E, grads = arr["embeddings"], arr["gradients"]
    if shuffle:  # break the rollout <-> embedding link, keep everything else
        rng = np.random.default_rng(0)
        E = np.stack([e[rng.permutation(len(e))] for e in E])
    ids = [f"q{k}" for k in range(len(E))]
    pairs, per_group = lipschitz_pairs(
        {q: g @ g.T for q, g in zip(ids, grads)}, dict(zip(ids, E)), dict(zip(ids, arr["labels"]))
    )
    return summarise(pairs, per_group, n_boot=100).set_index("statistic")


@pytest.mark.slow
def test_simulator_lipschitz_shuffled_and_non_lipschitz_are_told_apart():
    lip, shuffled, non = _sim_summary(True), _sim_summary(True, shuffle=True), _sim_summary(False)
    assert lip.loc["mean_rho", "estimate"] > 0.9 and lip.loc["pooled_rho", "estimate"] > 0.9
    for stat in ("mean_rho", "pooled_rho"):
        assert abs(shuffled.loc[stat, "estimate"]) < 0.1
        assert shuffled.loc[stat, "ci_low"] < 0 < shuffled.loc[stat, "ci_high"]
    # the non-Lipschitz gradients share the clusters but not the geometry: a far lower rho,
    # the CIs apart
    assert non.loc["mean_rho", "estimate"] < 0.6
    assert non.loc["mean_rho", "ci_high"] < lip.loc["mean_rho", "ci_low"]


def test_edge_cases_are_excluded_and_counted():
    rng = np.random.default_rng(1)
    g = rng.normal(size=(4, 5))
    K = g @ g.T
    e = rng.normal(size=(4, 3))
    cases = {
        "one": (K[:1, :1], e[:1], [0]),
        "two": (K[:2, :2], e[:2], [0, 1]),
        "equal_emb": (K, np.tile(e[:1], (4, 1)), [0, 0, 1, 1]),
        "one_cluster": (K, e, [0, 0, 0, 0]),
        "singletons": (K, e, [0, 1, 2, 3]),
        "fine": (K, e, [0, 0, 1, 1]),
    }
    pairs, pg = lipschitz_pairs(
        {q: c[0] for q, c in cases.items()},
        {q: c[1] for q, c in cases.items()},
        {q: np.array(c[2]) for q, c in cases.items()},
    )
    pg = pg.set_index("query_id")
    assert pg.loc["one", "reason"] == "G = 1: fewer than 3 pairs" and pg.loc["one", "n_pairs"] == 0
    assert pg.loc["two", "reason"].startswith("G = 2")
    assert "constant embedding" in pg.loc["equal_emb", "reason"]
    assert pg.loc["one_cluster", "cluster_reason"].startswith("one cluster")
    assert pg.loc["singletons", "cluster_reason"].startswith("all singletons")
    assert pg.loc["one", "cluster_reason"] == "G = 1: no pair"
    assert np.isnan(pg.loc[["one", "two", "equal_emb"], "rho"]).all()
    assert pg.loc[["one_cluster", "singletons", "fine"], "rho"].notna().all()
    s = summarise(pairs, pg.reset_index(), n_boot=20).set_index("statistic")
    assert s.loc["mean_rho", "n_groups"] == 3 and s.loc["mean_rho", "n_excluded"] == 3
    assert "1 x constant embedding distances" in s.loc["mean_rho", "excluded"]
    assert s.loc["cluster_ratio", "n_groups"] == 2  # equal_emb and fine have both kinds of pair
    assert "2 x all singletons" in s.loc["cluster_ratio", "excluded"]  # "two" is one too


def test_constant_gradient_distances_and_zero_gradients():
    e = np.random.default_rng(2).normal(size=(3, 4))
    K = np.zeros((3, 3))  # all gradients 0: d_g = 0 everywhere, nothing to normalise by
    p = group_pairs(K, e, np.array([0, 0, 1]))
    row = group_stats(p, 3, 2)
    assert row["reason"] == "constant gradient distances"
    assert row["cluster_reason"].startswith("all gradients equal")
    g = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 1.0]])  # rollout 0 has a zero gradient
    row = group_stats(group_pairs(g @ g.T, np.random.default_rng(3).normal(size=(4, 3))), 4)
    assert np.isfinite(row["rho"]) and np.isnan(row["rho_direction"])
    assert row["direction_reason"] == "a zero gradient: no direction"


def _study_frames(G=6, n=4, seed=0):
    rng = np.random.default_rng(seed)
    words = ["paris", "london", "rome", "berlin"]
    rows, grams = [], []
    for k in range(n):
        g = rng.normal(size=(G, 7))
        for i in range(G):
            a = words[rng.integers(0, len(words))]
            rows.append(
                dict(
                    query_id=f"q{k}",
                    rollout_id=i,
                    completion=f"The answer is {a}.",
                    answer=a,
                    reward=float(rng.integers(0, 3)),
                )
            )
        grams.append(gram_frame(f"q{k}", g @ g.T))
    return pd.DataFrame(rows), pd.concat(grams, ignore_index=True)


def test_study_adapter_uses_the_measures_embeddings_and_checks_ids():
    rollouts, grams = _study_frames()
    per_group, summary = lipschitz_study(rollouts, grams, embedder=HashEmbedder(), judge="embedding", n_boot=20)
    assert list(per_group["query_id"]) == ["q0", "q1", "q2", "q3"]
    meta = summary.attrs["lipschitz"]
    assert meta["text"] == "answer" and meta["judge"]["kind"] == "embedding"
    # the answers' embeddings: same answer -> distance 0 -> the minimum rank
    from gcpo_analysis.study.collect import grams_by_query

    K = grams_by_query(grams)["q0"]
    answers = rollouts[rollouts.query_id == "q0"]["answer"].to_numpy()
    E = HashEmbedder().encode(list(answers))
    i, j = np.triu_indices(len(answers), 1)
    expect = stats.spearmanr(gradient_distances(K)[i, j], embedding_distances(E)[i, j]).statistic
    assert per_group.loc[0, "rho"] == pytest.approx(expect)
    full, _ = lipschitz_study(rollouts, grams, embedder=HashEmbedder(), use_full_completion=True, n_boot=5)
    assert full.loc[0, "n_pairs"] == 15
    # the math judge clusters the answers while the completions are embedded (as score_groups)
    by_answer, s_answer = lipschitz_study(
        rollouts, grams, embedder=HashEmbedder(), use_full_completion=True, judge="math", n_boot=5
    )
    expect_k = rollouts.groupby("query_id")["answer"].nunique()
    assert by_answer.set_index("query_id")["n_clusters"].equals(
        expect_k.rename("n_clusters").astype(by_answer["n_clusters"].dtype)
    )
    np.testing.assert_allclose(by_answer["rho"], full["rho"])  # same embeddings: rho unchanged
    assert (
        s_answer.attrs["lipschitz"]["cluster_text"] == "answer" and s_answer.attrs["lipschitz"]["text"] == "completion"
    )
    with pytest.raises(ValueError, match="without a Gram matrix"):
        lipschitz_study(rollouts, grams[grams.query_id != "q2"], embedder=HashEmbedder())
    bad = rollouts.copy()
    bad.loc[bad.query_id == "q1", "rollout_id"] += 1
    with pytest.raises(ValueError, match="'q1'"):
        lipschitz_study(bad, grams, embedder=HashEmbedder())


@pytest.mark.slow
def test_write_lipschitz_from_a_study_folder(tmp_path):
    rollouts, grams = _study_frames(n=6)
    rollouts.to_parquet(tmp_path / "rollouts.parquet")
    grams.to_parquet(tmp_path / "grams.parquet")
    (tmp_path / "run_card.json").write_text(
        json.dumps({"settings": {"dataset": "narrativeqa", "judge": "embedding", "embedder": None, "threshold": 0.35}})
    )
    per_group, summary = write_lipschitz(tmp_path, embedder=HashEmbedder(), n_boot=20)
    for f in (
        "tables/lipschitz.md",
        "tables/lipschitz.csv",
        "tables/lipschitz_groups.csv",
        "tables/lipschitz_meta.json",
        "figures/lipschitz.png",
        "figures/lipschitz.svg",
    ):
        assert (tmp_path / f).stat().st_size > 0, f
    back = pd.read_csv(tmp_path / "tables" / "lipschitz.csv")
    np.testing.assert_allclose(back["estimate"], summary["estimate"])
    assert json.loads((tmp_path / "tables" / "lipschitz_meta.json").read_text())["nli_threshold"] == 0.35
    sub, _ = write_lipschitz(tmp_path, embedder=HashEmbedder(), n_boot=5, queries=["q0", "q2", "q3"], name="sub")
    assert list(sub["query_id"]) == ["q0", "q2", "q3"] and (tmp_path / "tables" / "sub.md").exists()
    pd.testing.assert_frame_equal(
        sub.reset_index(drop=True), per_group[per_group.query_id.isin(["q0", "q2", "q3"])].reset_index(drop=True)
    )
    (tmp_path / "run_card.json").unlink()  # a study that has not written its card: settings given
    again, _ = write_lipschitz(
        tmp_path,
        embedder=HashEmbedder(),
        n_boot=5,
        name="again",
        settings={"dataset": "narrativeqa", "judge": "embedding", "nli_threshold": 0.35},
    )
    pd.testing.assert_frame_equal(again, per_group)
    with pytest.raises(FileNotFoundError, match="run_card"):
        write_lipschitz(tmp_path, embedder=HashEmbedder())
    with pytest.raises(ValueError, match="'q9'"):
        write_lipschitz(
            tmp_path, embedder=HashEmbedder(), queries=["q0", "q9"], settings={"dataset": "x", "judge": "embedding"}
        )
    (tmp_path / "grams.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="recompute_grams"):
        write_lipschitz(tmp_path, embedder=HashEmbedder(), settings={"dataset": "x", "judge": "embedding"})


def test_bootstrap_shortcuts_equal_scipy_with_ties():
    from gcpo_analysis.stats.lipschitz import _auc, _spearman

    rng = np.random.default_rng(4)
    x, y = rng.integers(0, 5, 40).astype(float), rng.integers(0, 4, 40).astype(float)  # many ties
    assert _spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    d, s = rng.integers(0, 6, 30).astype(float), rng.integers(0, 6, 17).astype(float)
    brute = np.mean([(a > b) + 0.5 * (a == b) for a in d for b in s])
    assert _auc(d, s) == pytest.approx(brute) and _auc(d, s, p_value=True)[0] == pytest.approx(brute)


SETTINGS = {"dataset": "narrativeqa", "judge": "embedding"}


class _NoEmbedder:
    def encode(self, texts):
        raise AssertionError("the sidecar was there: nothing should be embedded")


def test_sidecar_round_trip_and_reuse(tmp_path):
    from gcpo_analysis.study.lipschitz import SIDECAR, embed_rollouts, read_embeddings, write_embeddings

    rollouts, grams = _study_frames()
    side = embed_rollouts(rollouts, embedder=HashEmbedder(), judge="embedding")
    write_embeddings(side, tmp_path / SIDECAR)
    back = read_embeddings(tmp_path / SIDECAR)
    assert back["embedding"].iloc[0].dtype == np.float16 and len(back) == len(rollouts)
    assert back.attrs["lipschitz"]["text"] == "answer"
    assert (back["cluster"].to_numpy() == side["cluster"].to_numpy()).all()
    direct, _ = lipschitz_study(rollouts, grams, embedder=HashEmbedder(), n_boot=5)
    reused, _ = lipschitz_study(rollouts, grams, embedder=_NoEmbedder(), n_boot=5, prepared=back)
    np.testing.assert_allclose(reused["rho"], direct["rho"], atol=2e-2)  # float16 embeddings
    rollouts.to_parquet(tmp_path / "rollouts.parquet")
    grams.to_parquet(tmp_path / "grams.parquet")
    a, _ = write_lipschitz(tmp_path, embedder=_NoEmbedder(), n_boot=5, settings=SETTINGS)  # reads the sidecar
    pd.testing.assert_frame_equal(a, reused)
    bad = back.drop(columns=["cluster"])
    bad["embedding"] = [e.astype(np.float32) for e in bad["embedding"]]
    bad.to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="missing column"):
        read_embeddings(tmp_path / "bad.parquet")


@pytest.mark.slow
def test_write_lipschitz_takes_the_studys_sidecar_as_given(tmp_path):
    from gcpo_analysis.study.lipschitz import SIDECAR, embed_rollouts, read_embeddings, write_embeddings

    rollouts, grams = _study_frames()
    write_embeddings(embed_rollouts(rollouts, embedder=HashEmbedder(), judge="embedding"), tmp_path / SIDECAR)
    rollouts.to_parquet(tmp_path / "rollouts.parquet")
    grams.to_parquet(tmp_path / "grams.parquet")
    a, _ = write_lipschitz(tmp_path, embedder=_NoEmbedder(), n_boot=5, settings=SETTINGS)
    given = read_embeddings(tmp_path / SIDECAR)
    (tmp_path / SIDECAR).unlink()  # what is given is used, not re-read (nor re-embedded: _NoEmbedder)
    b, _ = write_lipschitz(tmp_path, embedder=_NoEmbedder(), n_boot=5, settings=SETTINGS, prepared=given)
    pd.testing.assert_frame_equal(a, b)
