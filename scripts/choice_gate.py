"""The learning gate on a multiple-choice benchmark written as QA (``scripts/choice_as_qa.py``;
issue 25's pilot log). For each ``gcpo eval`` predictions file: token-F1 and accuracy (F1 > 0.5,
the qa_f1 task's), which option the answers copy (exactly, after SQuAD normalisation), the F1
of "always the k-th option" for each k (a policy that learned the format but reads nothing),
and two paired differences with 95% bootstrap CIs over queries (``heldout.paired_gain``):
against the base policy (the gate as the issue writes it) and against the best constant option
(the gate a policy that reads must also pass).

    python scripts/choice_gate.py runs/siqa/test.jsonl base.predictions.parquet trained.predictions.parquet
    python scripts/choice_gate.py runs/siqa/test.jsonl --compare figures/train_compare/siqa

``--compare`` prints one markdown row per arm and seed of a ``gcpo compare`` folder (the last
evaluated step of each run, against the folder's base policy).
"""

from __future__ import annotations

import functools
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


@functools.cache
def _questions(data: str) -> pd.Series:
    """The questions of the data file by query id, read once however many files are scored."""
    return load_queries("narrativeqa", path=data, split="test").set_index("query_id")["question"]


def gate(data: str, path: str, base: pd.DataFrame | None) -> dict:
    preds = pd.read_parquet(path)
    questions = _questions(data)
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


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def _cells(row: dict) -> str:
    """F1, accuracy, the two differences and the answer positions of a ``gate`` row, as table cells."""
    shares = dict(part.split(":") for part in row["copies option"].split())
    copies = " / ".join(shares.get(k, "0%") for k in ("0", "1", "2", "other"))
    vs_base = f"{_signed(row['Δ vs base'])} {row['CI base'].replace('-', '−')}" if "Δ vs base" in row else ""
    vs_best = f"{_signed(row['Δ vs best constant'])} {row['CI'].replace('-', '−')}"
    return f"{row['F1']:.1f} | {row['Acc']:.1f} | {vs_base} | {vs_best} | {copies}"


def compare_table(data: str, folder: str) -> str:
    """The gate of every arm-seed of a ``gcpo compare`` folder (its last evaluated step, against
    the folder's base policy), as a markdown table."""
    from pathlib import Path

    root = Path(folder)
    base_path = root / "base" / "all_seeds.predictions.parquet"
    base = pd.read_parquet(base_path)
    lines = [
        "| arm | seed | F1 | accuracy | Δ vs base [95% CI] | Δ vs best option position [95% CI] "
        "| copies option 1 / 2 / 3 / none |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in sorted(root.glob("runs/*/seed_*")):
        evals = sorted(run.glob("eval/step_*.predictions.parquet"))
        if evals:
            row = gate(data, str(evals[-1]), base)
            lines.append(f"| {run.parent.name} | {run.name.split('_')[1]} | {_cells(row)} |")
    lines.append(f"| base policy | | {_cells(gate(data, str(base_path), None))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    if sys.argv[2] == "--compare":
        print(compare_table(sys.argv[1], sys.argv[3]))
        raise SystemExit(0)
    data, first, *rest = sys.argv[1:]
    base = pd.read_parquet(first)
    rows = [gate(data, first, None)] + [gate(data, p, base) for p in rest]
    print(pd.DataFrame(rows).round(2).T.to_string(header=False))
