"""The gate scripts on hostile command lines and folders: choice_gate.py and span_gate.py refuse an
--output that is one of their inputs (it replaced a predictions file with a markdown table, or the
data); their --compare tables read only finished runs (done.json), name the runs left out in a
warning and show each row's step; choice_gate.py gives a usage error for a mode flag without its
operands (IndexError and "not enough values to unpack" before) and names the file of a query
scored twice (blamed on the "base frame" before)."""

import json
import os
import runpy
import warnings
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHOICE = runpy.run_path(str(ROOT / "gcpo_train" / "pilots" / "choice_gate.py"))
SPAN = runpy.run_path(str(ROOT / "gcpo_train" / "pilots" / "span_gate.py"))
OPTS = ["red apple", "blue car", "old house"]


@pytest.fixture
def choice(tmp_path):
    """(data file, writer of predictions files on its four queries: write(path, answers, scores))."""
    from gcpo_analysis.data import load_queries

    recs = [
        {"question": f"q{k}\nOptions:\n" + "\n".join(f"- {o}" for o in OPTS), "passage": "p", "answer": [OPTS[k % 3]]}
        for k in range(4)
    ]
    data = tmp_path / "test.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ids = list(load_queries("narrativeqa", path=str(data), split="test")["query_id"])

    def write(path, answers=("x",) * 4, scores=(0.0,) * 4, qids=None):
        path.parent.mkdir(parents=True, exist_ok=True)
        qids = ids if qids is None else qids
        refs = [[OPTS[ids.index(q) % 3]] for q in qids]
        pd.DataFrame({"query_id": qids, "answer": list(answers), "score": list(scores), "references": refs}).to_parquet(
            path
        )
        return str(path)

    return str(data), write


def _trained(write, path):
    return write(path, [OPTS[0], OPTS[1], "x", "x"], [100.0, 100.0, 0.0, 0.0])


# ------------------------------------------------------------------ --output over an input
@pytest.mark.parametrize("victim", ["trained", "data", "base", "hard link to the data", "symlink to trained"])
@pytest.mark.parametrize("mode", ["files", "--table"])
def test_choice_gate_output_over_an_input_is_refused_and_the_input_kept(tmp_path, choice, victim, mode):
    data, write = choice
    base, trained = (
        write(tmp_path / "base.predictions.parquet"),
        _trained(write, tmp_path / "trained.predictions.parquet"),
    )
    target = {"trained": trained, "data": data, "base": base}.get(victim, str(tmp_path / "alias"))
    if victim.startswith("hard link"):
        os.link(data, target)
    elif victim.startswith("symlink"):
        os.symlink(trained, target)
    before = {p: Path(p).read_bytes() for p in (data, base, trained)}
    args = [data, base, trained] if mode == "files" else [data, "--table", base, trained]
    with pytest.raises(SystemExit, match=r"--output .* is the input file .*; choose another --output"):
        CHOICE["command"]([*args, "--output", target])
    assert {p: Path(p).read_bytes() for p in before} == before


def test_choice_gate_curve_output_or_figure_over_an_input_is_refused(tmp_path, choice):
    data, write = choice
    base, run = write(tmp_path / "base.predictions.parquet"), _trained(write, tmp_path / "run_2.predictions.parquet")
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"step": k, "reward_mean": 1.0, "kl": 0.0}) + "\n" for k in (1, 2)))
    curve = [data, "--curve", str(log), base, run]
    with pytest.raises(SystemExit, match=r"--output .*log.jsonl is the input file"):
        CHOICE["command"]([*curve, "--output", str(log)])
    shot = tmp_path / "shot.png"  # an image given as the "other run" is no input a figure may replace
    shot.write_bytes(b"png")
    with pytest.raises(SystemExit, match=r"--figure .*shot.png is the input file"):
        CHOICE["command"]([*curve, "--versus", str(shot), "--figure", str(tmp_path / "shot")])
    assert shot.read_bytes() == b"png"


def test_choice_gate_compare_output_over_a_runs_predictions_is_refused_but_gate_md_is_written(tmp_path, choice):
    data, write = choice
    cmp = tmp_path / "cmp"
    write(cmp / "base/all_seeds.predictions.parquet")
    run = _trained(write, cmp / "runs/none/seed_0/eval/step_000002.predictions.parquet")
    (cmp / "runs/none/seed_0/done.json").write_text("{}")
    before = Path(run).read_bytes()
    for target in (run, str(cmp / "base/all_seeds.predictions.parquet")):
        with pytest.raises(SystemExit, match="is the input file"):
            CHOICE["command"]([data, "--compare", str(cmp), "--output", target])
    assert Path(run).read_bytes() == before
    assert CHOICE["command"]([data, "--compare", str(cmp), "--output", str(cmp / "gate.md")]) == 0  # its usual place
    assert (cmp / "gate.md").read_text().startswith("| arm | seed | step |")


def _spans(tmp_path):
    data = tmp_path / "spans"
    data.mkdir()
    recs = [{"id": f"q{k}", "question": "Who sat?", "passage": "red cat sat", "answer": ["cat"]} for k in range(3)]
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    def write(path, score=100.0):
        path.parent.mkdir(parents=True, exist_ok=True)
        qids = [f"narrativeqa/test/q{k}" for k in range(3)]
        frame = {"query_id": qids, "answer": ["cat"] * 3, "score": [score] * 3, "references": [["cat"]] * 3}
        pd.DataFrame(frame).to_parquet(path)
        return str(path)

    return data, write


@pytest.mark.parametrize("victim", ["trained", "base_np", "data"])
def test_span_gate_output_over_an_input_is_refused_and_the_input_kept(tmp_path, victim):
    data, write = _spans(tmp_path)
    paths = {n: write(tmp_path / f"{n}.predictions.parquet") for n in ("base", "base_np", "trained")}
    paths["data"] = str(data / "test.jsonl")
    before = Path(paths[victim]).read_bytes()
    args = [str(data), f"{paths['base']},{paths['base_np']}", paths["trained"], "--output", paths[victim]]
    with pytest.raises(SystemExit, match=r"--output .* is the input (predictions|data) .*; choose another --output"):
        SPAN["command"](args)
    assert Path(paths[victim]).read_bytes() == before


# ------------------------------------------------------------------ --compare: finished runs only
def test_choice_gate_compare_leaves_out_a_run_still_training_and_shows_the_step(tmp_path, choice):
    data, write = choice
    cmp = tmp_path / "cmp"
    write(cmp / "base/all_seeds.predictions.parquet")
    _trained(write, cmp / "runs/none/seed_0/eval/step_000002.predictions.parquet")
    (cmp / "runs/none/seed_0/done.json").write_text(json.dumps({"arm": "none", "seed": 0, "steps": 2}))
    write(cmp / "runs/bot_rd/seed_0/eval/step_000001.predictions.parquet")  # no done.json: still training
    with pytest.warns(UserWarning, match=r"left out .*done.json.*: bot_rd/seed_0 \(evaluated to step 1\)"):
        table = CHOICE["compare_table"](data, str(cmp)).splitlines()
    assert table[0].startswith("| arm | seed | step | F1 |")
    rows = [[cell.strip() for cell in line.split("|")[1:4]] for line in table[2:]]
    assert rows == [["none", "0", "2"], ["base policy", "", "0"]]  # bot_rd's step 1 stands nowhere
    (cmp / "runs/none/seed_0/done.json").unlink()
    with pytest.warns(UserWarning), pytest.raises(SystemExit, match="no finished, evaluated run"):
        CHOICE["compare_table"](data, str(cmp))


def test_span_gate_compare_leaves_out_a_run_still_training(tmp_path):
    _, write = _spans(tmp_path)
    cmp = tmp_path / "cmp"
    write(cmp / "base/all_seeds.predictions.parquet")
    write(cmp / "runs/none/seed_0/eval/step_000002.predictions.parquet")
    (cmp / "runs/none/seed_0/done.json").write_text("{}")
    write(cmp / "runs/bot_rd/seed_1/eval/step_000001.predictions.parquet")
    with pytest.warns(UserWarning, match=r"bot_rd/seed_1 \(evaluated to step 1\)"):
        _, policies = SPAN["compare_policies"](str(cmp))
    assert [p[0] for p in policies] == ["none seed 0 step 2"]
    with warnings.catch_warnings():  # every run finished: no warning
        warnings.simplefilter("error")
        (cmp / "runs/bot_rd/seed_1/done.json").write_text("{}")
        assert [p[0] for p in SPAN["compare_policies"](str(cmp))[1]] == ["none seed 0 step 2", "bot_rd seed 1 step 1"]


# ------------------------------------------------------------------ choice_gate's command line
@pytest.mark.parametrize(
    "args, says",
    [
        (["x.jsonl", "--compare"], "--compare: expected one argument"),
        (["x.jsonl", "--table"], "--table: expected at least one argument"),
        (["x.jsonl", "--curve"], "--curve: expected at least one argument"),
        (["x.jsonl", "--curve", "log.jsonl"], "--curve needs LOG BASE"),
        (["x.jsonl"], "give predictions files"),
        (["x.jsonl", "a.parquet", "--table", "b.parquet"], "--table takes no other predictions files"),
        (["x.jsonl", "a.parquet", "--figure", "f"], "--versus and --figure go with --curve"),
        (["x.jsonl", "--table", "a", "--compare", "f"], "not allowed with argument"),
    ],
)
def test_choice_gate_mode_flags_without_their_operands_are_usage_errors(args, says, capsys):
    with pytest.raises(SystemExit) as err:
        CHOICE["command"](args)
    assert err.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("usage: ") and says in stderr


def test_choice_gate_a_query_scored_twice_names_its_file(tmp_path, choice):
    data, write = choice
    base = write(tmp_path / "base.predictions.parquet")
    ids = list(pd.read_parquet(base)["query_id"])
    dup = write(tmp_path / "dup.predictions.parquet", ["x"] * 5, [0.0] * 5, ids + ids[:1])
    with pytest.raises(SystemExit, match=rf"^{dup}: row 4 scores query '{ids[0]}' a second time"):
        CHOICE["command"]([data, "--table", base, dup])


def test_choice_gate_compare_refuses_seed_00_and_orders_seeds_by_number(tmp_path):
    """compare_runs took seed_00 as a second seed 0, and sorted seed 10 before seed 2."""
    gate = runpy.run_path(str(Path(__file__).resolve().parents[2] / "gcpo_train" / "pilots" / "choice_gate.py"))
    for seed in ("0", "2", "10"):
        run = tmp_path / "runs" / "none" / f"seed_{seed}"
        (run / "eval").mkdir(parents=True)
        (run / "done.json").write_text("{}")
        (run / "eval" / "step_000002.predictions.parquet").write_bytes(b"")
    assert [r[1] for r in gate["compare_runs"](str(tmp_path))] == ["0", "2", "10"]
    (tmp_path / "runs" / "none" / "seed_00").mkdir()
    with pytest.raises(SystemExit, match=r"seed_00: not a run of the comparison"):
        gate["compare_runs"](str(tmp_path))
