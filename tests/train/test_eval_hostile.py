"""Hostile input for ``gcpo eval``: no output replaces an input of the same
command, inputs are checked before the evaluation runs, the split is the config's, and the two
outputs are written as one set. Each test failed on the code before its fix (e498d2b)."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from helpers.loop_setup import make, queries  # noqa: E402


def _cli(argv, capsys) -> tuple[int, str]:
    from gcpo_analysis.cli import main

    capsys.readouterr()
    rc = main(argv)
    lines = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    return rc, "\n".join(lines)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 1-step run with a checkpoint, a 4-query data file and the base evaluation of it."""
    root = tmp_path_factory.mktemp("eval")
    make(root, "run", steps=1, checkpoint_every=1).train()
    data = root / "q.jsonl"
    queries(4).rename(columns={"context": "passage"}).assign(answers=lambda d: d["references"]).to_json(
        data, orient="records", lines=True
    )
    return root


def _eval(root, *extra):
    ckpt = root / "run" / "checkpoints" / "step_000001"
    return ["eval", str(ckpt), "--data_path", str(root / "q.jsonl"), "--split", "train", "--max_new_tokens", "2",
            "--no-progress", *extra]  # fmt: skip


def _base(root, capsys) -> Path:
    base = root / "base.json"
    if not base.exists():
        assert _cli(_eval(root, "--output", str(base)), capsys)[0] == 0
    return base


def _files(root) -> dict:
    return {p.name: p.read_bytes() for p in sorted(root.glob("base*"))}


@pytest.mark.parametrize(
    "output",
    [
        "base.json",  # its predictions are the --paired_with file (the probe: Δ 0.0 [0, 0] after eating it)
        "base.predictions.parquet",  # the JSON itself over the --paired_with file
        "base",  # base.predictions.parquet again, from a suffix-less --output
    ],
)
def test_an_output_over_the_paired_evaluation_is_refused_before_anything_runs(run, capsys, output):
    _base(run, capsys)
    before = _files(run)
    rc, err = _cli(_eval(run, "--output", str(run / output), "--paired_with", str(run / "base.predictions.parquet")),
                   capsys)  # fmt: skip
    assert rc == 2 and "--paired_with" in err and "choose another --output" in err
    assert _files(run) == before  # the baseline whole, byte for byte


def test_an_output_through_a_symlink_or_hard_link_to_an_input_is_refused(run, capsys, tmp_path):
    base = _base(run, capsys)
    paired = base.with_name("base.predictions.parquet")
    before = _files(run)
    (tmp_path / "soft.predictions.parquet").symlink_to(paired)
    os.link(paired, tmp_path / "hard.predictions.parquet")
    config = tmp_path / "c.yaml"
    config.write_text("dataset: narrativeqa\n")
    os.link(config, tmp_path / "c.json")
    for output, named in (("soft.json", "--paired_with"), ("hard.json", "--paired_with"), ("c.json", "--config")):
        rc, err = _cli(_eval(run, "--output", str(tmp_path / output), "--paired_with", str(paired),
                             "--config", str(config)), capsys)  # fmt: skip
        assert rc == 2 and named in err, (output, err)
    assert _files(run) == before and config.read_text() == "dataset: narrativeqa\n"


def test_the_metrics_of_the_paired_evaluation_are_not_replaced(run, capsys, tmp_path):
    """--output base.json beside --paired_with base.predictions.parquet replaced its metrics and
    its predictions; a copy of the predictions elsewhere still names base.json's family."""
    base = _base(run, capsys)
    paired = tmp_path / "b.predictions.parquet"
    paired.write_bytes(base.with_name("base.predictions.parquet").read_bytes())
    (tmp_path / "b.json").write_text("{}")
    rc, err = _cli(_eval(run, "--output", str(tmp_path / "b.json"), "--paired_with", str(paired)), capsys)
    assert rc == 2 and "the metrics of the evaluation --paired_with" in err
    assert (tmp_path / "b.json").read_text() == "{}"


def test_a_missing_or_bad_paired_with_is_refused_before_the_evaluation(run, capsys, tmp_path, monkeypatch):
    import gcpo_train.evaluation.evaluate as ev

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before --paired_with was checked")

    monkeypatch.setattr(ev, "load_policy", no_model, raising=False)  # the loader before the split had another name
    out = tmp_path / "o.json"
    rc, err = _cli(_eval(run, "--output", str(out), "--paired_with", str(tmp_path / "nope.parquet")), capsys)
    assert rc == 2 and "--paired_with" in err and "nope.parquet" in err and not out.exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("query_id,score\nq0,1\nq0,2\n")
    rc, err = _cli(_eval(run, "--output", str(out), "--paired_with", str(bad)), capsys)
    assert rc == 2 and "--paired_with" in err and "row 1" in err and "'q0'" in err and not out.exists()
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("query_id,f1\nq0,1\n")
    rc, err = _cli(_eval(run, "--paired_with", str(nocol)), capsys)
    assert rc == 2 and "'score'" in err and "nocol.csv" in err


def test_pairing_two_evaluations_still_works(run, capsys, tmp_path):
    base = _base(run, capsys)
    capsys.readouterr()
    from gcpo_analysis.cli import main

    rc = main(_eval(run, "--output", str(tmp_path / "b.json"), "--paired_with",
                    str(base.with_name("base.predictions.parquet"))))  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    gain = json.loads(out[out.index('{\n  "paired_with"') :])
    assert gain["n"] == 4 and gain["diff"] == pytest.approx(0.0)  # the same checkpoint twice: Δ 0, truly


def test_eval_with_a_config_scores_its_eval_split(tmp_path, capsys):
    """gcpo eval --config C scored the test split although C says eval_split: validation."""
    folder = tmp_path / "data"
    folder.mkdir()
    for split in ("validation", "test"):
        queries(3).rename(columns={"context": "passage"}).assign(
            answers=lambda d: d["references"], id=[f"{split}{i}" for i in range(3)]
        ).to_json(folder / f"{split}.jsonl", orient="records", lines=True)
    config = tmp_path / "c.yaml"
    config.write_text(f"model: tiny:llama\ndataset: narrativeqa\ndata_path: {folder}\neval_split: validation\n")
    out = tmp_path / "o.json"
    rc, _ = _cli(["eval", "tiny:llama", "--config", str(config), "--max_new_tokens", "2", "--no-progress",
                  "--output", str(out)], capsys)  # fmt: skip
    assert rc == 0 and json.loads(out.read_text())["split"] == "validation"
    ids = pd.read_parquet(out.with_name("o.predictions.parquet"))["query_id"]
    assert all(i.startswith("narrativeqa/validation/") for i in ids)
    rc, _ = _cli(["eval", "tiny:llama", "--config", str(config), "--split", "test", "--max_new_tokens", "2",
                  "--no-progress", "--output", str(out)], capsys)  # fmt: skip
    assert rc == 0 and json.loads(out.read_text())["split"] == "test"  # a --split given wins


def test_a_run_s_own_evaluation_names_its_eval_split(tmp_path):
    """The trainer's eval/step_N.json said "test" for evaluations of its eval_split (validation)."""
    trainer = make(tmp_path, "run", steps=1, eval_every=1, eval_split="validation")
    trainer._eval_queries = queries(2)
    trainer.train()
    assert json.loads((tmp_path / "run" / "eval" / "step_000001.json").read_text())["split"] == "validation"


def test_a_failed_write_leaves_both_outputs_of_the_earlier_evaluation(run, capsys, tmp_path, monkeypatch):
    """o.json held one model's metrics and o.predictions.parquet another's after a failed write."""
    import gcpo_train.evaluation.evaluate as ev

    out = tmp_path / "o.json"
    assert _cli(_eval(run, "--output", str(out), "--n", "2"), capsys)[0] == 0
    before = out.read_bytes(), out.with_name("o.predictions.parquet").read_bytes()

    def disk_full(df, path):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(ev, "write_frame", disk_full)
    rc, err = _cli(_eval(run, "--output", str(out), "--n", "3"), capsys)
    assert rc == 2 and "No space left" in err
    assert (out.read_bytes(), out.with_name("o.predictions.parquet").read_bytes()) == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".gcpo-tmp")]


@pytest.mark.parametrize(
    "frame, said",
    [
        (pd.DataFrame({"query_id": ["q0", "q1"], "score": ["0.5", "1"]}), "row 0 (query 'q0') has score '0.5'"),
        (pd.DataFrame({"query_id": ["q0", "q1"], "score": [True, False]}), "row 0 (query 'q0') has score"),
        (pd.DataFrame({"query_id": ["q0", None], "score": [0.5, 1.0]}), "row 1 has no query_id"),
        (pd.DataFrame({"query_id": pd.Series([], dtype=str), "score": pd.Series([], dtype=float)}), "no predictions"),
    ],
)
def test_a_paired_file_of_text_scores_bools_null_ids_or_no_rows_is_refused_first(
    run, capsys, tmp_path, monkeypatch, frame, said
):
    """Text scores were made numbers and bools 1/0 (Δ printed, rc 0); a null id or an empty file
    was refused only after the whole evaluation, without naming the file."""
    import gcpo_train.evaluation.evaluate as ev

    monkeypatch.setattr(ev, "load_policy", lambda *a, **k: pytest.fail("the model was loaded first"))
    paired = tmp_path / "p.predictions.parquet"
    frame.to_parquet(paired)
    rc, err = _cli(_eval(run, "--paired_with", str(paired)), capsys)
    assert rc == 2 and "--paired_with" in err and "p.predictions.parquet" in err and said in err


@pytest.mark.parametrize("flag", ["--max_new_tokens", "--n", "--batch_size"])
def test_an_eval_count_beyond_int64_is_refused_by_its_flag(run, capsys, flag):
    """10^23 was accepted for all three; --max_new_tokens then decoded until killed."""
    argv = _eval(run)
    if flag in argv:
        argv = argv[: argv.index(flag)] + argv[argv.index(flag) + 2 :]
    rc, err = _cli([*argv, flag, str(10**23)], capsys)
    assert rc == 2 and flag in err and "64-bit integer" in err


def test_max_new_tokens_beyond_the_models_context_is_refused(run, capsys):
    argv = _eval(run)
    i = argv.index("--max_new_tokens")
    argv[i + 1] = "100000"  # the tiny model has 256 positions
    rc, err = _cli(argv, capsys)
    assert rc == 2 and "max_new_tokens (100000) exceeds the model's context" in err


ID = "narrativeqa/train/{}".format  # the query ids gcpo eval gives the rows of q.jsonl


@pytest.mark.parametrize(
    ("ids", "said"),
    [
        ([ID(0), ID(1), ID(2), "x9"], f"(not in it, e.g. ['{ID(3)}']; only in it, e.g. ['x9'])"),
        ([ID(0), ID(1)], f"(not in it, e.g. ['{ID(2)}', '{ID(3)}'])"),
        ([ID(i) for i in range(5)], f"(only in it, e.g. ['{ID(4)}'])"),
    ],
    ids=["other", "fewer", "more"],
)
def test_a_paired_file_of_other_queries_is_refused_before_the_evaluation(run, capsys, tmp_path, monkeypatch, ids, said):
    """Other query ids in --paired_with were found by paired_gain after the whole evaluation had
    run and written its outputs, in an error naming neither the flag nor the file."""
    import gcpo_train.evaluation.evaluate as ev

    monkeypatch.setattr(ev, "load_policy", lambda *a, **k: pytest.fail("the model was loaded first"))
    paired = tmp_path / "p.predictions.parquet"
    pd.DataFrame({"query_id": ids, "score": [50.0] * len(ids)}).to_parquet(paired)
    out = tmp_path / "o.json"
    rc, err = _cli(_eval(run, "--output", str(out), "--paired_with", str(paired)), capsys)
    assert rc == 2 and f"--paired_with {paired}: scores other queries than the 4" in err and said in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.predictions.parquet"]
