"""Our additions to the gap study: the V = 0 decomposition and the paired AUC / P@10% bootstrap,
checked against a planted answer, sklearn and plain loops."""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from gcpo_analysis.stats import GapStudyResult, gap_study, precision_at_top, retrieval, spearman, top_labels
from gcpo_analysis.stats.decomposition import (
    auc_batch,
    paired_retrieval_bootstrap,
    precision_at_top_batch,
    top_labels_batch,
)
from gcpo_analysis.theory.simulate import simulate_study


def test_auc_batch_equals_sklearn_with_ties():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, size=(50, 40)).astype(float)  # many ties
    labels = rng.random((50, 40)) < 0.3
    got = auc_batch(scores, labels)
    want = [roc_auc_score(lab, s) for s, lab in zip(scores, labels)]
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert np.isnan(auc_batch(scores[:1], np.ones((1, 40), bool)))[0]


def test_top_labels_and_precision_batch_equal_the_single_versions():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 6, size=(30, 50)).astype(float)
    u = rng.integers(0, 4, size=(30, 50)).astype(float)
    lab = top_labels_batch(y, 0.1)
    for b in range(30):
        if lab[b].all():
            continue
        np.testing.assert_array_equal(lab[b], top_labels(y[b], 0.1))
        assert precision_at_top_batch(u[b : b + 1], lab[b : b + 1], 0.1)[0] == pytest.approx(
            precision_at_top(u[b], lab[b], 0.1)
        )


@pytest.mark.slow
def test_retrieval_bootstrap_equals_a_loop():
    rng = np.random.default_rng(2)
    N, B = 60, 200
    y = rng.gamma(2, size=N)
    X = np.column_stack([y + rng.normal(size=N), y + 2 * rng.normal(size=N), rng.normal(size=N)])
    names = ["bot", "cd", "se"]
    idx = rng.integers(0, N, size=(B, N))
    fast = paired_retrieval_bootstrap(X, names, y, "bot", idx, 0.1, 0.9)
    for metric, col in (("auc", 0), ("precision_at_10", 1)):
        for j, name in enumerate(names[1:], start=1):
            deltas = []
            for row in idx:
                yy = y[row]
                ref, other = retrieval(X[row, 0], yy, 0.1)[col], retrieval(X[row, j], yy, 0.1)[col]
                deltas.append(ref - other)
            deltas = np.array(deltas)
            got = fast[(fast.metric == metric) & (fast.measure == name)].iloc[0]
            lo, hi = np.quantile(deltas, [0.05, 0.95])
            assert got.ci_low == pytest.approx(lo) and got.ci_high == pytest.approx(hi)
            assert got.p_le_0 == pytest.approx(np.mean(deltas <= 0))
            point = retrieval(X[:, 0], y, 0.1)[col] - retrieval(X[:, j], y, 0.1)[col]
            assert got.delta == pytest.approx(point)


@pytest.mark.slow
def test_decomposition_recovers_a_planted_v_zero_block():
    _, g = simulate_study(n_queries=240, G=8, zero_reward_frac=0.3, seed=3)
    planted = g["rd"] == 0
    assert planted.sum() == 72 and (g.loc[planted, "grad_var"] == 0).all()
    res = gap_study(g, measures=["se", "cd", "bot", "rd"], n_boot=1000, trim=0, seed=0)
    d = res.decomposition.set_index("measure")
    assert (d["n_zero"] == 72).all() and (d["n_pos"] == 168).all()
    assert d.loc["rd", "auc_pos"] == 1.0  # RD is 0 exactly where V is, and > 0 elsewhere
    # the block was planted independently of the answers: geometry cannot find it
    assert d.loc["cd", "auc_pos_ci_low"] < 0.5 < d.loc["cd", "auc_pos_ci_high"]
    pos = g[~planted]
    for m in ("se", "cd", "bot", "rd"):
        assert d.loc[m, "rho_pos"] == pytest.approx(spearman(pos[m], pos["grad_var"])[0])
        assert d.loc[m, "rho_pos_ci_low"] <= d.loc[m, "rho_pos"] <= d.loc[m, "rho_pos_ci_high"]
    delta = spearman(pos["bot"], pos["grad_var"])[0] - spearman(pos["se"], pos["grad_var"])[0]
    assert d.loc["se", "delta_rho_pos"] == pytest.approx(delta) and np.isnan(d.loc["bot", "delta_rho_pos"])
    # over all groups RD looks strong; within V > 0 its rank correlation is what is left
    full = res.spearman.set_index("measure")
    assert full.loc["rd", "rho"] > d.loc["rd", "rho_pos"]


@pytest.mark.slow
def test_the_new_tables_round_trip(tmp_path):
    _, g = simulate_study(n_queries=80, G=8, zero_reward_frac=0.2, seed=4)
    res = gap_study(g, measures=["cd", "bot", "rd"], n_boot=200, trim=0)
    back = GapStudyResult.load(res.save(tmp_path))
    pd.testing.assert_frame_equal(back.decomposition, res.decomposition, check_dtype=False)
    pd.testing.assert_frame_equal(back.retrieval_bootstrap, res.retrieval_bootstrap, check_dtype=False)
    assert "our addition" in res.to_markdown()
