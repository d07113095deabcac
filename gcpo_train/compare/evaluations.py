"""The held-out evaluations of a comparison's runs, read as untrusted: each
``eval/step_NNNNNN.predictions.parquet`` by its step, with its queries each scored once by a
finite number, and every evaluation of the comparison on the same held-out queries. Anything
else is refused naming the file and the query, since a stray or broken file would otherwise
change Δ without a word (``Comparison.results``). The frame they make, results.parquet, is read
the same way by the report and the planner (``check_results``), which pair its runs' last
evaluations query by query (``final_scores``, ``paired_deltas``)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.frames import check_columns, show_value

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


def finished_only(out, last_steps: dict[Path, int | None]) -> list[Path]:
    """The runs of ``last_steps`` ({run folder under ``out/runs``: its last evaluated step, None
    if none}) that finished (a ``done.json``, ``layout.finished_runs``), in the given order; the
    others are named in one warning with their last evaluated step. A run still training (or
    stopped before its done.json) has evaluations along the way: read as the run's result, its
    step 20 stood beside the finished runs' step 60 without a word. The gate scripts' --compare
    tables read the runs the report's summary reads (``report.finished_results``)."""
    import warnings

    from gcpo_train.compare.layout import finished_runs

    done = set(finished_runs(out))
    left = [(run, step) for run, step in last_steps.items() if run not in done]
    if left:
        named = ", ".join(
            f"{run.parent.name}/{run.name} ({'not evaluated yet' if step is None else f'evaluated to step {step}'})"
            for run, step in left
        )
        warnings.warn(
            f"{out}: left out until their run folder has a done.json (still training, or stopped before it "
            f"finished): {named}",
            stacklevel=2,
        )
    return [run for run in last_steps if run in done]


def read_scores(path: Path, arm: str, seed: int, step: int) -> pd.DataFrame:
    """(query_id, score, arm, seed, step) of one evaluation, checked by the held-out reader
    (``evaluation.heldout.read_scores``: both columns, no empty file, every query once with an id,
    each score a finite number, not a text or a bool), each error naming the run and the file."""
    from gcpo_train.compare.data_identity import CONTENT_ID
    from gcpo_train.evaluation.heldout import read_scores as read_checked

    frame = read_checked(path, f"{arm} seed {seed} step {step}").assign(arm=arm, seed=seed, step=step)
    if str(path).endswith(".parquet"):  # the content id beside the query id (absent in older files)
        import pyarrow.parquet as pq

        if CONTENT_ID in pq.read_schema(path).names:
            frame[CONTENT_ID] = pd.read_parquet(path, columns=[CONTENT_ID])[CONTENT_ID].to_numpy()
    return frame


def check_same_queries(parts: list[tuple[Path, pd.DataFrame]]) -> None:
    """Every evaluation of a comparison ((file, ``read_scores`` frame) pairs) scores the same held-out
    queries (the first eval_n of one split): one that lacks a query or has another would silently
    shrink the pairing. The set most files hold is the comparison's; each file that differs from
    it is named, with a query it lacks or adds. A query id is a position in the data: where files
    carry content ids, each query's must agree (``data_identity.check_content_ids``)."""
    from gcpo_train.compare.data_identity import check_content_ids

    check_content_ids(parts)
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


RESULT_COLUMNS = ("arm", "seed", "step", "query_id", "score")


def check_results(results: pd.DataFrame, source) -> pd.DataFrame:
    """A comparison's results frame (``Comparison.results``, results.parquet) as the report and
    the planner read it, or a ValueError naming ``source`` (the file) and the row by its arm,
    seed, step and query. The checks the held-out reader makes of one evaluation file, made again
    of the frame, since a results.parquet edited, merged or written by hand reaches the summary
    and ``--plan`` without passing that reader: each arm a name; each seed and step an integer
    >= 0 (a seed stored as text "3" never pairs with 3, so Δ went to — with a footnote blaming
    the seed count; a step as text failed in a comparison); each score a finite number, never a
    text or a bool (``evaluation.heldout.read_scores`` refuses both); each (arm, seed, step,
    query) once (pivot_table averaged a repeated row into Δ and τ). Returns ``results``."""
    try:
        check_columns(results, RESULT_COLUMNS, "comparison results", None)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None

    def cell(i: int) -> str:
        r = results.iloc[i]
        return (
            f"arm {show_value(r['arm'])} seed {show_value(r['seed'])} step {show_value(r['step'])} "
            f"query {show_value(r['query_id'])} (row {i})"
        )

    bad = ~results["arm"].map(lambda v: isinstance(v, str) and v != "").to_numpy(bool)
    if bad.any():
        raise ValueError(f"{source}: {cell(int(np.flatnonzero(bad)[0]))}: the arm is not a name")
    for column in ("seed", "step"):
        bad = ~_counts(results[column])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{source}: {cell(i)}: column {column!r} holds {show_value(results[column].iloc[i])}, not an "
                "integer >= 0 (a text seed or step never pairs with the number)"
            )
    bad = results["query_id"].isna().to_numpy(bool)
    if bad.any():
        raise ValueError(f"{source}: {cell(int(np.flatnonzero(bad)[0]))}: no query_id")
    bad = ~_finite_numbers(results["score"])
    if bad.any():  # the wording of plan's earlier check, which tests and users match on
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{source}: {int(bad.sum())} score(s) are missing or not finite, the first of {cell(i)}: "
            f"{show_value(results['score'].iloc[i])}; a score is a finite number, never a text or a bool"
        )
    key = list(RESULT_COLUMNS[:4])
    repeated = results.duplicated(key, keep="first").to_numpy(bool)
    if repeated.any():
        i = int(np.flatnonzero(repeated)[0])
        same = (results[key] == results[key].iloc[i]).all(axis=1).to_numpy(bool)
        first = int(np.flatnonzero(same)[0])
        raise ValueError(
            f"{source}: {cell(i)} repeats row {first}: each run's evaluation scores a query once, and a repeat "
            "would be averaged into Δ and τ"
        )
    return results


def _counts(values: pd.Series) -> np.ndarray:
    """Which values are integers >= 0 (a bool, a float or a text is not)."""
    if values.dtype.kind in "iu" and not values.isna().any():  # a nullable Int64 may hold <NA>
        return values.to_numpy() >= 0
    return values.map(
        lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 0
    ).to_numpy(bool)


def _finite_numbers(values: pd.Series) -> np.ndarray:
    """Which values are finite numbers (a bool or a text is not, though to_numeric would make one)."""
    if values.dtype.kind in "iuf":
        return np.isfinite(values.to_numpy(float, na_value=np.nan))
    is_number = values.map(
        lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
    )
    return np.isfinite(pd.to_numeric(values.where(is_number), errors="coerce").to_numpy(float))


def final_scores(results: pd.DataFrame) -> pd.DataFrame:
    """Each trained arm-seed's scores at its last evaluated step."""
    final = results[results["arm"] != "base"]
    return final[final["step"] == final.groupby(["arm", "seed"])["step"].transform("max")]


def paired_deltas(a: pd.DataFrame, b: pd.DataFrame) -> np.ndarray | None:
    """d = score_a − score_b (seeds x queries) over the seeds both have; None with fewer than two
    paired seeds (a seed-level interval needs two). ``a`` and ``b``: one arm's ``final_scores``
    rows each (``check_results``: no repeated row). Every paired seed of both arms
    scores the same queries, or a ValueError names the arm, seed, step and query missing: the
    pairing was over the queries both had, so an arm evaluated on 2 of 5 queries got Δ over those
    2, and a missing cell failed as a shape error naming nothing."""
    if a.empty or b.empty:
        return None
    wide = [f.pivot(index="seed", columns="query_id", values="score") for f in (a, b)]
    seeds = wide[0].index.intersection(wide[1].index)
    if len(seeds) < 2:
        return None
    queries = wide[0].loc[seeds].dropna(axis=1, how="all").columns
    queries = queries.union(wide[1].loc[seeds].dropna(axis=1, how="all").columns)
    for frame, pivot in zip((a, b), wide):
        missing = pivot.loc[seeds].reindex(columns=queries).isna().to_numpy()
        if missing.any():
            s, q = np.argwhere(missing)[0]
            step = frame.loc[frame["seed"] == seeds[s], "step"].iloc[0]
            raise ValueError(
                f"arm {frame['arm'].iloc[0]!r} seed {seeds[s]} step {step} has no score for query {queries[q]!r} "
                f"({int(missing[s].sum())} of the {len(queries)} queries its paired runs score are missing there); "
                "Δ pairs every seed on the same held-out queries, never on those both runs happen to have"
            )
    return wide[0].loc[seeds, queries].to_numpy() - wide[1].loc[seeds, queries].to_numpy()
