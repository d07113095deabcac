"""The held-out evaluations of a comparison's runs, read as untrusted: each
``eval/step_NNNNNN.predictions.parquet`` by its step, with its queries each scored once by a
finite number, and every evaluation of the comparison on the same held-out queries. Anything
else is refused naming the file and the query, since a stray or broken file would otherwise
change Δ without a word (``Comparison.results``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
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
    """(query_id, score) of one evaluation, checked: both columns, each query once, finite scores."""
    from gcpo_analysis.frames import check_columns, read_table, show_value

    df = read_table(path, kind="predictions")
    check_columns(df, ("query_id", "score"), "predictions", str(path))
    df = df[["query_id", "score"]]
    repeated = df["query_id"].duplicated(keep=False).to_numpy()
    if repeated.any():
        row = int(np.flatnonzero(repeated)[0])
        raise ValueError(f"{path}: query {df['query_id'].iloc[row]!r} is scored more than once (row {row})")
    score = pd.to_numeric(df["score"], errors="coerce").to_numpy(dtype=float)
    if not np.isfinite(score).all():
        row = int(np.flatnonzero(~np.isfinite(score))[0])
        raise ValueError(
            f"{path}: score of query {df['query_id'].iloc[row]!r} (row {row}) is {show_value(df['score'].iloc[row])}, "
            "not a finite number"
        )
    return df.assign(score=score, arm=arm, seed=seed, step=step)


def check_same_queries(parts: list[pd.DataFrame]) -> None:
    """Every evaluation of a comparison scores the same held-out queries (the first eval_n of one
    split): one that lacks a query or has another would silently shrink the pairing."""
    first = parts[0]
    expected = set(first["query_id"])
    for part in parts[1:]:
        got = set(part["query_id"])
        if got != expected:
            what = f"{part['arm'].iloc[0]} seed {part['seed'].iloc[0]} step {part['step'].iloc[0]}"
            ref = f"{first['arm'].iloc[0]} seed {first['seed'].iloc[0]} step {first['step'].iloc[0]}"
            missing, extra = sorted(map(str, expected - got)), sorted(map(str, got - expected))
            raise ValueError(
                f"the evaluation of {what} scores other held-out queries than that of {ref}: "
                f"{len(missing)} missing (first {missing[:1]}), {len(extra)} extra (first {extra[:1]})"
            )
