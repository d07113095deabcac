"""A comparison folder's files are read as untrusted (a hostile probe of the comparison's readers): an
evaluation file of another name, a query scored twice or not at all, a score that is not a
number, a hand-edited compare.json, a log row without its reward, and a plan.md that exists are
each refused with the file and the field named, instead of changing Δ silently. Each test failed
on the code before its fix. Inputs: a copy of the committed confirmatory comparison's records
(no model is loaded)."""

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
FP32 = ROOT / "figures" / "train_compare" / "nqa_fp32" / "confirmatory"
EVAL = Path("runs") / "bot_rd" / "seed_0" / "eval" / "step_000060.predictions.parquet"


@pytest.fixture
def folder(tmp_path):
    """compare.json, results.parquet, plan.md, base/ and every run's run.json, done.json and eval/."""
    out = tmp_path / "cmp"
    out.mkdir()
    for name in ("compare.json", "results.parquet", "plan.md"):
        shutil.copy2(FP32 / name, out / name)
    shutil.copytree(FP32 / "base", out / "base")
    for run in (FP32 / "runs").glob("*/seed_*"):
        dest = out / run.relative_to(FP32)
        dest.mkdir(parents=True)
        for name in ("run.json", "done.json"):
            shutil.copy2(run / name, dest / name)
        shutil.copytree(run / "eval", dest / "eval")
    return out


def _comparison(out: Path):
    from gcpo_train.compare.run import Comparison
    from gcpo_train.config import load_config

    spec = json.loads((out / "compare.json").read_text())
    base = load_config(overrides={**spec["config"], "steps": spec["steps"]})
    return Comparison(
        base, out, spec["modulators"], spec["seeds"], eval_every=spec["eval_every"], eval_n=spec["eval_n"]
    )


def test_the_copied_records_give_the_committed_results(folder):
    """The fixture is a faithful copy: its results are the committed results.parquet."""
    got = _comparison(folder).results()
    want = pd.read_parquet(FP32 / "results.parquet")
    key = ["arm", "seed", "step", "query_id"]
    pd.testing.assert_frame_equal(
        got.sort_values(key).reset_index(drop=True), want.sort_values(key).reset_index(drop=True), check_dtype=False
    )


def test_an_evaluation_file_of_another_name_is_refused(folder):
    """step_000060_old.predictions.parquet counted as a second step-60 evaluation, and its
    scores were averaged into bot_rd's Δ."""
    stray = folder / EVAL.with_name("step_000060_old.predictions.parquet")
    shutil.copy2(folder / EVAL, stray)
    with pytest.raises(ValueError, match=r"step_000060_old\.predictions\.parquet: not an evaluation file"):
        _comparison(folder).results()


@pytest.mark.parametrize("corrupt", ["repeat", "drop", "nan", "text", "bool", "no_score", "empty"])
def test_a_query_scored_twice_missing_or_not_a_number_is_refused_by_file(folder, corrupt):
    """A repeated row was averaged, a missing query dropped from the pairing, a NaN left out of
    the mean, a column of texts or bools read as numbers: each changed Δ without a word."""
    path = folder / EVAL
    df = pd.read_parquet(path)
    qid = df["query_id"].iloc[3]
    if corrupt == "repeat":
        df = pd.concat([df, df.iloc[[3]]], ignore_index=True)
    elif corrupt == "drop":
        df = df.drop(index=3)
    elif corrupt == "nan":
        df.loc[3, "score"] = math.nan
    elif corrupt == "text":
        df["score"] = df["score"].astype(str)  # "50.0": a text, as a hand-made file may hold, not a score
    elif corrupt == "bool":
        df["score"] = df["score"] > 50
    elif corrupt == "no_score":
        df = df.drop(columns="score")
    else:
        df = df.iloc[:0]
    df.to_parquet(path)
    run = "bot_rd seed 0 step 60"
    expected = {
        "repeat": rf"{run} {path}: row 362 scores query '{qid}' a second time",
        "drop": rf"{path} scores other held-out queries than .*: 1 missing \(first \['{qid}'\]\)",
        "nan": rf"{run} {path}: row 3 \(query '{qid}'\) has score nan, not a finite number",
        "text": rf"{run} {path}: row 0 \(query .*\) has score '[0-9.]+', not a finite number",
        "bool": rf"{run} {path}: row 0 \(query .*\) has score (True|False), not a finite number",
        "no_score": rf"{run} {path}: no 'score' column",
        "empty": rf"{run} {path}: the file holds no predictions",
    }[corrupt]
    with pytest.raises(ValueError, match=expected):
        _comparison(folder).results()


def test_a_base_evaluation_that_differs_is_named_not_the_runs(folder):
    """The first file read (the base policy's) was the reference: a base file missing a query
    reported every trained run as scoring an extra one."""
    base = folder / "base" / "all_seeds.predictions.parquet"
    df = pd.read_parquet(base)
    qid = df["query_id"].iloc[5]
    df.drop(index=5).to_parquet(base)
    with pytest.raises(ValueError, match=rf"{base} scores other held-out queries .* 1 missing \(first \['{qid}'\]\)"):
        _comparison(folder).results()


@pytest.mark.parametrize(
    ("field", "value"),
    [("seeds", ["a"]), ("modulators", [1]), ("equivalence_margin", "x"), ("equivalence_margin", 0), ("steps", 0)],
)
def test_a_hand_edited_compare_json_names_its_field(folder, field, value):
    """seeds ["a"] failed as "invalid literal for int()", a margin "x" as "could not convert
    string to float"; a margin of 0 was used."""
    from gcpo_train.compare.record import read_record

    spec = json.loads((folder / "compare.json").read_text())
    spec[field] = value
    (folder / "compare.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=rf"compare\.json: field '{field}' must be"):
        read_record(folder / "compare.json")


def test_a_log_row_without_its_reward_is_named(folder):
    """A log.jsonl row without reward_mean ended the figures with KeyError: 'reward_mean'."""
    pytest.importorskip("matplotlib")
    from gcpo_train.compare.report import plot_report

    log = folder / "runs" / "none" / "seed_0" / "log.jsonl"
    log.write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n" + json.dumps({"step": 2}) + "\n")
    results = pd.read_parquet(folder / "results.parquet")
    with pytest.raises(ValueError, match=rf"{log}: a row without 'reward_mean'"):
        plot_report(folder, results, ["none"], {})


def test_plan_keeps_an_existing_plan_and_the_recorded_margin(folder):
    """gcpo compare --plan replaced the plan fixed before the confirmatory runs with one from
    their results, and planned at the config's margin when compare.json records another."""
    from gcpo_train.compare.plan import write_plan

    before = (folder / "plan.md").read_text()
    with pytest.raises(FileExistsError, match=r"plan\.md exists: a plan is fixed before the runs it plans"):
        write_plan(folder)
    assert (folder / "plan.md").read_text() == before
    with pytest.raises(ValueError, match=r"margin asked for \(0\.2\) is not the one .*compare\.json records \(0\.1\)"):
        write_plan(folder, margin=0.2, overwrite=True)
    assert (folder / "plan.md").read_text() == before
    text = write_plan(folder, margin=0.1, overwrite=True)
    assert (folder / "plan.md").read_text() == text != before


def test_a_finished_comparisons_own_plan_goes_beside_the_fixed_one(folder):
    """The closing reading (τ from the comparison's own seeds, the δ they detect) is written to
    another file and leaves the plan fixed before the runs untouched; a path is not a file name."""
    from gcpo_train.compare.plan import write_plan

    before = (folder / "plan.md").read_text()
    text = write_plan(folder, seeds=3, name="closing_plan.md")
    assert (folder / "closing_plan.md").read_text() == text and "3 seeds detect δ" in text
    assert (folder / "plan.md").read_text() == before
    with pytest.raises(FileExistsError, match=r"closing_plan\.md exists"):
        write_plan(folder, name="closing_plan.md")
    for bad in ("../plan.md", "sub/plan.md", "plan.txt"):
        with pytest.raises(ValueError, match="a file name ending in .md"):
            write_plan(folder, name=bad)
    assert not (folder.parent / "plan.md").exists()


def test_a_seed_given_twice_is_refused():
    """--plan --seeds 0,0 planned for "2 seeds"; a comparison would list seed 0 twice."""
    from gcpo_train.compare.settings import parse_seeds

    with pytest.raises(ValueError, match="--seeds '0,1,0': seed 0 is given twice"):
        parse_seeds("0,1,0")
    assert parse_seeds("2,0,1") == [2, 0, 1]
