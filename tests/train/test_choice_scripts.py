"""scripts/choice_as_qa.py (a multiple-choice record as a QA record) and scripts/choice_gate.py
(the learning gate against the base policy and against "always the k-th option"), on
hand-made records whose scores are worked out by hand."""

import json
import runpy
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
AS_QA = runpy.run_path(str(ROOT / "scripts" / "choice_as_qa.py"))
GATE = runpy.run_path(str(ROOT / "scripts" / "choice_gate.py"))


def test_a_record_becomes_qa_with_its_options_in_the_question():
    rec = {"passage": "Ann lost her keys.", "question": "How does Ann feel?", "options": "A. happy\nB. upset\nC. tall"}
    qa = AS_QA["as_qa"]({**rec, "answer": "B. upset"}, "f line 1")
    assert qa["answer"] == ["upset"] and qa["position"] == 1 and qa["passage"] == "Ann lost her keys."
    assert qa["question"] == "How does Ann feel?\nOptions:\n- happy\n- upset\n- tall"
    assert GATE["options_of"](qa["question"]) == ["happy", "upset", "tall"]


@pytest.mark.parametrize(
    "options, answer, match",
    [("A. x\nB. y", "C. z", "names none of the options"), ("x\ny", "A. x", "are not lines"), ("A. x", "A. x", "not")],
)
def test_malformed_records_are_refused_by_line(options, answer, match):
    with pytest.raises(SystemExit, match=f"f line 7: .*{match}"):
        AS_QA["as_qa"]({"question": "q", "options": options, "answer": answer}, "f line 7")


def test_the_gate_by_hand(tmp_path):
    recs = [
        {"question": "q0\nOptions:\n- red apple\n- blue car", "passage": "p", "answer": ["red apple"]},
        {"question": "q1\nOptions:\n- red apple\n- blue car", "passage": "p", "answer": ["blue car"]},
        {"question": "q2\nOptions:\n- green tree\n- old house", "passage": "p", "answer": ["old house"]},
        {"question": "q3\nOptions:\n- green tree\n- old house", "passage": "p", "answer": ["old house"]},
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    from gcpo_analysis.data import load_queries

    ids = list(load_queries("narrativeqa", path=str(data), split="test")["query_id"])
    refs = [r["answer"] for r in recs]

    def preds(name, answers, scores):
        path = tmp_path / f"{name}.parquet"
        frame = {"query_id": ids, "answer": answers, "score": scores, "references": refs}
        pd.DataFrame(frame).to_parquet(path)
        return path

    base = preds("base", ["I think so", "no", "a tree", "no idea"], [0.0, 0.0, 0.0, 0.0])
    trained = preds("trained", ["Red apple.", "blue car", "old house", "green tree"], [100.0, 100.0, 100.0, 0.0])
    row = GATE["gate"](str(data), str(trained), pd.read_parquet(base))
    # always option 0: 100, 0, 0, 0 -> 25; always option 1: 0, 100, 100, 100 -> 75 (the best)
    assert row["F1 always #0"] == pytest.approx(25.0) and row["F1 always #1"] == pytest.approx(75.0)
    assert row["F1"] == pytest.approx(75.0) and row["Acc"] == pytest.approx(75.0)
    assert row["copies option"] == "0:50% 1:50%"
    assert row["Δ vs best constant"] == pytest.approx(0.0) and row["Δ vs base"] == pytest.approx(75.0)
    first = GATE["gate"](str(data), str(base), None)
    assert first["copies option"] == "other:100%" and "Δ vs base" not in first
