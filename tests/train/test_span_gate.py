"""gcpo_train.pilots.span_gate: the reading task's gate, its length-matched random-span baseline and the
passage effect, on hand-made queries whose scores are worked out by hand."""

import json
import re
import runpy
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
GATE = runpy.run_path(str(ROOT / "gcpo_train" / "pilots" / "span_gate.py"))


def test_random_span_by_hand():
    f = GATE["random_span_f1"]
    # spans "red", "cat", "sat": F1 0, 1, 0
    assert f("red cat sat", ["cat"], 1) == pytest.approx(100 / 3)
    # "red cat" and "cat sat": precision 1/2, recall 1, F1 2/3 each
    assert f("red cat sat", ["cat"], 2) == pytest.approx(200 / 3)
    # longer than the passage: the whole passage, precision 1/3, F1 1/2; the best reference counts
    assert f("red cat sat", ["dog", "cat"], 9) == pytest.approx(50.0)
    assert f("red cat sat", ["cat"], 0) == 0.0 and f("", ["cat"], 2) == 0.0


def test_copies_passage_needs_whole_words():
    assert GATE["copies_passage"]("The Cat.", "A red cat sat.")
    assert not GATE["copies_passage"]("ca", "A red cat sat.")
    assert not GATE["copies_passage"]("", "A red cat sat.")


def _write(tmp_path, name, answers, scores):
    ids = ["narrativeqa/test/q0", "narrativeqa/test/q1"]
    refs = [["cat"], ["blue sky"]]
    path = tmp_path / f"{name}.predictions.parquet"
    pd.DataFrame({"query_id": ids, "answer": answers, "score": scores, "references": refs}).to_parquet(path)
    return str(path)


def test_the_table_by_hand(tmp_path):
    data = tmp_path / "spans"
    data.mkdir()
    recs = [
        {"id": "q0", "question": "Who sat?", "passage": "red cat sat", "answer": ["cat"]},
        {"id": "q1", "question": "What was blue?", "passage": "blue sky over hills", "answer": ["blue sky"]},
    ]
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    base = _write(tmp_path, "base", ["red cat sat", "no idea"], [50.0, 0.0])
    base_np = _write(tmp_path, "base_np", ["dog", "no idea"], [0.0, 0.0])
    trained = _write(tmp_path, "trained", ["cat", "blue sky"], [100.0, 100.0])
    trained_np = _write(tmp_path, "trained_np", ["cat", "grey"], [100.0, 0.0])
    out = GATE["table"](str(data), (base, base_np), [("trained", trained, trained_np)])
    lines = out.splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]]
    b, t = rows
    # base: "red cat sat" is the whole passage (50 by hand); "no idea" copies nothing.
    # random spans of 3 and 2 words: 50 (whole passage) and ("blue sky" 1, "sky over" 1/2, "over hills" 0) -> 50
    assert (b["F1"], b["copies passage"], b["F1 random span"], b["Δ vs random span"]) == (
        "25.0",
        "50.0",
        "50.0",
        "−25.0 [−50.0, +0.0]",
    )
    assert (b["F1 without passage"], b["passage effect"]) == ("0.0", "+25.0 [+0.0, +50.0]")
    # trained: random spans of 1 and 2 words: 100/3 and 50 -> mean 41.7; Δ vs base +75
    assert (t["F1"], t["words"], t["copies passage"], t["F1 random span"]) == ("100.0", "1.5", "100.0", "41.7")
    assert t["Δ vs base"].startswith("+75.0 [+50.0, +100.0]")
    # passage effect 0 and 100 -> +50; the base's 50 and 0 -> reading gain per query -50, +100 -> +25
    assert t["passage effect"] == "+50.0 [+0.0, +100.0]" and t["reading gain"] == "+25.0 [−50.0, +100.0]"


def test_predictions_on_other_queries_are_refused(tmp_path):
    data = tmp_path / "spans"
    data.mkdir()
    (data / "test.jsonl").write_text(json.dumps({"id": "x", "question": "q", "passage": "p", "answer": ["a"]}) + "\n")
    with pytest.raises(SystemExit, match="not in the data's test split"):
        GATE["table"](str(data), (_write(tmp_path, "base", ["a", "b"], [0.0, 0.0]), None), [])


def test_a_compare_folder_gives_each_arm_seeds_last_evaluation(tmp_path):
    root = tmp_path / "cmp"
    for rel in [
        "base/all_seeds",
        "runs/none/seed_0/eval/step_000020",
        "runs/none/seed_0/eval/step_000040",
        "runs/none/seed_10/eval/step_000040",
        "runs/bot_rd/seed_2/eval/step_000040",
        "nopassage/base",
        "nopassage/none_seed_0_step_40",
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{rel}.predictions.parquet").write_bytes(b"")
    for run in ("none/seed_0", "none/seed_10", "bot_rd/seed_2"):
        (root / "runs" / run / "done.json").write_text("{}")
    (root / "runs/none/seed_3").mkdir()  # a run not yet evaluated (nor finished) has no row
    with pytest.warns(UserWarning, match=r"none/seed_3 \(not evaluated yet\)"):
        base, policies = GATE["compare_policies"](str(root))
    assert base == (str(root / "base/all_seeds.predictions.parquet"), str(root / "nopassage/base.predictions.parquet"))
    ev = root / "runs"
    assert policies == [
        (
            "none seed 0 step 40",
            str(ev / "none/seed_0/eval/step_000040.predictions.parquet"),
            str(root / "nopassage/none_seed_0_step_40.predictions.parquet"),
        ),
        ("none seed 10 step 40", str(ev / "none/seed_10/eval/step_000040.predictions.parquet"), None),
        ("bot_rd seed 2 step 40", str(ev / "bot_rd/seed_2/eval/step_000040.predictions.parquet"), None),
    ]
    with pytest.raises(SystemExit, match="is missing"):
        GATE["compare_policies"](str(tmp_path / "nothing"))


def _three(tmp_path):
    """A data folder of three queries and a writer of predictions files on (some of) them."""
    data = tmp_path / "spans"
    data.mkdir()
    recs = [{"id": f"q{k}", "question": "Who sat?", "passage": "red cat sat", "answer": ["cat"]} for k in range(3)]
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    def write(name, ids=(0, 1, 2), refs=None):
        path = tmp_path / f"{name}.predictions.parquet"
        qids = [f"narrativeqa/test/q{k}" for k in ids]
        pd.DataFrame(
            {
                "query_id": qids,
                "answer": ["cat"] * len(qids),
                "score": [100.0] * len(qids),
                "references": refs or [["cat"]] * len(qids),
            }
        ).to_parquet(path)
        return str(path)

    return str(data), write


@pytest.mark.parametrize("which", ["trained", "trained_np", "base", "base_np"])
def test_a_query_scored_twice_is_named_with_its_file(tmp_path, which):
    """It was reported as the "base frame" whichever file held it (the length-matched random span,
    built from a trained file, is paired_gain's base), and without the file."""
    data, write = _three(tmp_path)
    paths = {name: write(name, ids=(0, 1, 1) if name == which else (0, 1, 2)) for name in ("base", "base_np")}
    paths |= {name: write(name, ids=(0, 1, 2, 1) if name == which else (0, 1, 2)) for name in ("trained", "trained_np")}
    with pytest.raises(SystemExit) as err:
        GATE["command"]([data, f"{paths['base']},{paths['base_np']}", f"{paths['trained']},{paths['trained_np']}"])
    msg = str(err.value.code)
    assert msg.startswith(f"{paths[which]}: ") and "'narrativeqa/test/q1'" in msg and "more than once" in msg
    assert "base frame" not in msg


@pytest.mark.parametrize("which", ["trained", "trained_np", "base_np"])
@pytest.mark.parametrize("ids", [(0, 2), (0, 1), (0,)])
def test_a_file_missing_a_query_is_named_with_the_query(tmp_path, which, ids):
    data, write = _three(tmp_path)
    base = write("base")
    paths = {
        name: write(name, ids=ids if name == which else (0, 1, 2)) for name in ("base_np", "trained", "trained_np")
    }
    with pytest.raises(SystemExit) as err:
        GATE["command"]([data, f"{base},{paths['base_np']}", f"{paths['trained']},{paths['trained_np']}"])
    msg = str(err.value.code)
    missing = min(set(range(3)) - set(ids))
    assert msg.startswith(f"{paths[which]}: lacks") and f"'narrativeqa/test/q{missing}'" in msg and base in msg


def test_a_file_scoring_queries_the_base_does_not_is_named(tmp_path):
    data, write = _three(tmp_path)
    base, trained = write("base", ids=(0, 1)), write("trained")
    with pytest.raises(SystemExit) as err:
        GATE["command"]([data, base, trained])
    msg = str(err.value.code)
    assert msg.startswith(f"{trained}: ") and "'narrativeqa/test/q2'" in msg and base in msg


def test_empty_references_are_named_with_the_file_and_query(tmp_path):
    data, write = _three(tmp_path)
    base = write("base")
    trained = write("trained", refs=[["cat"], [], ["cat"]])
    with pytest.raises(
        SystemExit, match=re.escape(trained) + r": .*references.* at row 1 \(query_id='narrativeqa/test/q1'\)"
    ):
        GATE["command"]([data, base, trained])


@pytest.mark.parametrize(
    "name, folder",
    [
        ("seed_old", True),
        ("seed_9.txt", False),
        ("seed_", True),
        ("seed_1", False),
        ("seed_00", True),
        ("seed_01", True),
    ],
)
def test_a_compare_folder_entry_that_is_not_a_seed_folder_is_refused(tmp_path, name, folder):
    root = tmp_path / "cmp"
    for rel in ["base/all_seeds", "runs/none/seed_0/eval/step_000040"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{rel}.predictions.parquet").write_bytes(b"")
    odd = root / "runs" / "none" / name
    odd.mkdir() if folder else odd.write_text("notes")
    with pytest.raises(SystemExit, match=re.escape(str(odd)) + ".*seed_<digits>"):
        GATE["compare_policies"](str(root))


@pytest.mark.parametrize("name", ["step_best", "step_40", "step_0000040"])
def test_a_compare_folder_evaluation_not_named_by_its_step_is_refused(tmp_path, name):
    # gcpo compare writes step_NNNNNN and reads nothing else; the gate must read the same files
    root = tmp_path / "cmp"
    for rel in ["base/all_seeds", "runs/none/seed_0/eval/step_000040", f"runs/none/seed_0/eval/{name}"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{rel}.predictions.parquet").write_bytes(b"")
    odd = root / f"runs/none/seed_0/eval/{name}.predictions.parquet"
    with pytest.raises(SystemExit, match=re.escape(str(odd)) + ".*step_NNNNNN"):
        GATE["compare_policies"](str(root))


def test_a_compare_folders_hidden_temporaries_are_not_runs(tmp_path):
    root = tmp_path / "cmp"
    for rel in ["base/all_seeds", "runs/none/seed_0/eval/step_000040"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{rel}.predictions.parquet").write_bytes(b"")
    (root / "runs/none/seed_0/done.json").write_text("{}")
    (root / "runs/none/.seed_1.x1y2.gcpo-tmp").mkdir()
    _, policies = GATE["compare_policies"](str(root))
    assert [p[0] for p in policies] == ["none seed 0 step 40"]
