"""Hostile input for the gap study (gcpo_analysis.stats; issues "Trust" and 20): what would shift
its numbers is refused naming the row, an all-NaN success rate skips only its table, and a
degenerate top split reports ρ and says why it skips."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.stats import gap_study


def _groups(n=30, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.gamma(2.0, size=n)
    return pd.DataFrame(
        {
            "query_id": np.arange(n),
            "G": 8,
            "grad_var": v,
            "cd": v + rng.normal(size=n),
            "bot": v + rng.normal(size=n),
            "success_rate": rng.uniform(size=n),
        }
    )


def test_gap_study_refuses_what_would_shift_its_numbers():
    g = _groups()
    dup = pd.concat([g, g.iloc[:3]], ignore_index=True)
    with pytest.raises(ValueError, match="query_id 0 appears 2 times"):
        gap_study(dup, measures=["cd", "bot"], n_boot=50, trim=0)
    nul = g.astype({"query_id": object})
    nul.loc[4, "query_id"] = None
    with pytest.raises(ValueError, match="query_id is null at row 4"):
        gap_study(nul, measures=["cd", "bot"], n_boot=50, trim=0)
    with pytest.raises(ValueError, match="'grad_var' has no finite value"):
        gap_study(g.assign(grad_var=np.nan), measures=["cd", "bot"], n_boot=50, trim=0)
    with pytest.raises(ValueError, match="n_boot must be an integer >= 1"):
        gap_study(g, measures=["cd", "bot"], n_boot=0, trim=0)
    with pytest.raises(ValueError, match="no query matched"):
        gap_study(g.iloc[:0], measures=["cd", "bot"], n_boot=50, trim=0)


@pytest.mark.slow
def test_an_all_nan_success_rate_skips_only_its_table():
    with pytest.warns(UserWarning, match="success-rate table .* is skipped"):
        res = gap_study(_groups().assign(success_rate=np.nan), measures=["cd", "bot"], n_boot=50, trim=0)
    assert res.success is None and len(res.spearman) == 2 and math.isfinite(res.spearman["rho"].iloc[0])


@pytest.mark.slow
def test_a_degenerate_top_split_reports_rho_and_says_why_it_skips(tmp_path):
    from gcpo_analysis.stats import gap_study

    rng = np.random.default_rng(0)
    n = 40
    frame = pd.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(n)],
            "G": 8,
            "grad_var": np.r_[np.zeros(36), rng.random(4) + 1],
            "cd": rng.random(n),
            "rd": rng.random(n),
        }
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = gap_study(frame, measures=["cd", "rd"], reference="rd", n_boot=50)
    assert np.isfinite(res.spearman["rho"]).all()
    assert res.retrieval["auc"].isna().all()
    assert any("AUC and precision skipped" in str(w.message) and "tied at the cut" in str(w.message) for w in caught)


def test_a_non_finite_per_seed_delta_is_named_by_its_seed():
    """[nan, 1] read "must be a finite 1-d array of at least 2 seeds, got shape (2,)": two seeds."""
    from gcpo_analysis.stats.seeds import paired_t, sign_flip_p, tost

    for fn in (paired_t, sign_flip_p, lambda d: tost(d, 0.1)):
        with pytest.raises(ValueError, match=r"seed 1 \(0-based\) has inf, 1 such"):
            fn([0.1, float("inf"), 0.2])


@pytest.mark.parametrize("margin", [True, np.True_])
def test_a_boolean_equivalence_margin_is_refused(margin):
    """tost(d, margin=True) tested equivalence within ±1."""
    from gcpo_analysis.stats.seeds import tost

    with pytest.raises(ValueError, match="margin δ must be a positive number, got"):
        tost([0.1, 0.3, 0.2], margin)


def test_a_report_row_whose_seeds_agree_exactly_is_inconclusive_not_better():
    """Five seeds each exactly +1.0 above GRPO read "better" (t interval [1, 1], p 0) while the
    exact sign-flip p is 2/32: the report now leaves the t interval and the TOST p out ("—"),
    says "inconclusive" and warns naming the arm; the sign-flip p stays."""
    import itertools

    from gcpo_train.compare.report import _control_markdown, _markdown, control_table, summary_table

    rows = []
    for arm, shift in (("none", 0.0), ("bot_rd", 1.0), ("bot_rd:shuffled", 1.0)):
        for seed, q in itertools.product(range(5), range(4)):
            rows.append(dict(arm=arm, seed=seed, step=9, query_id=f"q{q}", score=40.0 + 10 * q + seed + shift))
    results = pd.DataFrame(rows)
    arms = ["none", "bot_rd", "bot_rd:shuffled"]
    with pytest.warns(UserWarning) as caught:
        table = summary_table(results, arms, "none", {}).set_index("arm")
    labels = sorted(str(w.message).split(": the per-seed")[0] for w in caught)
    assert labels == ["bot_rd vs none", "bot_rd:shuffled vs none"]
    assert all("no spread" in str(w.message) and "'inconclusive'" in str(w.message) for w in caught)
    with pytest.warns(UserWarning, match="bot_rd vs bot_rd:shuffled: the per-seed deltas have no spread"):
        control = control_table(results, arms, "none")
    r = table.loc["bot_rd"]
    assert r.verdict == "inconclusive" and r.delta == pytest.approx(1.0)
    assert np.isnan([r.delta_low, r.delta_high, r.p_t, r.p_tost]).all()
    assert r.p == 2 / 2**5  # all 32 sign vectors: only the observed one and its mirror reach |mean| = 1
    assert control.iloc[0].verdict == "inconclusive" and control.iloc[0].p == 1.0  # every delta 0
    text = _markdown(table.reset_index(), None, "none") + _control_markdown(control)
    assert "nan" not in text.lower() and "better" not in text
    assert "| +1.00 —, df 4 | 0.062 (" in text and "| +0.00 —, df 4 | 1.000 |" in text
