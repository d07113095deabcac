"""A comparison's results, record and plan file read as untrusted by the report and the planner
(round-eight probes of ``gcpo compare``'s report and ``--plan``): a repeated results row, a score
that is a bool or a text, a step or seed stored as text, a run missing a query, a reference with
no finished run or a score of 0, a NaN max_grad_norm in compare.json, a plan named as one of the
comparison's own files, --plan_file without --plan, and a table of an earlier report. Each test
failed on the code before its fix. Inputs: small hand-made folders (no model is loaded)."""

import json
import math

import pandas as pd
import pytest

pytest.importorskip("torch")

ARMS = ["none", "x", "x:shuffled"]


def _rows(arms=ARMS, seeds=3, queries=4, step=1, reference_score=None) -> pd.DataFrame:
    """Long results (arm, seed, step, query_id, score) whose per-seed deltas vary."""
    rows = [
        dict(
            arm=arm,
            seed=s,
            step=step,
            query_id=f"q{q}",
            score=float(10 + q + s * (i + 1) + i) if reference_score is None or arm != "none" else reference_score,
        )
        for i, arm in enumerate(arms)
        for s in range(seeds)
        for q in range(queries)
    ]
    return pd.DataFrame(rows)


def _folder(tmp_path, arms=ARMS, seeds=3, finished=None, record=None):
    """A comparison folder: compare.json and each run's folder, with a done.json where ``finished``
    (default: every run) holds (arm, seed)."""
    from gcpo_train.compare.layout import arm_seed_folder

    out = tmp_path / "cmp"
    out.mkdir()
    spec = {"config": {}, "modulators": list(arms), "seeds": list(range(seeds)), "steps": 1, **(record or {})}
    (out / "compare.json").write_text(json.dumps(spec))
    for arm in arms:
        for s in range(seeds):
            run = arm_seed_folder(out, arm, s)
            run.mkdir(parents=True)
            if finished is None or (arm, s) in finished:
                (run / "done.json").write_text("{}")
    return out


# ---------------------------------------------------------------------- compare.json (finding 5)
@pytest.mark.parametrize("clip", [math.nan, math.inf, -1.0])
def test_a_max_grad_norm_that_clips_nothing_knowable_is_refused(tmp_path, clip):
    """ "max_grad_norm": NaN was read, every step compared as not clipped, and the summary said 0%
    clipped though every step's norm was 3."""
    from gcpo_train.compare.record import read_record
    from gcpo_train.compare.report import write_report

    out = _folder(tmp_path, record={"config": {"max_grad_norm": clip}})
    with pytest.raises(ValueError, match=r"compare\.json: config field 'max_grad_norm' must be a finite number >= 0"):
        read_record(out / "compare.json")
    with pytest.raises(ValueError, match=r"compare\.json: config field 'max_grad_norm'"):
        write_report(out, _rows(), ARMS, "none", figures=False)


@pytest.mark.parametrize("clip", [0, 0.0, None, 1.0])
def test_a_max_grad_norm_of_0_or_null_still_means_no_clipping(tmp_path, clip):
    from gcpo_train.compare.record import read_record

    out = _folder(tmp_path, record={"config": {"max_grad_norm": clip}})
    assert read_record(out / "compare.json")["config"]["max_grad_norm"] == clip


# ---------------------------------------------------------------------- results frame (6, 9, 10)
@pytest.mark.parametrize(
    ("spoil", "named"),
    [
        ("repeat", r"arm 'x' seed 0 step 1 query 'q0' \(row 24\) repeats row 12: .* averaged into Δ and τ"),
        (
            "bool",
            r"24 score\(s\) are missing or not finite, the first of arm 'none' seed 0 step 1 query 'q0' \(row 0\)",
        ),
        (
            "text_score",
            r"24 score\(s\) are missing or not finite, .*: '10\.0'; a score is a finite number, never a text",
        ),
        ("text_step", r"arm 'none' seed 0 step '1' query 'q0' \(row 0\): column 'step' holds '1', not an integer"),
        ("text_seed", r"arm 'x' seed '0' step 1 query 'q0' \(row 12\): column 'seed' holds '0', not an integer"),
        ("float_seed", r"arm 'none' seed 0\.0 step 1 query 'q0' \(row 0\): column 'seed' holds 0\.0, not an integer"),
    ],
)
def test_plan_and_report_refuse_the_same_results_by_file_and_row(tmp_path, spoil, named):
    """A repeated (arm, seed, step, query) row was averaged by pivot_table (τ 13.79 for 4.74 on the
    confirmatory results, no warning); bool scores planned as 0/1; a step as text failed with
    TypeError: Invalid comparison between dtype=str and int, a score as text with dtype 'str' does
    not support operation 'mean'; seeds as text in one arm gave Δ — under a footnote blaming the
    seed count. --plan and the report now refuse each, naming results.parquet and the row."""
    from gcpo_train.compare.plan import plan, write_plan
    from gcpo_train.compare.report import summary_table, write_report

    df = _rows(arms=["none", "x"], seeds=3, queries=4)
    if spoil == "repeat":
        df = pd.concat([df, df.iloc[[12]].assign(score=100.0)], ignore_index=True)
    elif spoil == "bool":
        df["score"] = df["score"] > 14
    elif spoil == "text_score":
        df["score"] = df["score"].astype(str)
    elif spoil == "text_step":
        df["step"] = df["step"].astype(str)
    elif spoil == "float_seed":
        df["seed"] = df["seed"].astype(float)
    else:
        df["seed"] = df["seed"].astype(object)
        df.loc[df["arm"] == "x", "seed"] = df.loc[df["arm"] == "x", "seed"].astype(str)
    out = _folder(tmp_path, arms=["none", "x"])
    path = out / "results.parquet"
    if spoil != "text_seed":  # Parquet holds no column of texts and numbers; a frame in memory does
        df.to_parquet(path)
        with pytest.raises(ValueError, match=rf"^{path}: {named}"):
            write_plan(out)
    with pytest.raises(ValueError, match=rf"^{path}: {named}"):
        write_report(out, df, ["none", "x"], "none", figures=False)
    for call in (lambda: plan(df), lambda: summary_table(df, ["none", "x"], "none", {})):
        with pytest.raises(ValueError, match=rf"^comparison results: {named}"):
            call()
    assert not (out / "plan.md").exists() and not (out / "summary.md").exists()


@pytest.mark.parametrize(
    ("spoil", "named"),
    [
        ("cell", r"arm 'x' seed 0 step 1 has no score for query 'q0' \(1 of the 5 queries"),
        ("two_of_five", r"arm 'x' seed 0 step 1 has no score for query 'q0' \(3 of the 5 queries"),
        ("reference", r"arm 'none' seed 2 step 1 has no score for query 'q4' \(1 of the 5 queries"),
    ],
)
def test_a_run_missing_a_query_is_named_not_paired_on_the_rest(tmp_path, spoil, named):
    """A missing (arm, seed, query) cell failed as "d must be a finite (seeds, queries) array with
    at least 2 seeds, got shape (4, 5)", naming nothing; an arm evaluated on 2 of the 5 queries
    got a Δ over those 2 without a word. Both are refused (not warned about: Δ over other queries
    is another quantity), by arm, seed, step and query."""
    from gcpo_train.compare.plan import plan
    from gcpo_train.compare.report import control_table, summary_table, write_report

    df = _rows(seeds=4, queries=5)
    drop = {
        "cell": (df["arm"] == "x") & (df["seed"] == 0) & (df["query_id"] == "q0"),
        "two_of_five": (df["arm"] == "x") & df["query_id"].isin(["q0", "q1", "q2"]),
        "reference": (df["arm"] == "none") & (df["seed"] == 2) & (df["query_id"] == "q4"),
    }[spoil]
    df = df[~drop].reset_index(drop=True)
    with pytest.raises(ValueError, match=named):
        summary_table(df, ARMS, "none", {})
    if spoil != "reference":
        with pytest.raises(ValueError, match=named):
            control_table(df, ARMS, "none")
    with pytest.raises(ValueError, match=named):
        plan(df)
    out = _folder(tmp_path, seeds=4)
    with pytest.raises(ValueError, match=rf"^{out / 'results.parquet'}: {named}"):
        write_report(out, df, ARMS, "none", figures=False)


def test_a_seed_only_one_arm_has_still_pairs_the_rest():
    """The pairing check is over the seeds both arms have: a seed one arm has not finished is left
    out of Δ as before, whatever queries it scores."""
    from gcpo_train.compare.report import summary_table

    df = _rows(arms=["none", "x"], seeds=3)
    extra = pd.DataFrame([dict(arm="x", seed=7, step=1, query_id="q0", score=1.0)])
    table = summary_table(pd.concat([df, extra], ignore_index=True), ["none", "x"], "none", {}).set_index("arm")
    assert table.loc["x", "paired_seeds"] == 3 and table.loc["x", "seeds"] == 4


# ---------------------------------------------------------------------- the reference gives no δ (8)
@pytest.mark.parametrize("case", ["unfinished", "zero"])
def test_a_reference_without_a_finished_run_or_a_score_shows_delta_as_a_dash(tmp_path, case):
    """write_report, run by gcpo compare after every run, stopped the comparison with "the
    equivalence margin δ must be a positive number, got nan" (no finished reference run) or "got
    0.0" (a reference scoring 0), naming neither the reference nor the reason."""
    from gcpo_train.compare.report import control_table, summary_table, write_report

    finished = {(a, s) for a in ARMS for s in range(3) if case == "zero" or a != "none"}
    out = _folder(tmp_path, finished=finished)
    df = _rows(reference_score=0.0 if case == "zero" else None)
    why = "has no finished run in the summary yet" if case == "unfinished" else "has a held-out mean of 0"
    with pytest.warns(UserWarning) as caught:
        report = write_report(out, df, ARMS, "none", figures=False)
    messages = [str(w.message) for w in caught]
    assert any(m.startswith("Δ vs none is — for every arm: the reference 'none' " + why) for m in messages), messages
    assert any(
        m.startswith("the permuted control (Δ of an arm against its :shuffled or :deranged twin) is left out")
        for m in messages
    )
    table = report["table"].set_index("arm")
    assert "delta" not in table or table["delta"].isna().all()
    assert report["control"].empty and not (out / "control.csv").exists()
    md = (out / "summary.md").read_text()
    assert (
        f"Δ vs none (and against a shuffled twin) is — for every arm: the reference 'none' {why}; the verdicts are"
        in md
    )
    assert next(line for line in md.splitlines() if line.startswith("| x |")).split(" | ")[4] == "—"
    if case == "zero":  # the frame-level functions say so too
        with pytest.warns(UserWarning, match="the reference 'none' has a held-out mean of 0"):
            assert "delta" not in summary_table(df, ARMS, "none", {})
        with pytest.warns(UserWarning, match="permuted control .* is left out"):
            assert control_table(df, ARMS, "none").empty


# ---------------------------------------------------------------------- --plan (7, 11, 12)
def test_plan_reads_the_runs_the_summary_reads(tmp_path):
    """A run evaluated at the last step but with no done.json was left out of the summary by name
    and counted by --plan without a word."""
    from gcpo_train.compare.plan import write_plan

    df = _rows(arms=["none", "x"], seeds=4)
    unfinished = _folder(
        tmp_path, arms=["none", "x"], seeds=4, finished={*((a, s) for a in ("none", "x") for s in range(3))}
    )
    df.to_parquet(unfinished / "results.parquet")
    with pytest.warns(UserWarning, match=r"until their run folder has a done\.json: none seed 3 \(step 1\), x seed 3"):
        text = write_plan(unfinished)
    assert next(line for line in text.splitlines() if line.startswith("| x |")).split(" | ")[1] == "3"
    # a folder holding only results.parquet (no runs/) has no done.json to read: every run is planned
    bare = tmp_path / "bare"
    bare.mkdir()
    df.to_parquet(bare / "results.parquet")
    assert next(line for line in write_plan(bare).splitlines() if line.startswith("| x |")).split(" | ")[1] == "4"


@pytest.mark.parametrize("name", ["summary.md", "gate.md", "Summary.md", ".md", ".hidden.md"])
def test_a_plan_never_takes_a_comparison_files_name(tmp_path, name):
    """--plan --plan_file summary.md --overwrite replaced the report's summary.md with a plan."""
    from gcpo_train.compare.plan import write_plan

    out = tmp_path / "cmp"
    out.mkdir()
    _rows(arms=["none", "x"]).to_parquet(out / "results.parquet")
    (out / "summary.md").write_text("the report\n")
    with pytest.raises(ValueError, match=rf"plan file '{name}'"):
        write_plan(out, name=name, overwrite=True)
    assert (out / "summary.md").read_text() == "the report\n" and sorted(p.name for p in out.iterdir()) == [
        "results.parquet",
        "summary.md",
    ]


def test_overwrite_replaces_only_a_plan(tmp_path):
    from gcpo_train.compare.plan import write_plan

    out = tmp_path / "cmp"
    out.mkdir()
    _rows(arms=["none", "x"]).to_parquet(out / "results.parquet")
    (out / "notes.md").write_text("# my notes\n")
    with pytest.raises(FileExistsError, match=r"notes\.md is not a plan gcpo compare --plan wrote"):
        write_plan(out, name="notes.md", overwrite=True)
    assert (out / "notes.md").read_text() == "# my notes\n"
    first = write_plan(out, name="closing_plan.md")
    assert write_plan(out, name="closing_plan.md", seeds=5, overwrite=True) != first


def test_plan_file_without_plan_is_refused_not_ignored(tmp_path, capsys, monkeypatch):
    """--plan_file closing_plan.md without --plan was ignored and the comparison trained."""
    from helpers.cli_error import cli_error

    from gcpo_train.compare.run import Comparison

    def trains(self, *args, **kwargs):
        raise AssertionError("gcpo compare trained")

    monkeypatch.setattr(Comparison, "run", trains)
    config = tmp_path / "c.yaml"
    config.write_text("model: tiny:llama\ndataset: narrativeqa\nsteps: 1\n")
    out = tmp_path / "cmp"
    argv = ["compare", "--config", str(config), "--output", str(out), "--plan_file", "closing_plan.md"]
    rc, err = cli_error(argv, capsys)
    assert rc == 2 and "--plan_file 'closing_plan.md' names the file --plan writes; add --plan" in err
    assert not out.exists()


# ---------------------------------------------------------------------- stale tables (13)
def test_a_table_the_new_report_has_none_of_is_removed(tmp_path):
    """A control.csv (or coupling.csv) of an earlier report stayed beside a summary.md that no longer
    had the contrast."""
    from gcpo_train.compare.report import write_report

    out = _folder(tmp_path, finished={(a, s) for a in ARMS for s in range(3) if (a, s) != ("x:shuffled", 1)})
    df = _rows()
    with pytest.warns(UserWarning, match=r"left out of the summary .*: x:shuffled seed 1"):
        report = write_report(out, df, ARMS, "none", figures=False)
    assert len(report["control"]) == 1 and (out / "control.csv").exists()
    (out / "runs" / "x-shuffled" / "seed_0" / "done.json").unlink()  # one finished control seed: no contrast
    (out / "coupling.csv").write_text("arm,step,identical,seeds\nx,1,1.0,3\n")  # no rollouts: no coupling
    (out / "notes.csv").write_text("mine\n")
    with pytest.warns(UserWarning, match="left out of the summary"):
        report = write_report(out, df, ARMS, "none", figures=False)
    assert report["control"].empty and "Shuffled control" not in (out / "summary.md").read_text()
    assert not (out / "control.csv").exists() and not (out / "coupling.csv").exists()
    assert (out / "notes.csv").read_text() == "mine\n"  # only the comparison's own tables
