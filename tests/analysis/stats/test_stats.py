"""gcpo_analysis.stats: every statistic against a second, independent computation."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu, rankdata
from sklearn.model_selection import KFold

from gcpo_analysis import stats as S


def _frame(N=120, seed=0, **extra):
    rng = np.random.default_rng(seed)
    v = rng.gamma(2.0, 1.0, N)
    df = pd.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(N)],
            "G": 8,
            "grad_var": v,
            "bot": v + rng.normal(0, 0.5, N),
            "cd": v + rng.normal(0, 1.0, N),
            "se": rng.random(N),
            "token_entropy": np.round(rng.random(N) * 4),  # ties on purpose
            "success_rate": rng.random(N),
        }
    )
    for k, val in extra.items():
        df[k] = val
    return df


# --------------------------------------------------------------------------- Spearman
@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=5, max_value=60), st.integers(0, 10_000))
def test_spearman_matches_rank_formula_without_ties(N, seed):
    rng = np.random.default_rng(seed)
    u, v = rng.permutation(N).astype(float), rng.permutation(N).astype(float)
    d = rankdata(u) - rankdata(v)
    formula = 1 - 6 * np.sum(d**2) / (N * (N**2 - 1))
    assert S.spearman(u, v)[0] == pytest.approx(formula, abs=1e-12)


def test_spearman_with_ties_is_pearson_of_average_ranks():
    rng = np.random.default_rng(1)
    u = rng.integers(0, 4, 80).astype(float)
    v = rng.integers(0, 6, 80).astype(float)
    expected = np.corrcoef(rankdata(u), rankdata(v))[0, 1]
    assert S.spearman(u, v)[0] == pytest.approx(expected, abs=1e-12)


def test_spearman_constant_input_is_nan_with_warning():
    with pytest.warns(UserWarning, match="constant"):
        rho, p = S.spearman(np.ones(10), np.arange(10.0))
    assert np.isnan(rho) and np.isnan(p)
    with pytest.raises(ValueError, match="N=2"):
        S.spearman([1.0, 2.0], [1.0, 2.0])


# --------------------------------------------------------------------------- retrieval
def test_auc_equals_mann_whitney_u():
    rng = np.random.default_rng(2)
    y = rng.random(200)
    u = np.round(y + rng.normal(0, 0.3, 200), 1)  # ties in the measure
    labels = S.top_labels(y, 0.1)
    auc, _ = S.retrieval(u, y, 0.1)
    U = mannwhitneyu(u[labels], u[~labels]).statistic
    assert auc == pytest.approx(U / (labels.sum() * (~labels).sum()), abs=1e-12)


def test_precision_at_top_hand_worked_with_tie_rule():
    # N = 10, k = 1... use top_frac 0.3 -> k = 3
    labels = np.array([1, 1, 0, 0, 1, 0, 0, 0, 0, 0], bool)
    u = np.array([9, 5, 5, 5, 1, 0, 0, 0, 0, 0], float)
    # item 0 (hit) is above the cut; 2 slots shared by the 3 tied at 5, one of which is a hit
    assert S.precision_at_top(u, labels, 0.3) == pytest.approx((1 + 2 * (1 / 3)) / 3)
    assert S.precision_at_top(np.arange(10.0)[::-1], labels, 0.3) == pytest.approx(2 / 3)
    # constant measure: the base rate
    assert S.precision_at_top(np.zeros(10), labels, 0.3) == pytest.approx(0.3)


def test_top_labels_ties_and_too_few_rows():
    y = np.array([5, 4, 4, 1, 0, 0, 0, 0, 0, 0], float)
    assert S.top_labels(y, 0.2).tolist() == [True, True, True] + [False] * 7  # tie at the cut joins H
    with pytest.raises(ValueError, match="N=4"):
        S.top_labels(np.arange(4.0), 0.1)
    with pytest.raises(ValueError, match="N=10.*no negatives"):
        S.top_labels(np.ones(10), 0.1)


# --------------------------------------------------------------------------- bootstrap
def test_vectorised_bootstrap_equals_loop_with_same_indices():
    rng = np.random.default_rng(3)
    N = 60
    y = rng.random(N)
    X = np.column_stack([y + rng.random(N), np.round(5 * y + rng.random(N)), rng.integers(0, 3, N), np.zeros(N)])
    idx = rng.integers(0, N, (40, N))
    fast, loop = S.bootstrap_rhos(X, y, idx), S.bootstrap_rhos_loop(X, y, idx)
    assert np.array_equal(np.isnan(fast), np.isnan(loop))
    assert np.allclose(fast, loop, atol=1e-12, equal_nan=True)
    # and against rankdata on the resampled matrix, as the brief describes it
    ry, rx = rankdata(y[idx], axis=1), rankdata(X[:, 1][idx], axis=1)
    ref = [np.corrcoef(a, b)[0, 1] for a, b in zip(rx, ry)]
    assert np.allclose(fast[:, 1], ref, atol=1e-12)
    # tied target too
    yt = np.round(3 * y)
    assert np.allclose(S.bootstrap_rhos(X[:, :3], yt, idx), S.bootstrap_rhos_loop(X[:, :3], yt, idx), atol=1e-12)


def test_paired_bootstrap_equals_loop_and_is_seeded():
    df = _frame(50)
    measures = {m: df[m].to_numpy() for m in ("bot", "cd", "se")}
    idx = np.random.default_rng(0).integers(0, 50, (30, 50))
    a = S.paired_bootstrap(measures, df.grad_var, idx=idx)
    b = S.paired_bootstrap_loop(measures, df.grad_var, idx=idx)
    pd.testing.assert_frame_equal(a, b, atol=1e-12)
    assert list(a.measure) == ["cd", "se"] and (a.reference == "bot").all()
    rho = {m: S.spearman(v, df.grad_var)[0] for m, v in measures.items()}
    assert a.delta.tolist() == pytest.approx([rho["bot"] - rho["cd"], rho["bot"] - rho["se"]], abs=1e-12)
    pd.testing.assert_frame_equal(
        S.paired_bootstrap(measures, df.grad_var, n_boot=50, seed=4),
        S.paired_bootstrap(measures, df.grad_var, n_boot=50, seed=4),
    )


def test_paired_bootstrap_ci_coverage_known_difference():
    """90% percentile CIs of Delta rho cover the population Delta in roughly 80-97% of datasets."""
    rng = np.random.default_rng(5)
    M = 20_000
    z = rng.normal(size=M)
    pop = np.column_stack([z + 0.6 * rng.normal(size=M), z + 1.2 * rng.normal(size=M)])
    target = z + 0.5 * rng.normal(size=M)
    true = S.bootstrap_rhos(pop, target, np.arange(M)[None])[0]
    true_delta = true[0] - true[1]
    covered = 0
    for _ in range(100):
        s = rng.integers(0, M, 150)
        res = S.paired_bootstrap(
            {"a": pop[s, 0], "b": pop[s, 1]}, target[s], reference="a", n_boot=300, seed=rng, level=0.9
        )
        covered += res.ci_low[0] <= true_delta <= res.ci_high[0]
    assert 80 <= covered <= 97, covered


# --------------------------------------------------------------------------- held-out
def test_heldout_matches_manual_lstsq_per_fold():
    df = _frame(60)
    u, y = df.cd.to_numpy(), df.grad_var.to_numpy()
    res = S.heldout_regression(u, y, k_folds=5, seed=7)
    maes, rhos = [], []
    for tr, te in KFold(5, shuffle=True, random_state=7).split(u):
        A = np.column_stack([np.ones(len(tr)), u[tr]])
        beta = np.linalg.lstsq(A, y[tr], rcond=None)[0]
        pred = beta[0] + beta[1] * u[te]
        maes.append(np.mean(np.abs(pred - y[te])))
        rhos.append(np.corrcoef(rankdata(pred), rankdata(y[te]))[0, 1])
    assert res["mae"] == pytest.approx(maes, abs=1e-10)
    assert res["spearman"] == pytest.approx(rhos, abs=1e-10)
    assert res["mae_mean"] == pytest.approx(np.mean(maes)) and res["mae_std"] == pytest.approx(np.std(maes))
    with pytest.raises(ValueError, match="N=9"):
        S.heldout_regression(u[:9], y[:9], k_folds=5)


# --------------------------------------------------------------------------- trimming
def test_trim_top_counts_and_fractions():
    df = _frame(50)
    out = S.trim_top(df, "grad_var", 5)
    assert len(out) == 45
    assert set(df.nlargest(5, "grad_var").query_id).isdisjoint(out.query_id)
    assert len(S.trim_top(df, "grad_var", 0.1)) == 45
    with pytest.raises(ValueError, match="N=50"):
        S.trim_top(df, "grad_var", 49)
    with pytest.raises(ValueError, match="count"):
        S.trim_top(df, "grad_var", 2.5)


# --------------------------------------------------------------------------- the study
@pytest.mark.slow
def test_gap_study_tables_agree_with_direct_computation():
    df = _frame(150)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = S.gap_study(df, n_boot=200, trim=10)
    assert res.n_queries == 140 and res.n_trimmed == 10
    kept = S.trim_top(df, "grad_var", 10)
    sp = res.spearman.set_index("measure")
    for m in ("token_entropy", "se", "cd", "bot"):
        assert sp.loc[m, "rho"] == pytest.approx(S.spearman(kept[m], kept.grad_var)[0], abs=1e-12)
        assert sp.loc[m, "ci_low"] <= sp.loc[m, "rho"] <= sp.loc[m, "ci_high"]
    boot = res.bootstrap.set_index("measure")
    assert boot.loc["cd", "delta"] == pytest.approx(sp.loc["bot", "rho"] - sp.loc["cd", "rho"], abs=1e-12)
    assert set(boot.index) == {"token_entropy", "se", "cd"}
    assert res.success is not None and len(res.success) == 4


@pytest.mark.slow
def test_gap_study_bad_input_policy():
    df = _frame(120)
    df.loc[[3, 7], "cd"] = np.nan
    with pytest.warns(UserWarning) as rec:
        res = S.gap_study(df, n_boot=100, trim=0)
    msgs = " ".join(str(w.message) for w in rec)
    assert "2 row(s)" in msgs and "'kle', 'rd']" in msgs
    assert res.dropped["cd"] == 2 and res.dropped["bot"] == 0
    assert res.spearman.set_index("measure").loc["cd", "n"] == 118
    with pytest.raises(ValueError, match="unknown measure.*'nope'"):
        S.gap_study(df, measures=("bot", "nope"), n_boot=10)
    const = _frame(60, constant=1.0)
    with pytest.warns(UserWarning, match="constant"):
        res = S.gap_study(const, measures=("bot", "constant"), n_boot=50, trim=0)
    assert np.isnan(res.spearman.set_index("measure").loc["constant", "rho"])
    assert res.retrieval.set_index("measure").loc["constant", "auc"] == 0.5
    with pytest.raises(ValueError, match="N=9"):
        S.gap_study(_frame(9), measures=("bot",), trim=0, n_boot=10)


@pytest.mark.slow
def test_tables_layout_format_and_roundtrip(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = S.gap_study(_frame(120), n_boot=100, name="NarrativeQA")
    t4 = res.table4()
    assert list(t4.columns) == ["Entropy", "SE", "CD", "BoT"]
    assert t4.index.tolist() == [("NarrativeQA", "Rho"), ("NarrativeQA", "p"), ("NarrativeQA", "p (Holm)")]
    assert t4.loc[("NarrativeQA", "p"), "BoT"] == "<0.001"
    sp = res.spearman.set_index("measure")
    assert t4.loc[("NarrativeQA", "p (Holm)"), "SE"] == S.format_p(sp.loc["se", "p_holm"])
    assert res.table3().shape == (3, 4)
    both = S.paper_table({"A": res, "B": res}, "table4")
    assert both.shape == (6, 4)
    assert [S.format_p(p) for p in (1e-5, 0.01, 0.2, np.nan)] == ["<0.001", "<0.05", ">0.05", "nan"]
    res.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} >= {"spearman.csv", "bootstrap.csv", "gap_study.json"}
    back = S.GapStudyResult.load(tmp_path)
    pd.testing.assert_frame_equal(back.spearman, res.spearman)
    pd.testing.assert_frame_equal(back.bootstrap, res.bootstrap)
    assert back.settings == res.settings and back.name == "NarrativeQA"
    assert "## bootstrap" in res.to_markdown()
