"""The headline tables of the trained comparisons (gcpo compare), wherever they are quoted
(README.md, docs/**/*.md), against the committed summary.csv each is rounded from: "| arm
(trained) |" is BoolQ's (figures/train_compare/compare/), "| arm (trained, SIQA) |" SIQA's
(figures/train_compare/siqa/), "| arm (trained, NarrativeQA spans) |" the reading task's
(figures/train_compare/nqa_spans/). A rerun or resumed comparison that changes a summary, or an
edit that drifts, fails here. The interval is the seed-level paired t, recomputed here
from results.parquet with scipy."""

import re
from pathlib import Path

import pandas as pd
import pytest
from helpers.doc_pages import doc_pages, quoted_text

ROOT = Path(__file__).resolve().parents[2]
CONFIRMATORY = ROOT / "figures" / "train_compare" / "nqa_fp32" / "confirmatory" / "summary.csv"
SUMMARIES = {
    "| arm (trained) |": ROOT / "figures" / "train_compare" / "compare" / "summary.csv",
    "| arm (trained, SIQA) |": ROOT / "figures" / "train_compare" / "siqa" / "summary.csv",
    "| arm (trained, NarrativeQA spans) |": ROOT / "figures" / "train_compare" / "nqa_spans" / "summary.csv",
    "| arm (trained, NarrativeQA spans, fp32) |": CONFIRMATORY,
}
NUM = r"[+−-]?\d+\.\d+"


def _f(text: str) -> float:
    return float(text.replace("−", "-").replace("+", ""))


@pytest.mark.parametrize("header", sorted(SUMMARIES))
def test_compare_headline_table(header):
    summary = pd.read_csv(SUMMARIES[header]).set_index("arm")
    rows = []
    for page, text in doc_pages().items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(header):
                for r in lines[i + 2 :]:
                    if not r.startswith("|"):
                        break
                    rows.append((page, r))
    assert rows, f"no {header!r} table in README.md or docs/: the numbers moved out of sight of this test"
    for page, row in rows:
        _check_row(summary, row, page)


def _check_row(summary: pd.DataFrame, row: str, where: str) -> None:
    """One row of a headline table against its summary.csv: mean ± sd, the seed-level paired t
    interval with its df, the verdict with δ written out, ω's p5–p95 and, where the
    table has them, the effective treatment (ω / step mean p5–p95, the share of clipped steps)."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    arm = cells[0].split(" ")[0]
    s = summary.loc[arm]
    mean, sd = (_f(x) for x in re.fullmatch(rf"({NUM}) ± ({NUM})", cells[1]).groups())
    assert [mean, sd] == [round(s.heldout_mean, 2), round(s.heldout_sd, 2)], (where, arm)
    if arm == "none":
        assert cells[2] == cells[3] == "—", where
    else:
        m = re.fullmatch(rf"({NUM}) \[({NUM}), ({NUM})\] \(df (\d+)\)", cells[2])
        shown = [_f(x) for x in m.groups()[:3]]
        assert shown == [round(s.delta, 2), round(s.delta_low, 2), round(s.delta_high, 2)], (where, arm)
        assert int(m.group(4)) == int(s.df) == int(s.paired_seeds) - 1, (where, arm)
        verdict = s.verdict.replace("±δ", f"±{s.margin:.2f}")
        assert cells[3] == verdict, (where, arm)
        assert s.margin == pytest.approx(0.1 * summary.loc["none", "heldout_mean"], rel=1e-9)
    low, high = (_f(x) for x in cells[4].split("–"))
    assert [low, high] == [round(s.omega_p5, 2), round(s.omega_p95, 2)], (where, arm)
    if len(cells) > 5:
        low, high = (_f(x) for x in cells[5].split("–"))
        assert [low, high] == [round(s.rel_omega_p5, 2), round(s.rel_omega_p95, 2)], (where, arm)
        assert cells[6] == f"{100 * s.clipped_share:.0f}%", (where, arm)


@pytest.mark.parametrize("path", sorted({*SUMMARIES.values(), CONFIRMATORY}), ids=lambda p: p.parent.name)
def test_the_table_script_writes_rows_this_test_accepts(path):
    """gcpo compare table (gcpo_train.compare.table), which prints these tables from a summary.csv, against the row
    check above: a table pasted from it passes, with its effective-treatment columns (also the
    confirmatory comparison's, which the README quotes once its seeds are in)."""
    from gcpo_train.compare.table import table

    summary = pd.read_csv(path).set_index("arm")
    lines = table(path.parent, "arm (trained)", "score").splitlines()
    assert lines[0].startswith("| arm (trained) |") and len(lines) == 2 + len(summary)
    for row in lines[2:]:
        _check_row(summary, row, "gcpo compare table")


@pytest.mark.parametrize("header", sorted(SUMMARIES))
def test_the_seed_level_columns_are_recomputed_from_the_committed_results(header):
    """summary.csv's seed-level numbers against a recomputation from results.parquet with scipy
    alone (paired t of the per-seed deltas; TOST as two one-sided t tests)."""
    from scipy import stats

    folder = SUMMARIES[header].parent
    summary = pd.read_csv(SUMMARIES[header]).set_index("arm")
    res = pd.read_parquet(folder / "results.parquet").query("arm != 'base'")
    res = res[res["step"] == res.groupby(["arm", "seed"])["step"].transform("max")]
    per_seed = res.groupby(["arm", "seed"])["score"].mean().unstack(0)
    for arm in summary.index.drop("none"):
        d = (per_seed[arm] - per_seed["none"]).to_numpy()
        ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
        s = summary.loc[arm]
        assert [s.delta, s.delta_low, s.delta_high] == pytest.approx([d.mean(), ci.low, ci.high], rel=1e-9)
        margin = 0.1 * per_seed["none"].mean()
        tost = max(
            stats.ttest_1samp(d, -margin, alternative="greater").pvalue,
            stats.ttest_1samp(d, margin, alternative="less").pvalue,
        )
        assert s.p_tost == pytest.approx(tost, rel=1e-8)


def test_readme_coupling_numbers():
    """The README's "N% of their completions identical at step 2 (bf16 sampling: M%)": the coupling
    of bot_rd with none in the fp32 pilot and in the first (bf16) NarrativeQA-spans comparison,
    from their committed coupling.csv."""
    text = quoted_text()
    m = re.search(r"with\s+(\d+)% of their completions identical at step 2 \(bf16 sampling: (\d+)%\)", text)
    assert m, "the coupling sentence is in neither README.md nor docs/"

    def at_step_2(folder: str) -> int:
        c = pd.read_csv(ROOT / "figures" / "train_compare" / folder / "coupling.csv")
        return round(100 * c[(c["arm"] == "bot_rd") & (c["step"] == 2)]["identical"].item())

    assert (int(m.group(1)), int(m.group(2))) == (at_step_2("nqa_fp32/confirmatory"), at_step_2("nqa_spans"))


def _variance_components(folder: str, seeds: int | None) -> tuple[float, float, float, int]:
    """τ, σ_q²/Q, GRPO's mean and the paired seeds of bot_rd − none at the last step of a committed
    comparison (its seeds below ``seeds``, if given), by moments without gcpo's planner:
    τ² = var_s(D_s) − mean_s var_q(d_sq)/Q (one-way random effects)."""
    import numpy as np

    r = pd.read_parquet(ROOT / "figures" / "train_compare" / folder / "results.parquet")
    r = r[r["arm"].isin(["none", "bot_rd"]) & (r["seed"] < (seeds or 10**6))]
    r = r[r["step"] == r.groupby(["arm", "seed"])["step"].transform("max")]
    wide = r.pivot_table(index=["seed", "query_id"], columns="arm", values="score")
    d = (wide["bot_rd"] - wide["none"]).unstack("query_id").to_numpy()
    within = d.var(axis=1, ddof=1).mean() / d.shape[1]
    tau = np.sqrt(max(0.0, d.mean(axis=1).var(ddof=1) - within))
    none_mean = r[r["arm"] == "none"].groupby("seed")["score"].mean().mean()
    return tau, within, none_mean, d.shape[0]


def test_readme_plan_numbers():
    """The README's "pilot's 4 seeds put τ at X F1 (bf16: Y), so the plan asks for N seeds for 80%
    power at δ = D F1", recomputed from the committed per-query results without gcpo's planner:
    τ² = var_s(D_s) − mean_s var_q(d_sq)/Q (one-way random effects, moments), the seeds from
    statsmodels' paired t power at δ / sd(D), δ = 10% of GRPO's mean. The pilot is seeds 0–3 of
    the fp32 comparison; the bf16 τ is the first NarrativeQA-spans comparison's."""
    import numpy as np
    from statsmodels.stats.power import TTestPower

    text = quoted_text()
    m = re.search(
        rf"pilot's (\d+) seeds put τ at ({NUM}) F1 \(bf16: ({NUM})\), so the plan asks for (\d+) seeds for 80% "
        rf"power at δ = ({NUM}) F1",
        text,
    )
    assert m, "the plan sentence is in neither README.md nor docs/"

    def plan(folder: str, seeds: int | None) -> tuple[float, int, float]:
        tau, within, none_mean, _ = _variance_components(folder, seeds)
        delta = 0.1 * none_mean
        effect = delta / np.sqrt(tau**2 + within)
        n = next(n for n in range(2, 1000) if TTestPower().power(effect, n, 0.05) >= 0.8)
        return round(tau, 2), n, round(delta, 2)

    pilot_seeds = int(m.group(1))
    tau, n, delta = plan("nqa_fp32/confirmatory", pilot_seeds)
    assert (_f(m.group(2)), int(m.group(4)), _f(m.group(5))) == (tau, max(8, min(16, n)), delta)
    assert _f(m.group(3)) == plan("nqa_spans", None)[0]


def test_the_table_script_refuses_a_folder_without_a_summary_or_its_columns(tmp_path):
    from gcpo_train.compare.table import table

    with pytest.raises(SystemExit, match="no summary.csv"):
        table(tmp_path, "arm", "score")
    pd.DataFrame({"arm": ["none"], "heldout_mean": [1.0]}).to_csv(tmp_path / "summary.csv", index=False)
    with pytest.raises(SystemExit, match=r"no column \['clipped_share', 'heldout_sd', .*\]; write the summary again"):
        table(tmp_path, "arm", "score")


def test_readme_closing_power_numbers():
    """The README's "The N seeds show τ = X F1 between seeds ..., so they detect Y F1 at 80% power":
    τ and the detectable δ of the finished confirmatory comparison, recomputed without gcpo's
    planner (τ by moments, _variance_components; the detectable effect from statsmodels' solve_power, where
    gcpo roots scipy's noncentral t)."""
    import numpy as np
    from statsmodels.stats.power import TTestPower

    text = quoted_text()
    m = re.search(
        rf"The (\d+) seeds show τ = ({NUM}) F1 between seeds .*? so they detect ({NUM}) F1 at 80% power", text
    )
    assert m, "the closing power sentence is in neither README.md nor docs/"
    tau, within, _, paired = _variance_components("nqa_fp32/confirmatory", None)
    seeds = int(m.group(1))
    assert seeds == paired
    detect = TTestPower().solve_power(nobs=seeds, alpha=0.05, power=0.8) * np.sqrt(tau**2 + within)
    assert (_f(m.group(2)), _f(m.group(3))) == (round(tau, 2), round(detect, 1))
