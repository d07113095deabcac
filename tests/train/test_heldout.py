"""gcpo_train.evaluation.heldout: per-query scores against task_metrics, the paired bootstrap against a
direct numpy bootstrap, and the refusals."""

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.rewards import task_metrics
from gcpo_train.evaluation.heldout import METRIC_NAME, paired_gain, per_query_scores


@pytest.mark.parametrize(
    "task, answers, refs",
    [
        ("qa_f1", ["Hera", "the king of Troy", "", "a b c"], [["Hera"], ["king"], ["x"], ["c b a d"]]),
        ("hotpot", ["yes", "no", "Paris France"], [["yes"], ["yes"], ["Paris"]]),
        ("math", ["7", "\\frac{1}{2}", ""], ["7", "0.5", "3"]),
    ],
)
def test_per_query_scores_average_to_task_metrics(task, answers, refs):
    s = per_query_scores(task, answers, refs)
    assert s.shape == (len(answers),) and np.all((s >= 0) & (s <= 100))
    assert s.mean() == pytest.approx(task_metrics(task, answers, refs)[METRIC_NAME[task]])


def test_per_query_scores_by_hand():
    # F1("the king of Troy", "king") = 2·(1/3)·1/(1/3 + 1) = 0.5 ("the" is dropped by normalisation)
    np.testing.assert_allclose(per_query_scores("qa_f1", ["the king of Troy", "Hera"], [["king"], ["Zeus"]]), [50, 0])


def _frames(rng, n=300, gain=2.0):
    q = [f"q{i}" for i in range(n)]
    base = rng.uniform(0, 100, n)
    trained = base + gain + rng.normal(0, 10, n)
    return pd.DataFrame({"query_id": q, "score": base}), pd.DataFrame({"query_id": q[::-1], "score": trained[::-1]})


def test_paired_gain_matches_a_direct_bootstrap():
    rng = np.random.default_rng(0)
    base, trained = _frames(rng)
    res = paired_gain(base, trained, n_resamples=20_000, seed=1)
    d = trained.set_index("query_id").loc[base["query_id"], "score"].to_numpy() - base["score"].to_numpy()
    assert res["diff"] == pytest.approx(d.mean())
    assert res["base"] == pytest.approx(base["score"].mean()) and res["n"] == 300
    boot = d[np.random.default_rng(2).integers(0, len(d), (20_000, len(d)))].mean(axis=1)
    low, high = np.quantile(boot, [0.025, 0.975])
    se = d.std(ddof=1) / np.sqrt(len(d))
    assert res["ci_low"] == pytest.approx(low, abs=0.1 * se) and res["ci_high"] == pytest.approx(high, abs=0.1 * se)
    assert res["ci_low"] < res["diff"] < res["ci_high"]


def test_paired_gain_equal_differences_and_refusals():
    base = pd.DataFrame({"query_id": ["a", "b", "c"], "score": [0.0, 50.0, 100.0]})
    same = paired_gain(base, base.assign(score=base["score"] + 5))
    assert (same["diff"], same["ci_low"], same["ci_high"]) == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError, match="different queries"):
        paired_gain(base, base.assign(query_id=["a", "b", "d"]))
    with pytest.raises(ValueError, match="more than once"):
        paired_gain(base, pd.concat([base, base.iloc[:1]]))
    with pytest.raises(ValueError, match="no 'score' column"):
        paired_gain(base, base.rename(columns={"score": "f1"}))
