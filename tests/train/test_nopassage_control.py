"""scripts/nopassage_control.py (issue 35): the final policy of every finished arm-seed of a
``gcpo compare`` folder, and its base policy, evaluated with the passages removed, on the tiny
model. The independent check: given the with-passage data instead, the script reproduces each
run's own evaluation completion for completion (same checkpoint, same decoding), so what differs
on the blank data is the passage alone."""

import json
import runpy
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytestmark = pytest.mark.slow  # trains the tiny model once (module fixture)

SCRIPT = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "nopassage_control.py"))
STORIES = [
    ("s0", "the king had a son . the ship was in the city . the queen sang ."),
    ("s1", "a war began in the north . the father of the boy was a sailor ."),
    ("s2", "the house stood by the river . a dog slept under the old tree ."),
]


def _write(folder: Path, blank: bool = False, drop: str | None = None) -> str:
    folder.mkdir()
    rows = {"train": [], "test": []}
    for i, (story, passage) in enumerate(STORIES):
        for j, (question, answer) in enumerate((("who had a son ?", "the king"), ("where was it ?", "the city"))):
            split = "test" if i == 2 else "train"
            qid = f"{i}-{j}"
            if qid != drop:
                text = "(no passage)" if blank else passage
                rows[split].append(dict(id=qid, question=question, passage=text, answer=answer, story=story))
    for split, items in rows.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    return str(folder)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished comparison: arm none, seed 0, 2 steps of the tiny model on 4 training questions."""
    from helpers.loop_setup import loop_config

    from gcpo_train.compare.run import Comparison
    from gcpo_train.config import TrainConfig

    root = tmp_path_factory.mktemp("nopassage")
    data = _write(root / "data")
    kw = loop_config(root, "unused", data_path=data, split_from_single=False, checkpoint_every=2, eval_max_new_tokens=4)
    Comparison(TrainConfig(**kw), root / "cmp", ["none"], [0], eval_n=None).run(progress=False)
    return root


def _completions(path: Path) -> list[str]:
    return pd.read_parquet(path)["completion"].tolist()


def test_the_with_passage_data_reproduces_each_runs_own_evaluation(finished, tmp_path):
    cmp = _copy(finished, tmp_path)
    paths = SCRIPT["evaluate_blank"](cmp, str(finished / "data"), progress=False)
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
    blank_data = _write(tmp_path / "blank", blank=True)
    cmp = _copy(finished, tmp_path)
    SCRIPT["main"]([str(cmp), blank_data, "--arms", "none", "--no_progress"])
    pred = pd.read_parquet(cmp / "nopassage" / "none_seed_0_step_2.predictions.parquet")
    run = pd.read_parquet(cmp / "runs" / "none" / "seed_0" / "eval" / "step_000002.predictions.parquet")
    assert pred["query_id"].tolist() == run["query_id"].tolist() == ["narrativeqa/test/2-0", "narrativeqa/test/2-1"]
    assert pred["completion"].tolist() != run["completion"].tolist()  # the prompt lost its passage
    record = json.loads((cmp / "nopassage" / "none_seed_0_step_2.json").read_text())
    assert record["n"] == 2 and record["decoding"] == "greedy"
    before = (cmp / "nopassage" / "none_seed_0_step_2.predictions.parquet").stat().st_mtime_ns
    SCRIPT["evaluate_blank"](cmp, blank_data, progress=False)  # a second run keeps what exists
    assert (cmp / "nopassage" / "none_seed_0_step_2.predictions.parquet").stat().st_mtime_ns == before
    # an arm that is not the comparison's is refused, with the close match
    with pytest.raises(SystemExit, match=r"'nnone' is not an arm .*\(did you mean none\?\)"):
        SCRIPT["evaluate_blank"](cmp, blank_data, ["nnone"], progress=False)


def test_blank_data_of_other_questions_is_refused_before_any_model_loads(finished, tmp_path, monkeypatch):
    import gcpo_train.compare.run as compare_run

    blank_data = _write(tmp_path / "blank", blank=True, drop="2-1")
    cmp = _copy(finished, tmp_path)

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the pairing was checked")

    monkeypatch.setattr(compare_run.Comparison, "base_policy", no_model)
    with pytest.raises(ValueError, match="with passage"):
        SCRIPT["evaluate_blank"](cmp, blank_data, progress=False)
    assert not (cmp / "nopassage").exists()


def test_a_folder_without_compare_json_or_checkpoint_is_named(finished, tmp_path):
    with pytest.raises(SystemExit, match="compare.json is missing"):
        SCRIPT["evaluate_blank"](tmp_path, str(finished / "data"))
    import shutil

    cmp = _copy(finished, tmp_path)
    shutil.rmtree(cmp / "runs" / "none" / "seed_0" / "checkpoints")
    with pytest.raises(SystemExit, match="step_000002 is missing"):
        SCRIPT["evaluate_blank"](cmp, str(finished / "data"))


def test_a_run_already_evaluated_needs_no_checkpoint(finished, tmp_path):
    """A folder restored from its published copy (scripts/publish_comparison.py copies no
    checkpoints) was refused for every run, though each one's no-passage evaluation was there."""
    import shutil

    cmp = _copy(finished, tmp_path)
    first = SCRIPT["evaluate_blank"](cmp, str(finished / "data"), progress=False)
    stamps = {p: p.stat().st_mtime_ns for p in first}
    shutil.rmtree(cmp / "runs" / "none" / "seed_0" / "checkpoints")
    again = SCRIPT["evaluate_blank"](cmp, str(finished / "data"), progress=False)
    assert again == first and {p: p.stat().st_mtime_ns for p in again} == stamps  # kept, not evaluated again
