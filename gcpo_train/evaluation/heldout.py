"""Held-out scores paired by query: the per-query metric behind ``task_metrics`` and the paired
bootstrap CI of a trained policy's gain over the base policy (the learning gate:
does training beat the base policy at all? figures/train_compare/pilot_log.md).

The per-query score is the task's headline metric on 0-100, so its mean is the table's number:
qa_f1 → token-F1 (NarrativeQA/Qasper, Table 1), hotpot → the official HotpotQA F1 (Table 2),
math → accuracy. The gain of policy B over policy A on the same queries is the mean of the
paired differences d_q = s_B(q) − s_A(q); its CI is scipy.stats.bootstrap over queries
(percentile method, 95%), the resampling unit being the query.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

METRIC_NAME = {"qa_f1": "F1", "hotpot": "F1", "math": "accuracy"}


def per_query_scores(task: str, answers, references_list) -> np.ndarray:
    """The task's metric for each query on 0-100 (answers already extracted, ``""`` for none);
    its mean equals ``task_metrics(task, answers, references_list)[METRIC_NAME[task]]``."""
    from gcpo_analysis.rewards import hotpot_f1_em, math_equiv_any, token_f1

    if task not in METRIC_NAME:
        raise ValueError(f"unknown task {task!r}; choices: {', '.join(METRIC_NAME)}")
    if len(answers) != len(references_list):
        raise ValueError(f"{len(answers)} answers but {len(references_list)} reference sets")
    out = []
    for a, refs in zip(answers, references_list):
        a = a if a is not None else ""
        if task == "qa_f1":
            out.append(token_f1(a, refs))
        elif task == "hotpot":
            out.append(hotpot_f1_em(a, refs)[0])
        else:
            out.append(float(math_equiv_any(a, [refs] if isinstance(refs, str) else list(refs))))
    return 100.0 * np.asarray(out, dtype=float)


def _is_number(v) -> bool:
    """A real number: a bool or a text "0.5" is not a score, though pandas would make one of it."""
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def not_scores(values: pd.Series) -> np.ndarray:
    """True where a value of ``values`` is no finite number (``_is_number``; NaN and inf are none)."""
    if pd.api.types.is_bool_dtype(values):
        return np.ones(len(values), dtype=bool)
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_complex_dtype(values):
        return ~np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))
    numbers = pd.to_numeric(values.where(values.map(_is_number)), errors="coerce")
    return ~np.isfinite(numbers.to_numpy(dtype=float, na_value=np.nan))


def check_each_query_once(ids: pd.Series, where: str) -> None:
    """A predictions file holds at least one query and scores each once, or a ValueError naming
    ``where`` (the file) and the row: a query scored twice counts twice in every mean, and an empty
    file has no mean at all (pandas' NaN met later as "cannot convert float NaN to integer")."""
    if ids.empty:
        raise ValueError(f"{where}: the file holds no predictions")
    dup = ids.duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        rows = np.flatnonzero((ids == ids.iloc[row]).to_numpy())
        raise ValueError(
            f"{where}: row {row} scores query {ids.iloc[row]!r} a second time (rows {', '.join(map(str, rows))}); "
            "a query scored more than once would count twice in every mean"
        )


def read_scores(path, flag: str = "predictions") -> pd.DataFrame:
    """An evaluation's predictions file (``<name>.predictions.parquet``, or JSONL/CSV) as its
    (query_id, score) frame, read and checked before it is needed: a missing or unreadable file,
    a missing column, a query scored twice or a score that is not a finite number is refused,
    naming ``flag`` and the file (and the row)."""
    from gcpo_analysis.frames import read_table, show_value

    try:
        df = read_table(path, "predictions", text_columns=("query_id",))
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag}: no such predictions file: {path}") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{flag} {path}: not a readable predictions file ({err})") from None
    missing = [c for c in ("query_id", "score") if c not in df.columns]
    if missing:
        raise ValueError(
            f"{flag} {path}: no {', '.join(map(repr, missing))} column (columns: {', '.join(map(str, df.columns))}); "
            "pass the .predictions.parquet that gcpo eval --output wrote"
        )
    if df.empty:
        raise ValueError(f"{flag} {path}: the file holds no predictions")
    null = df["query_id"].isna().to_numpy()
    if null.any():
        raise ValueError(f"{flag} {path}: row {int(np.flatnonzero(null)[0])} has no query_id")
    ids = df["query_id"].astype(str)
    check_each_query_once(ids, f"{flag} {path}")
    raw = df["score"]
    bad = not_scores(raw)  # numbers only: a text "0.5" or a bool True is not a score
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{flag} {path}: row {row} (query {ids.iloc[row]!r}) has score {show_value(raw.iloc[row])}, "
            "not a finite number"
        )
    return pd.DataFrame({"query_id": ids.to_numpy(), "score": raw.to_numpy(dtype=float)})


def check_paired_queries(ids, base: pd.DataFrame, flag: str, path) -> None:
    """The queries an evaluation will score (``ids``) are those its paired evaluation scores
    (``base``, a ``read_scores`` frame), checked before any model loads: otherwise a ValueError
    naming ``flag``, the file and the first few ids missing from it or extra in it."""
    ours, theirs = pd.Series(ids).astype(str), base["query_id"]
    missing, extra = ours[~ours.isin(theirs)].tolist()[:3], theirs[~theirs.isin(ours)].tolist()[:3]
    if missing or extra:
        differ = [f"{what}, e.g. {few}" for what, few in (("not in it", missing), ("only in it", extra)) if few]
        raise ValueError(
            f"{flag} {path}: scores other queries than the {len(ours)} this evaluation will ({'; '.join(differ)}); "
            "pair it with an evaluation of the same held-out set (the same --config, --dataset, --split and --n)"
        )


def paired_gain(
    base,
    trained,
    *,
    on: str = "query_id",
    score: str = "score",
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> dict:
    """Mean paired difference trained − base over the queries both frames score, with a
    percentile bootstrap CI over queries (scipy.stats.bootstrap). The two frames must hold the
    same queries (each once): a gain measured on different query sets is not paired. Every score
    is a finite number, not a bool (True would count 1 on a 0-100 scale) nor a text, and
    ``confidence`` a level in (0, 1) (95 gave NaN bounds): either is refused, not misread.

    Returns {"n", "base", "trained", "diff", "ci_low", "ci_high", "confidence", "method"}.
    """
    from scipy.stats import bootstrap

    from gcpo_analysis.frames import show_value

    if not _is_number(confidence) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a level in (0, 1), e.g. 0.95 for a 95% CI, got {confidence!r}")
    frames = {"base": pd.DataFrame(base), "trained": pd.DataFrame(trained)}
    for name, df in frames.items():
        for col in (on, score):
            if col not in df.columns:
                raise ValueError(f"{name} frame has no {col!r} column (columns: {', '.join(map(str, df.columns))})")
        dup = df[on][df[on].duplicated()]
        if len(dup):
            raise ValueError(f"{name} frame scores query {dup.iloc[0]!r} more than once")
        bad = not_scores(df[score])
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = df[score].iloc[row]
            raise ValueError(
                f"{name} frame: query {df[on].iloc[row]!r} has {score} {show_value(value)} "
                f"({type(value).__name__}), not a finite number (a bool or a text is no score)"
            )
    a, b = frames["base"].set_index(on)[score], frames["trained"].set_index(on)[score]
    if set(a.index) != set(b.index):
        only = sorted(set(a.index) ^ set(b.index), key=str)[:3]
        raise ValueError(
            f"base and trained frames score different queries (e.g. {only}); evaluate both on the same held-out set"
        )
    b = b.loc[a.index]
    d = (b.to_numpy(float) - a.to_numpy(float)).astype(float)
    if len(d) < 2:
        raise ValueError(f"a paired bootstrap needs at least 2 queries, got {len(d)}")
    if np.all(d == d[0]):  # every resample has the same mean; scipy would warn about a degenerate sample
        low = high = float(d[0])
    else:
        res = bootstrap(
            (d,),
            np.mean,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="percentile",
            random_state=np.random.default_rng(seed),
        )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return {
        "n": int(len(d)),
        "base": float(a.mean()),
        "trained": float(b.mean()),
        "diff": float(d.mean()),
        "ci_low": low,
        "ci_high": high,
        "confidence": confidence,
        "method": "scipy.stats.bootstrap, percentile, resampling queries",
    }


PREDICTION_COLUMNS = ("query_id", "answer", "score", "references")


def read_predictions(path, columns=PREDICTION_COLUMNS) -> pd.DataFrame:
    """A ``gcpo eval`` predictions file (``<out>.predictions.parquet``) with each of ``columns``
    checked cell by cell, so a script that scores it never meets a null or a wrong type later:
    ``query_id`` and ``answer`` (and ``completion``) text, ``score`` a finite number (not a
    bool), ``references`` a list of texts. A bad cell raises ValueError naming the file, the
    column, the row and its query; so do a file that is no parquet, an empty one and a query
    scored twice (``check_each_query_once``, as ``read_scores`` checks them), which a script
    met later as "the base frame scores ... more than once" or NaN, naming no file."""
    try:
        df = pd.read_parquet(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such predictions file: {path}") from None
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"{path}: not a readable predictions file ({err})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a predictions file, missing column(s) {missing} (it has {list(df.columns)})")

    def text(v):
        return isinstance(v, str)

    def number(v):
        return _is_number(v) and bool(np.isfinite(float(v)))

    def texts(v):
        v = v.tolist() if isinstance(v, np.ndarray) else v
        return isinstance(v, list) and all(isinstance(x, str) for x in v)

    rules = {
        "query_id": (text, "text"),
        "answer": (text, "text (an empty answer is '')"),
        "completion": (text, "text"),
        "score": (number, "a finite number"),
        "references": (texts, "a list of texts"),
    }
    for col in columns:
        ok, what = rules.get(col, (lambda v: v is not None, "a value"))
        for row, value in enumerate(df[col].tolist()):
            if not ok(value):
                qid = df["query_id"].iloc[row] if "query_id" in df.columns else "?"
                null = value is None or (isinstance(value, float) and np.isnan(value) and col != "score")
                got = "null" if null else f"{value!r} ({type(value).__name__})"
                raise ValueError(f"{path}: column {col!r} must be {what}, got {got} at row {row} (query_id={qid!r})")
    if "query_id" in df.columns:
        check_each_query_once(df["query_id"], str(path))
    elif df.empty:
        raise ValueError(f"{path}: the file holds no predictions")
    return df
