"""The learning gate on a multiple-choice benchmark written as QA (``scripts/choice_as_qa.py``;
issue 25's pilot log). For each ``gcpo eval`` predictions file: token-F1 and accuracy (F1 > 0.5,
the qa_f1 task's), which option the answers copy (exactly, after SQuAD normalisation), the F1
of "always the k-th option" for each k (a policy that learned the format but reads nothing),
and two paired differences with 95% bootstrap CIs over queries (``heldout.paired_gain``):
against the base policy (the gate as the issue writes it) and against the best constant option
(the gate a policy that reads must also pass).

    python scripts/choice_gate.py runs/siqa/test.jsonl base.predictions.parquet trained.predictions.parquet
"""

from __future__ import annotations

import sys

import pandas as pd

from gcpo_analysis.data import load_queries
from gcpo_analysis.rewards import normalize_answer, token_f1
from gcpo_train.heldout import paired_gain


def options_of(question: str) -> list[str]:
    """The options that choice_as_qa.py wrote under "Options:", one "- text" per line."""
    head, sep, tail = question.rpartition("\nOptions:\n")
    if not sep:
        raise ValueError(f"question {question[:60]!r} has no 'Options:' block (not written by choice_as_qa.py)")
    return [line[2:] for line in tail.splitlines() if line.startswith("- ")]


def chosen(answer: str, options: list[str]) -> str:
    """The option (its position, from 0) that the answer copies, or 'other'."""
    norm = normalize_answer(answer or "")
    hits = [k for k, o in enumerate(options) if normalize_answer(o) == norm]
    return str(hits[0]) if hits else "other"


def gate(data: str, path: str, base: pd.DataFrame | None) -> dict:
    preds = pd.read_parquet(path)
    questions = load_queries("narrativeqa", path=data, split="test").set_index("query_id")["question"]
    options = preds["query_id"].map(lambda q: options_of(questions[q]))
    refs = preds["references"].map(list)
    width = int(options.map(len).max())
    constants = {
        k: preds[["query_id"]].assign(
            score=[100 * token_f1(o[k], r) if k < len(o) else 0.0 for o, r in zip(options, refs, strict=True)]
        )
        for k in range(width)
    }
    best = max(constants, key=lambda k: constants[k]["score"].mean())
    picks = pd.Series([chosen(a, o) for a, o in zip(preds["answer"], options, strict=True)]).value_counts(
        normalize=True
    )
    row = {
        "file": path,
        "n": len(preds),
        "F1": float(preds["score"].mean()),
        "Acc": 100 * float((preds["score"] > 50).mean()),
        "copies option": " ".join(f"{k}:{v:.0%}" for k, v in picks.sort_index().items()),
        **{f"F1 always #{k}": float(c["score"].mean()) for k, c in constants.items()},
    }
    vs_best = paired_gain(constants[best], preds)
    row.update({"Δ vs best constant": vs_best["diff"], "CI": f"[{vs_best['ci_low']:+.1f}, {vs_best['ci_high']:+.1f}]"})
    if base is not None:
        vs_base = paired_gain(base, preds)
        row.update({"Δ vs base": vs_base["diff"], "CI base": f"[{vs_base['ci_low']:+.1f}, {vs_base['ci_high']:+.1f}]"})
    return row


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    data, first, *rest = sys.argv[1:]
    base = pd.read_parquet(first)
    rows = [gate(data, first, None)] + [gate(data, p, base) for p in rest]
    print(pd.DataFrame(rows).round(2).T.to_string(header=False))
