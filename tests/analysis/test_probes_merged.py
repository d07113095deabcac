"""Hostile-input probes of the CLI: refusals that were once library messages, or silent. Each
is CLI-level and checks that the error names the flag and what would fix it, and that nothing
was written.
docs/guides/hostile_input.md describes the classes of input they cover."""

import pytest
from helpers.cli_error import cli_error

from gcpo_analysis.cli import main


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["proofs", "--instances", "0"], "--instances: instances must be >= 1, got 0"),
        (["proofs", "--instances", "-3"], "--instances: instances must be >= 1, got -3"),
        (["proofs", "--seed", "-1"], "--seed: seed must be >= 0, got -1"),
    ],
)
def test_proofs_flags_are_checked_naming_the_flag(argv, named, tmp_path, capsys):
    out = tmp_path / "p.json"
    rc, line = cli_error([*argv, "--json", str(out)], capsys)
    assert rc == 2 and named in line and not out.exists()


@pytest.mark.parametrize("mode", ["--from-rollouts", "--from-training"])
@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [
        ("--k-folds", "0", "--k-folds: k_folds must be >= 2, got 0"),
        ("--k-folds", "1", "--k-folds: k_folds must be >= 2, got 1"),
        ("--seed", "-1", "--seed: seed must be >= 0, got -1"),
        ("--n-boot", "0", "--n-boot: n_boot must be >= 1, got 0"),
    ],
)
def test_study_flags_are_checked_naming_the_flag_in_every_mode(mode, flag, value, named, tmp_path, capsys):
    """--from-training builds no StudyConfig, so its flags were checked by nobody (a missing
    folder was reported instead); in --from-rollouts the error named the field, not the flag."""
    source = tmp_path / ("r.jsonl" if mode == "--from-rollouts" else "run")
    out = tmp_path / "out"
    rc, line = cli_error(["study", mode, str(source), flag, value, "--output", str(out)], capsys)
    assert rc == 2 and named in line and not out.exists()


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--output", "x"], "--output"),
        (["--seed", "3"], "--seed"),
        (["--trim", "-1"], "--trim: trim"),  # a flag --restat reads is still range-checked, naming the flag
    ],
)
def test_restat_refuses_the_flags_it_does_not_read(flags, named, tmp_path, capsys):
    """--restat re-scores a folder with the settings it was run with and takes only --trim,
    --n-boot and --measures (tests/analysis/study/test_restat.py); any other flag was ignored
    without a word, and a bad value of the three is refused by name."""
    rc, line = cli_error(["study", "--restat", str(tmp_path), *flags], capsys)
    assert rc == 2 and named in line


@pytest.mark.parametrize(
    ("modulator", "params", "named"),
    [
        ("q_hawkeye", "{q_alpha: 1.5}", "modulator_params['q_alpha'] must be a finite number in [0, 1], got 1.5"),
        ("r2vpo", "{r2vpo_lambda: -1}", "modulator_params['r2vpo_lambda'] must be a finite number >= 0, got -1.0"),
        ("eg_spo", "{eg_alpha: -2}", "modulator_params['eg_alpha'] must be a finite number >= 0, got -2.0"),
    ],
)
def test_modulator_params_keep_the_range_of_the_knob_they_override(modulator, params, named, tmp_path, capsys):
    """modulator_params win over q_hawkeye_alpha and the rest, so {q_alpha: 1.5} gave the weight
    of -1 that q_hawkeye_alpha: 1.5 is refused for; it was refused only at the first step, after
    the model had loaded (here: a model path that does not exist is never reached)."""
    config = tmp_path / "c.yaml"
    out = tmp_path / "run"
    config.write_text(
        f"steps: 1\noutput_dir: {out}\nmodel: {tmp_path / 'no-model'}\n"
        f"modulator: {modulator}\nmodulator_params: {params}\n"
    )
    rc, line = cli_error(["train", "--config", str(config)], capsys)
    assert rc == 2 and named in line and not out.exists()


def test_one_cluster_scores_no_negative_zero(tmp_path):
    """Semantic entropy of one cluster was -(0 / G) = -0.0, printed as -0.000000 in the frame."""
    import numpy as np
    import pandas as pd

    rows = [dict(query_id="one", rollout_id=i, completion="Paris", answer="Paris", reward=1.0) for i in range(4)]
    src = tmp_path / "one.jsonl"
    pd.DataFrame(rows).to_json(src, orient="records", lines=True)
    assert (
        main(["score", str(src), "-o", str(tmp_path / "g.parquet"), "--measures", "se,rd", "--judge", "lexical"]) == 0
    )
    frame = pd.read_parquet(tmp_path / "g.parquet")
    assert frame["se"].iloc[0] == 0.0 and not np.signbit(frame["se"].iloc[0])


def test_more_queries_per_step_than_training_queries_is_refused_before_training(tmp_path):
    """6 queries and queries_per_step 8: every step held a query twice (one query id, 2G
    rollouts), and the run died at the end of step 1 on the rollouts frame's duplicate ids."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from helpers.loop_setup import make

    with pytest.raises(ValueError, match=r"queries_per_step \(8\) is more than the 6 training queries"):
        make(tmp_path, "run", queries_per_step=8, steps=1)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("output", [None, "elsewhere"])
def test_a_failed_from_training_leaves_no_empty_output_folder(output, tmp_path, capsys):
    """A run folder with no rollouts (or no grad_var) was refused, but RUN/training_study (or
    --output) was left behind, empty."""
    run = tmp_path / "run"
    run.mkdir()
    argv = ["study", "--from-training", str(run)] + (["--output", str(tmp_path / output)] if output else [])
    rc, line = cli_error(argv, capsys)
    assert rc == 2 and "step_*.parquet" in line
    assert list(run.iterdir()) == [] and not (tmp_path / "elsewhere").exists()


def test_a_failed_from_training_keeps_an_output_folder_it_did_not_create(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "training_study").mkdir(parents=True)
    (run / "training_study" / "mine.md").write_text("notes")
    rc, _ = cli_error(["study", "--from-training", str(run)], capsys)
    assert rc == 2 and (run / "training_study" / "mine.md").read_text() == "notes"


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_a_missing_model_folder_is_named_as_missing(where, tmp_path, capsys, monkeypatch):
    """eval /path/that/does/not/exist answered that the model was not in the Hugging Face cache
    and the hub was offline: no hub name starts with '/' or './'."""
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    name = str(tmp_path / "nope") if where == "absolute" else "./nope"
    rc, line = cli_error(["eval", name], capsys)
    assert rc == 2 and f"model {name!r}: no such folder" in line and "cache" not in line


def test_eval_takes_a_run_folder_as_export_does(tmp_path, capsys):
    """eval RUN tried to load the run folder as a model (a tokenizers library message); export
    RUN takes its newest checkpoint."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from helpers.loop_setup import make, queries

    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    rc, line = cli_error(["eval", str(empty)], capsys)
    assert rc == 2 and "has no complete checkpoint" in line

    make(tmp_path, "run", steps=1, checkpoint_every=1).train()
    data = tmp_path / "q.jsonl"
    queries().rename(columns={"context": "passage"}).assign(answers=lambda d: d["references"]).to_json(
        data, orient="records", lines=True
    )
    argv = ["eval", str(tmp_path / "run"), "--data_path", str(data), "--n", "1", "--max_new_tokens", "2"]
    capsys.readouterr()
    assert main([*argv, "--no_progress"]) == 0
    assert "step_000001" in capsys.readouterr().err


def test_plot_train_names_a_missing_run_folder(tmp_path, capsys):
    """plot-train on a folder that does not exist said 'no log.jsonl in ...'."""
    missing = tmp_path / "nope"
    rc, line = cli_error(["plot-train", str(missing)], capsys)
    assert rc == 2 and f"{missing}: no such folder" in line and not missing.exists()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--measures", "rd", "--judge", "math"], "--measures rd do not read --judge: drop it"),
        (["--measures", "rd,pe", "--nli-threshold", "0.2"], "do not read --nli-threshold"),
        (["--measures", "se", "--judge", "lexical", "--embedder", "x"], "--measures se do not read --embedder"),
    ],
)
def test_score_refuses_a_flag_its_measures_do_not_read(flags, named, rollouts_file, tmp_path, capsys):
    """--judge math with --measures rd was accepted and changed nothing."""
    out = tmp_path / "g.parquet"
    rc, line = cli_error(["score", str(rollouts_file), "-o", str(out), *flags], capsys)
    assert rc == 2 and named in line and "is read by" in line and not out.exists()


def test_score_names_a_missing_embedder_folder(rollouts_file, tmp_path, capsys):
    """--embedder /no/such/folder answered with huggingface_hub's 'Repo id must use alphanumeric chars'."""
    pytest.importorskip("sentence_transformers")
    missing = tmp_path / "no-embedder"
    argv = [
        "score",
        str(rollouts_file),
        "-o",
        str(tmp_path / "g.parquet"),
        "--measures",
        "cd",
        "--embedder",
        str(missing),
    ]
    rc, line = cli_error(argv, capsys)
    assert rc == 2 and f"embedder {str(missing)!r}: no such folder" in line


@pytest.mark.parametrize("flag", ["-o", "--json"])
def test_proofs_outputs_are_checked_before_the_checks_run(flag, tmp_path, capsys, monkeypatch):
    """`-o newname/` wrote a file called newname, `-o`/`--json` replaced any existing file, and a
    folder was refused only after the checks had run (about 10 s)."""
    import gcpo_analysis.theory.proofs as proofs

    monkeypatch.setattr(proofs, "check_all", lambda **kw: pytest.fail("the checks ran before the paths were"))
    user = tmp_path / ("notes.json" if flag == "--json" else "notes.csv")
    user.write_text('{"mine": 1}\n' if flag == "--json" else "a,b\n1,2\n")
    for path, named in [
        (f"{tmp_path}/newname/", "names a folder"),
        (str(tmp_path), "names a folder"),
        (str(user), "the file exists and is not a table gcpo proofs wrote"),
    ]:
        rc, line = cli_error(["proofs", "--instances", "5", flag, path], capsys)
        assert rc == 2 and flag in line and named in line, line
    assert not (tmp_path / "newname").exists() and user.read_text() in ('{"mine": 1}\n', "a,b\n1,2\n")


def test_proofs_replaces_its_own_earlier_table(tmp_path):
    out_json, out_csv = tmp_path / "p.json", tmp_path / "p.csv"
    for _ in range(2):  # the second run replaces the first's files
        assert main(["proofs", "--instances", "5", "--json", str(out_json), "-o", str(out_csv)]) == 0
    assert out_csv.read_text().startswith("claim,where,instances,worst_violation,holds,note")
