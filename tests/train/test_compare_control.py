"""gcpo compare control (gcpo_train.compare.control): the final policy of every finished arm-seed of a
``gcpo compare`` folder, and its base policy, evaluated with the passages removed, on the tiny
model. The independent check: given the with-passage data instead, the script reproduces each
run's own evaluation completion for completion (same checkpoint, same decoding), so what differs
on the blank data is the passage alone."""

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers.story_data import write_stories

pytest.importorskip("torch")
pytest.importorskip("peft")
pytestmark = pytest.mark.slow  # trains the tiny model once (module fixture)

from gcpo_analysis.cli import main as gcpo  # noqa: E402
from gcpo_train.compare.control import evaluate_blank  # noqa: E402


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished comparison: arm none, seed 0, 2 steps of the tiny model on 4 training questions."""
    from helpers.loop_setup import loop_config

    from gcpo_train.compare.run import Comparison
    from gcpo_train.config import TrainConfig

    root = tmp_path_factory.mktemp("nopassage")
    data = write_stories(root / "data")
    kw = loop_config(root, "unused", data_path=data, split_from_single=False, checkpoint_every=2, eval_max_new_tokens=4)
    Comparison(TrainConfig(**kw), root / "cmp", ["none"], [0], eval_n=None).run(progress=False)
    return root


def _completions(path: Path) -> list[str]:
    return pd.read_parquet(path)["completion"].tolist()


def test_the_with_passage_data_reproduces_each_runs_own_evaluation(finished, tmp_path):
    cmp = _copy(finished, tmp_path)
    paths = evaluate_blank(cmp, str(finished / "data"), progress=False)
    assert sorted(p.name for p in paths) == ["base_seed_0.json", "none_seed_0_step_2.json"]
    blank = cmp / "nopassage"
    assert _completions(blank / "none_seed_0_step_2.predictions.parquet") == _completions(
        cmp / "runs" / "none" / "seed_0" / "eval" / "step_000002.predictions.parquet"
    )
    assert _completions(blank / "base_seed_0.predictions.parquet") == _completions(
        cmp / "base" / "seed_0.predictions.parquet"
    )


def _copy(finished, tmp_path) -> Path:
    """The finished comparison without any no-passage evaluation (each test writes its own)."""
    import shutil

    cmp = tmp_path / "cmp"
    shutil.copytree(finished / "cmp", cmp, ignore=shutil.ignore_patterns("nopassage"))
    return cmp


def test_blank_passages_are_evaluated_paired_and_resumed(finished, tmp_path):
    blank_data = write_stories(tmp_path / "blank", blank=True)
    cmp = _copy(finished, tmp_path)
    assert gcpo(["compare", "control", str(cmp), blank_data, "--arms", "none", "--no_progress"]) == 0
    pred = pd.read_parquet(cmp / "nopassage" / "none_seed_0_step_2.predictions.parquet")
    run = pd.read_parquet(cmp / "runs" / "none" / "seed_0" / "eval" / "step_000002.predictions.parquet")
    assert pred["query_id"].tolist() == run["query_id"].tolist() == ["narrativeqa/test/2-0", "narrativeqa/test/2-1"]
    assert pred["completion"].tolist() != run["completion"].tolist()  # the prompt lost its passage
    record = json.loads((cmp / "nopassage" / "none_seed_0_step_2.json").read_text())
    assert record["n"] == 2 and record["decoding"] == "greedy"
    before = (cmp / "nopassage" / "none_seed_0_step_2.predictions.parquet").stat().st_mtime_ns
    evaluate_blank(cmp, blank_data, progress=False)  # a second run keeps what exists
    assert (cmp / "nopassage" / "none_seed_0_step_2.predictions.parquet").stat().st_mtime_ns == before
    # an arm that is not the comparison's is refused, with the close match
    with pytest.raises(SystemExit, match=r"'nnone' is not an arm .*\(did you mean none\?\)"):
        evaluate_blank(cmp, blank_data, ["nnone"], progress=False)


def test_blank_data_of_other_questions_is_refused_before_any_model_loads(finished, tmp_path, monkeypatch):
    import gcpo_train.compare.run as compare_run

    blank_data = write_stories(tmp_path / "blank", blank=True, drop="2-1")
    cmp = _copy(finished, tmp_path)

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the pairing was checked")

    monkeypatch.setattr(compare_run.Comparison, "base_policy", no_model)
    with pytest.raises(ValueError, match="with passage"):
        evaluate_blank(cmp, blank_data, progress=False)
    assert not (cmp / "nopassage").exists()


def test_a_folder_without_compare_json_or_checkpoint_is_named(finished, tmp_path):
    with pytest.raises(SystemExit, match="compare.json is missing"):
        evaluate_blank(tmp_path, str(finished / "data"))
    import shutil

    cmp = _copy(finished, tmp_path)
    shutil.rmtree(cmp / "runs" / "none" / "seed_0" / "checkpoints")
    with pytest.raises(SystemExit, match="step_000002 is missing"):
        evaluate_blank(cmp, str(finished / "data"))


def test_a_run_already_evaluated_needs_no_checkpoint(finished, tmp_path):
    """A folder restored from its published copy (gcpo compare publish copies no
    checkpoints) was refused for every run, though each one's no-passage evaluation was there."""
    import shutil

    cmp = _copy(finished, tmp_path)
    first = evaluate_blank(cmp, str(finished / "data"), progress=False)
    stamps = {p: p.stat().st_mtime_ns for p in first}
    shutil.rmtree(cmp / "runs" / "none" / "seed_0" / "checkpoints")
    again = evaluate_blank(cmp, str(finished / "data"), progress=False)
    assert again == first and {p: p.stat().st_mtime_ns for p in again} == stamps  # kept, not evaluated again


def test_each_evaluation_records_what_it_was_made_from_and_a_rerun_checks_it(finished, tmp_path):
    """The documented check (the with-passage data reproduces each run's evaluation) run in the
    folder itself left evaluations that a later run on the blank data kept as the no-passage
    control, silently: each JSON now records its data file and checkpoint, and a rerun that would
    make it from something else is refused naming the file and what differs."""
    import hashlib

    cmp = _copy(finished, tmp_path)
    evaluate_blank(cmp, str(finished / "data"), progress=False)
    record = json.loads((cmp / "nopassage" / "none_seed_0_step_2.json").read_text())
    checkpoint = cmp / "runs" / "none" / "seed_0" / "checkpoints" / "step_000002"
    data = record["made_from"]["data"]
    assert data["sha256"] == hashlib.sha256((finished / "data" / "test.jsonl").read_bytes()).hexdigest()
    policy = record["made_from"]["policy"]
    assert policy["step"] == 2
    assert policy["config_hash"] == json.loads((checkpoint / "state.json").read_text())["config_hash"]
    assert policy["trainable_sha256"] == hashlib.sha256((checkpoint / "trainable.pt").read_bytes()).hexdigest()
    assert record["metrics"]["n"] == 2  # the evaluation's own record, kept beside made_from
    blank_data = write_stories(tmp_path / "blank", blank=True)
    stamps = {p: p.stat().st_mtime_ns for p in (cmp / "nopassage").iterdir()}
    with pytest.raises(SystemExit, match=r"base_seed_0.json was made from something else .*data: .*test.jsonl"):
        evaluate_blank(cmp, blank_data, progress=False)
    assert {p: p.stat().st_mtime_ns for p in (cmp / "nopassage").iterdir()} == stamps  # nothing written
    # the same data, another checkpoint in the run's place (retrained): refused by its weights
    (cmp / "nopassage" / "base_seed_0.json").unlink()
    (cmp / "nopassage" / "base_seed_0.predictions.parquet").unlink()
    (checkpoint / "trainable.pt").write_bytes((checkpoint / "trainable.pt").read_bytes() + b"\0")
    with pytest.raises(SystemExit, match=r"none_seed_0_step_2.json was made from .*policy trainable_sha256"):
        evaluate_blank(cmp, str(finished / "data"), progress=False)
    assert not (cmp / "nopassage" / "base_seed_0.json").exists()  # refused before the base was evaluated


def test_an_evaluation_written_before_its_record_is_kept_with_a_warning_naming_it(finished, tmp_path):
    """The committed evaluations (and their copy resumed in runs/, without checkpoints) have no
    made_from, and their predictions hold no prompt to check: kept, each named as unverified."""
    import shutil

    cmp = _copy(finished, tmp_path)
    first = evaluate_blank(cmp, str(finished / "data"), progress=False)
    for path in first:
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "made_from"}))
    stamps = {p: p.stat().st_mtime_ns for p in (cmp / "nopassage").iterdir()}
    shutil.rmtree(cmp / "runs" / "none" / "seed_0" / "checkpoints")
    with pytest.warns(UserWarning, match=r"2 no-passage .* UNVERIFIED.*base_seed_0.json, none_seed_0_step_2.json"):
        again = evaluate_blank(cmp, str(finished / "data"), progress=False)
    assert again == first and {p: p.stat().st_mtime_ns for p in (cmp / "nopassage").iterdir()} == stamps


def test_a_checkpoint_of_another_run_is_refused_before_any_model_loads(finished, tmp_path):
    """Another arm's checkpoint in none's folder was evaluated and reported as none's; it is refused
    as a resume refuses it (``checkpoint.check_compatible``), the differing key named."""
    cmp = _copy(finished, tmp_path)
    checkpoint = cmp / "runs" / "none" / "seed_0" / "checkpoints" / "step_000002"
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "modulator": "bot_rd"}))
    state = json.loads((checkpoint / "state.json").read_text())
    (checkpoint / "state.json").write_text(json.dumps({**state, "config_hash": "0" * 16}))
    with pytest.raises(SystemExit, match=r"step_000002 was written with another configuration; .*modulator: "):
        evaluate_blank(cmp, str(finished / "data"), progress=False)
    assert not (cmp / "nopassage").exists()


@pytest.mark.parametrize(
    "rel, spoil, message",
    [
        ("compare.json", lambda t: t[:40], r"compare.json is not a readable comparison record"),
        ("compare.json", lambda t: _drop(t, "eval_n"), r"compare.json: field\(s\) eval_n missing"),
        ("compare.json", lambda t: json.dumps({**json.loads(t), "eval_n": "two"}), r"compare.json: .*eval_n"),
        ("runs/none/seed_0/done.json", lambda t: t[:10], r"seed_0/done.json is not a readable run record"),
        ("runs/none/seed_0/done.json", lambda t: _drop(t, "arm"), r"seed_0/done.json: field 'arm' is missing"),
        ("runs/none/seed_0/done.json", lambda t: json.dumps({**json.loads(t), "steps": "two"}), r"'steps' must be"),
        ("runs/none/seed_0/done.json", lambda t: json.dumps({**json.loads(t), "arm": "bot_rd"}), r"'bot_rd' is not"),
    ],
)
def test_a_bad_compare_or_done_record_is_named(finished, tmp_path, rel, spoil, message):
    """A truncated or hand-edited record gave a JSONDecodeError, a KeyError or int('two') naming no file."""
    cmp = _copy(finished, tmp_path)
    (cmp / rel).write_text(spoil((cmp / rel).read_text()))
    with pytest.raises(SystemExit, match=message):
        evaluate_blank(cmp, str(finished / "data"), progress=False)
    assert not (cmp / "nopassage").exists()


def _drop(text: str, key: str) -> str:
    return json.dumps({k: v for k, v in json.loads(text).items() if k != key})


def test_a_copy_of_a_finished_run_beside_it_is_refused(finished, tmp_path):
    """runs/none/seed_0.bak (a backup, with its done.json) was evaluated as seed 0 a second time."""
    import shutil

    cmp = _copy(finished, tmp_path)
    shutil.copytree(cmp / "runs" / "none" / "seed_0", cmp / "runs" / "none" / "seed_0.bak")
    with pytest.raises(SystemExit, match=r"seed_0.bak/done.json records arm 'none' seed 0, whose run is .*seed_0, not"):
        evaluate_blank(cmp, str(finished / "data"), progress=False)
