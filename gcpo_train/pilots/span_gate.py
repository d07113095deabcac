"""The learning gate of a reading task (``scripts/narrativeqa_spans.py``) and whether what was
learned is reading: one row per policy, each scored on the held-out questions with their passages
and, where given, without them ("(no passage)", the ``--no_passage`` file).

Columns: token-F1 (0–100) and accuracy (F1 > 50); the mean answer length in words; "copies
passage", the share of answers whose normalised text is a span of the normalised passage;
Δ vs base, paired by query; and **Δ vs random span**: against a policy that answers each query
with as many words as this one, copied from a uniformly random place in the passage (the exact
expectation over every start). A policy that learned only to copy something of the right length
from the passage scores 0 there; one that picks the right words scores above it. For a policy
also evaluated without the passages: its **passage effect** (F1 with − F1 without, paired by
query), and the **reading gain**, the mean over queries of (this policy with − without) − (base
with − without): how much more the passage is worth to it than to the base policy. Shorter
answers alone raise the passage effect too (a short right span scores more than a sentence
holding it), so the reading gain is read beside Δ vs random span, not alone. 95% CIs: scipy's
percentile bootstrap over queries (``gcpo_train.evaluation.heldout.paired_gain``).

    gcpo pilot span-gate runs/nqa_spans BASE.predictions.parquet[,BASE_NOPASSAGE.predictions.parquet] \
        TRAINED.predictions.parquet[,TRAINED_NOPASSAGE.predictions.parquet] ...
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.data import load_queries
from gcpo_analysis.rewards import normalize_answer, token_f1
from gcpo_train.compare.layout import SEED_FOLDER
from gcpo_train.evaluation.heldout import paired_gain, read_predictions


def _ci(result: dict) -> str:
    return f"[{result['ci_low']:+.1f}, {result['ci_high']:+.1f}]".replace("-", "−")


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def copies_passage(answer: str, passage: str) -> bool:
    """The normalised answer is non-empty and a run of whole words of the normalised passage."""
    a = normalize_answer(answer)
    return bool(a) and re.search(r"(?<!\S)" + re.escape(a) + r"(?!\S)", normalize_answer(passage)) is not None


def random_span_f1(passage: str, references, n_words: int) -> float:
    """100 × the mean over every start position of token-F1 (best reference) of the ``n_words``
    consecutive whitespace words of ``passage`` there (the whole passage when it is shorter; 0
    for an empty answer, as an empty answer scores)."""
    words = passage.split()
    if n_words < 1 or not words:
        return 0.0
    n = min(n_words, len(words))
    return 100 * float(
        np.mean([token_f1(" ".join(words[i : i + n]), list(references)) for i in range(len(words) - n + 1)])
    )


def _passages(data: str) -> pd.Series:
    df = load_queries("narrativeqa", path=data, split="test")
    return df.set_index("query_id")["context"]


def _read(path: str, passages: pd.Series) -> pd.DataFrame:
    try:  # every cell checked first (a null answer, a query scored twice, an empty file), named by its row
        preds = read_predictions(path)
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(str(err)) from None
    missing = sorted(set(preds["query_id"]) - set(passages.index))[:3]
    if missing:
        raise SystemExit(
            f"{path}: queries {missing} are not in the data's test split; give the data it was evaluated on"
        )
    for row, (qid, refs) in enumerate(zip(preds["query_id"], preds["references"], strict=True)):
        if len(refs) == 0:
            raise SystemExit(
                f"{path}: column 'references' is empty at row {row} (query_id={qid!r}): "
                "a query is scored against at least one reference answer"
            )
    return preds


def _same_queries(base_path: str, base: pd.DataFrame, path: str, preds: pd.DataFrame) -> None:
    """Refuse ``preds`` unless it scores the base predictions' queries (every difference in the
    table is paired by query), naming the file and a query it lacks or has over the base's."""
    want, got = set(base["query_id"]), set(preds["query_id"])
    lacks, extra = sorted(want - got), sorted(got - want)
    said = [f"lacks {len(lacks)} of the {len(want)} queries of {base_path} (e.g. {lacks[:3]})"] if lacks else []
    said += [f"scores {len(extra)} queries that {base_path} does not (e.g. {extra[:3]})"] if extra else []
    if said:
        raise SystemExit(f"{path}: {' and '.join(said)}; evaluate every policy on the same held-out queries")


def _scores(query_ids, score) -> pd.DataFrame:
    return pd.DataFrame({"query_id": np.asarray(query_ids), "score": np.asarray(score, dtype=float)})


def gate_row(name: str, preds: pd.DataFrame, passages: pd.Series, blank: pd.DataFrame | None, base, base_blank) -> dict:
    """One policy's row; ``blank`` its no-passage predictions, ``base``/``base_blank`` the base
    policy's. Every paired difference goes through ``paired_gain``, which refuses frames of
    different queries: the base row compares base with base_blank, so by the reading gain all four
    frames hold the same queries."""
    n_words = preds["answer"].map(lambda a: len(str(a).split()))
    row = {
        "policy": name,
        "n": len(preds),
        "F1": float(preds["score"].mean()),
        "Acc": 100 * float((preds["score"] > 50).mean()),
        "words": float(n_words.mean()),
        "copies passage": 100
        * float(
            np.mean([copies_passage(a, passages[q]) for q, a in zip(preds["query_id"], preds["answer"], strict=True)])
        ),
    }
    chance = [
        random_span_f1(passages[q], refs, n)
        for q, n, refs in zip(preds["query_id"], n_words, preds["references"], strict=True)
    ]
    vs_chance = paired_gain(_scores(preds["query_id"], chance), preds)
    row["F1 random span"] = float(np.mean(chance))
    row["Δ vs random span"] = f"{_signed(vs_chance['diff'])} {_ci(vs_chance)}"
    if base is not None:
        vs = paired_gain(base, preds)
        row["Δ vs base"] = f"{_signed(vs['diff'])} {_ci(vs)}"
    if blank is not None:
        row["F1 without passage"] = float(blank["score"].mean())
        effect = paired_gain(blank, preds)
        row["passage effect"] = f"{_signed(effect['diff'])} {_ci(effect)}"
        if base is not None and base_blank is not None:
            ours = preds.set_index("query_id")["score"] - blank.set_index("query_id")["score"]
            theirs = base.set_index("query_id")["score"] - base_blank.set_index("query_id")["score"]
            gain = paired_gain(_scores(theirs.index, theirs), _scores(ours.index, ours))
            row["reading gain"] = f"{_signed(gain['diff'])} {_ci(gain)}"
    return row


def _pair(spec: str) -> tuple[str, str | None]:
    with_path, _, blank_path = spec.partition(",")
    return with_path, blank_path or None


def table(data: str, base: tuple[str, str | None], policies: list[tuple[str, str, str | None]]) -> str:
    """A markdown table: the base policy's row (``base`` = (predictions, no-passage predictions
    or None)), then one row per (name, predictions, no-passage predictions or None). Every file is
    read and checked first (each query scored once, with a reference; the base predictions'
    queries, no more and no fewer), a bad one refused by its path."""
    passages = _passages(data)
    frames: dict[str, pd.DataFrame] = {}  # every file read and checked before a row is computed

    def read(path: str) -> pd.DataFrame:
        if path not in frames:
            frames[path] = _read(path, passages)
            _same_queries(base[0], frames[base[0]], path, frames[path])
        return frames[path]

    base_preds = read(base[0])
    base_blank = read(base[1]) if base[1] else None
    read_policies = [(name, read(with_path), read(blank) if blank else None) for name, with_path, blank in policies]
    rows = [gate_row("base", base_preds, passages, base_blank, None, None)]
    rows += [gate_row(name, preds, passages, blank, base_preds, base_blank) for name, preds, blank in read_policies]
    cols = [
        "policy",
        "n",
        "F1",
        "Acc",
        "words",
        "copies passage",
        "F1 random span",
        "Δ vs random span",
        "Δ vs base",
        "F1 without passage",
        "passage effect",
        "reading gain",
    ]
    cols = [c for c in cols if any(c in r for r in rows)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [r.get(c, "") for c in cols]
        lines.append("| " + " | ".join(f"{c:.1f}" if isinstance(c, float) else str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _runs(runs: Path) -> list[tuple[str, int, Path]]:
    """(arm folder, seed, run folder) of every ``runs/<arm>/seed_<s>``, GRPO (``none``) first,
    then by arm and seed. Anything else in an arm's folder is refused by name: gcpo compare writes
    only seed folders there, so another entry is a run renamed or a file put among them by hand,
    which a table of every arm-seed should not pass over in silence. Hidden entries (a lock, a
    temporary ``.<name>.*.gcpo-tmp``) are not runs and are passed over."""
    found = []
    for arm in sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []:
        for run in arm.iterdir():
            if run.name.startswith("."):
                continue
            match = SEED_FOLDER.fullmatch(run.name)  # as compare names them: seed_00 is not seed 0
            if match is None or not run.is_dir():
                raise SystemExit(
                    f"{run}: not a run of the comparison (an arm's folder holds only folders seed_<digits>, "
                    "no leading zero); "
                    f"move it out of {arm}"
                )
            found.append((arm.name, int(match[1]), run))
    return sorted(found, key=lambda r: (r[0] != "none", r[0], r[1]))


def _evaluations(folder: Path) -> list[tuple[int, Path]]:
    """(step, predictions file) of every ``step_NNNNNN.predictions.parquet`` in a run's eval folder,
    by step, named as ``gcpo compare`` names them (``compare.evaluations.eval_step``, so both read
    the same files); another ``step_*`` predictions file is refused by name."""
    from gcpo_train.compare.evaluations import eval_step

    found = []
    for path in folder.glob("step_*.predictions.parquet"):
        try:
            found.append((eval_step(path), path))
        except ValueError as err:
            raise SystemExit(str(err)) from None
    return sorted(found)


def compare_policies(folder: str) -> tuple[tuple[str, str | None], list[tuple[str, str, str | None]]]:
    """The base policy and each finished arm-seed's (done.json) last evaluation of a ``gcpo
    compare`` folder (GRPO, ``none``, first), with the no-passage predictions where
    ``FOLDER/nopassage/`` holds them (``base.predictions.parquet``,
    ``<arm folder>_seed_<s>_step_<N>.predictions.parquet``). A run still training is left out and
    named in a warning (``evaluations.finished_only``): its step so far is not its result."""
    from gcpo_analysis.measures.shuffled import arm_of_folder
    from gcpo_train.compare.evaluations import finished_only

    root = Path(folder)
    blank_dir = root / "nopassage"

    def blank(name: str) -> str | None:
        path = blank_dir / f"{name}.predictions.parquet"
        return str(path) if path.exists() else None

    base = root / "base" / "all_seeds.predictions.parquet"
    if not base.exists():
        raise SystemExit(f"{base} is missing: is {folder} a finished gcpo compare folder of a real policy?")
    last = {run: (arm, seed, _evaluations(run / "eval")[-1:]) for arm, seed, run in _runs(root / "runs")}
    policies = []
    for run in finished_only(root, {run: evals[0][0] if evals else None for run, (*_, evals) in last.items()}):
        arm, seed, evals = last[run]
        if not evals:
            continue
        step, path = evals[0]
        name = f"{run.parent.name}_{run.name}_step_{step}"
        policies.append((f"{arm_of_folder(arm)} seed {seed} step {step}", str(path), blank(name)))
    return (str(base), blank("base")), policies


def guard_output(output: str, data: str, files: list) -> None:
    """Refuse, before anything is read, an --output that is one of the inputs (the data's
    test.jsonl, a predictions file; symlinks and hard links too): ``--output
    trained.predictions.parquet`` replaced the predictions with the table. The check gcpo eval
    makes of its outputs (``evaluation.evaluate.guard_output_file``)."""
    from gcpo_train.evaluation.evaluate import guard_output_file

    data_file = Path(data) / "test.jsonl" if Path(data).is_dir() else Path(data)
    try:
        guard_output_file(output, [("data", data_file)] + [("predictions", p) for p in files])
    except ValueError as err:
        raise SystemExit(str(err)) from None


def command(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="gcpo pilot span-gate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("data", help="the folder that scripts/narrativeqa_spans.py wrote (its test.jsonl is read)")
    p.add_argument("base", nargs="?", help="the base policy's predictions, optionally ',' and its no-passage ones")
    p.add_argument("trained", nargs="*", help="a trained policy's predictions, optionally ',' and its no-passage ones")
    p.add_argument(
        "--compare",
        metavar="FOLDER",
        help="instead: every finished arm-seed's last evaluation in a gcpo compare folder (a run still "
        "training is left out, named in a warning)",
    )
    p.add_argument(
        "--output",
        metavar="FILE",
        help="also write the table to FILE, never over an input (through gcpo_analysis.outputs.staged_outputs: "
        "whole or not at all)",
    )
    args = p.parse_args(argv)
    if (args.compare is None) == (args.base is None):
        p.error("give either BASE [TRAINED ...] or --compare FOLDER")
    if args.compare:
        base, policies = compare_policies(args.compare)
    else:
        base = _pair(args.base)
        policies = [(Path(w).name.removesuffix(".predictions.parquet"), w, b) for w, b in map(_pair, args.trained)]
    if args.output:
        guard_output(args.output, args.data, [*base, *(p for _, *files in policies for p in files)])
    text = table(args.data, base, policies)  # every row computed before anything is written
    if args.output:
        from gcpo_analysis.frames import write_text
        from gcpo_analysis.outputs import staged_outputs

        with staged_outputs():
            write_text(args.output, text)
    sys.stdout.write(text)
    return 0
