"""The held-out evaluations of a comparison's runs, read as untrusted: each
``eval/step_NNNNNN.predictions.parquet`` by its step, with its queries each scored once by a
finite number, and every evaluation of the comparison on the same held-out queries. Anything
else is refused naming the file and the query, since a stray or broken file would otherwise
change Δ without a word (``Comparison.results``)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pandas as pd

EVAL_FILE = re.compile(r"step_(\d{6})\.predictions\.parquet")


def eval_step(path: Path) -> int:
    """The step of an evaluation file the comparison wrote (``step_000060.predictions.parquet``);
    any other name in a run's eval/ is refused: a stray copy would otherwise count as a step."""
    m = EVAL_FILE.fullmatch(path.name)
    if m is None:
        raise ValueError(
            f"{path}: not an evaluation file of this comparison (expected step_NNNNNN.predictions.parquet); "
            "move it out of the run's eval/ folder"
        )
    return int(m.group(1))


def read_scores(path: Path, arm: str, seed: int, step: int) -> pd.DataFrame:
    """(query_id, score, arm, seed, step) of one evaluation, checked by the held-out reader
    (``evaluation.heldout.read_scores``: both columns, no empty file, every query once with an id,
    each score a finite number, not a text or a bool), each error naming the run and the file."""
    from gcpo_train.evaluation.heldout import read_scores as read_checked

    return read_checked(path, f"{arm} seed {seed} step {step}").assign(arm=arm, seed=seed, step=step)


def check_same_queries(parts: list[tuple[Path, pd.DataFrame]]) -> None:
    """Every evaluation of a comparison ((file, ``read_scores`` frame) pairs) scores the same held-out
    queries (the first eval_n of one split): one that lacks a query or has another would silently
    shrink the pairing. The set most files hold is the comparison's; each file that differs from
    it is named, with a query it lacks or adds."""
    sets = {path: frozenset(frame["query_id"]) for path, frame in parts}
    counts = Counter(sets.values())
    common = max(counts, key=counts.__getitem__)
    holder = next(path for path, ids in sets.items() if ids == common)
    for path, ids in sets.items():
        if ids != common:
            missing, extra = sorted(map(str, common - ids)), sorted(map(str, ids - common))
            raise ValueError(
                f"{path} scores other held-out queries than the comparison's other evaluations (as {holder}): "
                f"{len(missing)} missing (first {missing[:1]}), {len(extra)} extra (first {extra[:1]})"
            )
