"""The checks of a frame gcpo reads: ids of one type with no nulls, finite numbers, text that is
text (TRL's conversational cells read as their message), the log-probability convention, and the
renaming of another tool's columns. A bad frame is refused with a FrameError naming column and row."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .schema import (
    GROUP_REQUIRED,
    NONNEGATIVE_ROLLOUT_COLUMNS,
    POLICY_COLUMNS,
    ROLLOUT_NUMERIC,
    ROLLOUT_REQUIRED,
    SHARE_GROUP_COLUMNS,
    TRAINER_COLUMNS,
    FrameError,
    check_columns,
    show_value,
)


def _check_finite(df: pd.DataFrame, columns, kind: str, source: str | None) -> None:
    where = f" in {source}" if source else ""
    for col in columns:
        if col not in df.columns:
            continue
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            qid = df["query_id"].iloc[row] if "query_id" in df.columns else "?"
            raise FrameError(
                f"{kind} frame{where}: column {col!r} has a non-finite value "
                f"{df[col].iloc[row]} at row {row} (query_id={qid!r}); "
                f"{int(bad.sum())} such row(s)"
            )


def validate_rollouts(df: pd.DataFrame, source: str | None = None) -> pd.DataFrame:
    """Check a rollouts frame; return it with canonical dtypes. Raises FrameError."""
    check_columns(df, ROLLOUT_REQUIRED, "rollouts", source)
    if len(df) == 0:
        raise FrameError(f"rollouts frame{' in ' + source if source else ''} is empty")
    for col in ("query_id", "rollout_id"):
        _check_ids(df, col, "rollouts", source)
    for col in ROLLOUT_NUMERIC + ("temperature",):
        if col in df.columns:
            _check_numeric(df, col, "rollouts", source)
    _check_finite(df, [c for c in ROLLOUT_NUMERIC if c in df.columns], "rollouts", source)
    if "temperature" in df.columns:  # NaN: not recorded (frames of two gcpo versions pooled)
        t = pd.to_numeric(df["temperature"], errors="coerce").to_numpy(dtype=float)
        _refuse_first(
            df,
            "temperature",
            ~((t > 0) & np.isfinite(t)) & ~np.isnan(t),
            "rollouts",
            source,
            "a sampling temperature > 0",
        )
    for col, what in NONNEGATIVE_ROLLOUT_COLUMNS.items():  # impossible values, refused like a NaN
        if col in df.columns:
            v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
            _refuse_first(df, col, v < 0, "rollouts", source, f"a number >= 0 ({what})")
    if "success" in df.columns:  # success_rate is its mean: a 2 would make a rate of 2
        ok = df["success"].map(lambda v: isinstance(v, (bool, np.bool_)) or (_is_number(v) and v in (0, 1)))
        _refuse_first(df, "success", ~ok.to_numpy(dtype=bool), "rollouts", source, "a boolean (true/false or 1/0)")
    for col in ("completion", "answer"):
        nulls = df[col].map(lambda v: v is None or (isinstance(v, float) and np.isnan(v))).to_numpy()
        if nulls.any():
            row = int(np.flatnonzero(nulls)[0])
            raise FrameError(
                f"rollouts frame: column {col!r} is null at row {row} (query_id={show_value(df['query_id'].iloc[row])})"
            )
    dup = df.duplicated(["query_id", "rollout_id"]).to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        raise FrameError(
            f"rollouts frame: duplicate (query_id, rollout_id) = "
            f"({show_value(df['query_id'].iloc[row])}, {show_value(df['rollout_id'].iloc[row])}) at row {row}"
            f"{' of ' + source if source else ''}; each rollout of a query needs its own rollout_id"
        )
    out = df.copy()
    out["reward"] = out["reward"].astype(float)
    for col in ("completion", "answer"):
        out[col] = text_column(out, col, "rollouts", source)
    if "references" in out.columns:
        out["references"] = out["references"].map(_as_str_list)
    return out


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def check_logprob_convention(df: pd.DataFrame, columns) -> str | None:
    """A warning text when the ``POLICY_COLUMNS`` among ``columns`` (those the requested measures
    read) may not mean one thing across the frame, else None. Three cases can be seen:
    (1) rows sampled at different temperatures: each value is pi_theta's, but over completions of
    different samplers (pe = -(1/G) sum_i log pi(y_i) estimates pi_theta's entropy only for y_i
    drawn at temperature 1), so such groups measure different things; (2) rows without a
    temperature (NaN) beside rows with one: frames of two gcpo versions pooled; (3) no temperature
    column but ``TRAINER_COLUMNS``: a trainer frame of gcpo <= 0.1.0, whose values are the
    sampler's softmax(z / T) unless its T was 1 (the frame does not say). Any other frame without
    a temperature column is trusted (the study's older frames are pi_theta's already)."""
    read = [c for c in POLICY_COLUMNS if c in set(columns) and c in df.columns]
    if not read:
        return None
    what = " and ".join(repr(c) for c in read)
    if "temperature" not in df.columns:
        if not all(c in df.columns for c in TRAINER_COLUMNS):
            return None
        return (
            f"{what} may be the sampler's, not pi_theta's: the frame has gcpo train's columns "
            f"{list(TRAINER_COLUMNS)} and no 'temperature', so gcpo <= 0.1.0 wrote it, at its sampling "
            f"temperature (logits / T); unless that T was 1 its measures are not comparable with a "
            f"study's (add a column temperature = 1 if it was)"
        )
    t = pd.to_numeric(df["temperature"], errors="coerce")
    known = sorted(float(v) for v in t.dropna().unique())
    if t.isna().any() and known:
        return (
            f"{what}: {int(t.isna().sum())} row(s) have no 'temperature' beside rows sampled at {known} "
            f"(frames of two gcpo versions pooled); those may hold the sampler's values, not pi_theta's"
        )
    if len(known) > 1:
        return (
            f"{what} mix rollouts sampled at temperatures {known}: each value is pi_theta's, but over "
            f"completions of different samplers, so their groups measure different things; score them apart"
        )
    return None


def note_logprob_convention(df: pd.DataFrame, columns, record: dict, source) -> None:
    """``check_logprob_convention``'s text, when there is one, as a warning naming ``source`` and
    in ``record`` (a run card or a ``.meta.json``) under ``logprob_convention_warning``: what
    ``gcpo score`` and the study's re-analyses (``--from-rollouts``, ``--from-training``) do with it."""
    mixed = check_logprob_convention(df, columns)
    if mixed:
        import warnings

        record["logprob_convention_warning"] = mixed
        warnings.warn(f"{source}: {mixed}", stacklevel=3)


def message_text(value):
    """A TRL conversational cell (a list of {"role", "content"} messages) as its text: the last
    assistant message's content (the completion), else the last message's; None when ``value``
    is not a list of messages."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not (isinstance(value, list) and value and all(isinstance(m, dict) and "content" in m for m in value)):
        return None
    said = [m for m in value if m.get("role") == "assistant"] or value
    content = said[-1]["content"]
    if isinstance(content, list):  # multimodal content parts: their text
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def text_column(df: pd.DataFrame, col: str, kind: str = "rollouts", source: str | None = None) -> pd.Series:
    """A text column as strings: conversational cells read as TRL writes them (``message_text``);
    any other non-string cell (a number, a list, a dict) is refused naming the column and row,
    never stringified ("[{'role': ...}]" would make every completion one cluster)."""
    values = df[col].map(lambda v: v if isinstance(v, str) else message_text(v))
    bad = values.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        where = f" in {source}" if source else ""
        cell = df[col].iloc[row]
        raise FrameError(
            f"{kind} frame{where}: column {col!r} must hold text, got {show_value(cell)[:80]} "
            f"({type(cell).__name__}) at row {row}; {int(bad.sum())} such row(s)"
        )
    return values.astype(object)


def prompt_key(value):
    """A conversational prompt (a list of messages) as a stable id: its canonical JSON."""
    import json

    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return value


def _check_ids(df: pd.DataFrame, col: str, kind: str, source: str | None) -> None:
    """An id column has no nulls and one type: 1 and "1" in one file would be two different
    queries to pandas and a crash to pyarrow."""
    where = f" in {source}" if source else ""
    values = df[col]
    nulls = values.isna().to_numpy()
    if nulls.any():
        row = int(np.flatnonzero(nulls)[0])
        raise FrameError(f"{kind} frame{where}: column {col!r} is null at row {row}")
    if values.dtype != object:
        return
    kinds = values.map(
        lambda v: (
            "number"
            if isinstance(v, (int, np.integer)) and not isinstance(v, bool)
            else "text"
            if isinstance(v, str)
            else type(v).__name__
        )
    )
    if kinds.nunique() > 1:
        first = kinds.iloc[0]
        row = int(np.flatnonzero((kinds != first).to_numpy())[0])
        raise FrameError(
            f"{kind} frame{where}: column {col!r} mixes types: {show_value(values.iloc[0])} ({first}) "
            f"at row 0 and {show_value(values.iloc[row])} ({kinds.iloc[row]}) at row {row}; use one type"
        )
    if kinds.iloc[0] not in ("number", "text"):
        raise FrameError(
            f"{kind} frame{where}: column {col!r} holds {kinds.iloc[0]} values "
            f"(e.g. {values.iloc[0]!r}); ids must be integers or strings"
        )


def _refuse_first(df: pd.DataFrame, col: str, bad, kind: str, source: str | None, requirement: str) -> None:
    """Raise for the first row where ``bad`` is set: column ``col`` must be ``requirement``."""
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise FrameError(
            f"{kind} frame{' in ' + source if source else ''}: column {col!r} must be {requirement}, "
            f"got {show_value(df[col].iloc[row])} at row {row} (query_id={show_value(df['query_id'].iloc[row])})"
        )


def _check_numeric(df: pd.DataFrame, col: str, kind: str, source: str | None) -> None:
    """A numeric column holds real numbers: "1.5" (a string) and true (a bool) are refused, not
    silently converted."""
    values = df[col]
    if pd.api.types.is_bool_dtype(values) or not (pd.api.types.is_numeric_dtype(values) or values.dtype == object):
        bad = np.ones(len(values), bool)  # bool, text or datetime dtype: every row is wrong
    elif values.dtype == object:
        bad = values.map(
            lambda v: isinstance(v, bool) or not (isinstance(v, (int, float, np.number)) or v is None)
        ).to_numpy()
    else:
        return
    if bad.any():
        where = f" in {source}" if source else ""
        row = int(np.flatnonzero(bad)[0])
        qid = df["query_id"].iloc[row] if "query_id" in df.columns else "?"
        raise FrameError(
            f"{kind} frame{where}: column {col!r} must be numeric, got {show_value(values.iloc[row])} "
            f"({type(values.iloc[row]).__name__}) at row {row} (query_id={show_value(qid)})"
        )


def validate_groups(df: pd.DataFrame, source: str | None = None) -> pd.DataFrame:
    """Check a groups frame (one row per query); return it. Raises FrameError."""
    check_columns(df, GROUP_REQUIRED, "groups", source)
    _check_ids(df, "query_id", "groups", source)
    dup = df["query_id"].duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        where = f" in {source}" if source else ""
        raise FrameError(
            f"groups frame{where}: query_id {show_value(df['query_id'].iloc[row])} repeats at row {row}; "
            "one row per query"
        )
    g = pd.to_numeric(df["G"], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(g) | (g < 1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise FrameError(f"groups frame: column 'G' must be an integer >= 1, got {df['G'].iloc[row]!r} at row {row}")
    for col in SHARE_GROUP_COLUMNS:  # a share of the group's rollouts: 2.0 is no rate
        if col in df.columns:
            v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
            _refuse_first(df, col, (v < 0) | (v > 1), "groups", source, "a share in [0, 1]")
    if "grad_var" in df.columns:  # a variance: a negative one is a bug upstream, not a small number
        v = pd.to_numeric(df["grad_var"], errors="coerce").to_numpy(dtype=float)
        _refuse_first(df, "grad_var", ~(v >= 0), "groups", source, "a finite number >= 0 (a variance)")
    return df.copy()


def _as_str_list(value) -> list[str]:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in list(value)]


def id_order(ids: pd.Series) -> pd.Series:
    """A sort key for an id column that orders the ids as the data does in every format: numbers
    and strings of digits by their value ("2" before "10", as 2 before 10; "01" before "1", both
    kept), other strings after them, as strings. ``sort_values(key=id_order)``."""

    def key(v):
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return (0, int(v), "")
        text = str(v)
        return (0, int(text), text) if text.isascii() and text.isdigit() else (1, 0, text)

    ranks = {v: k for k, v in enumerate(sorted(pd.unique(ids), key=key))}
    return ids.map(ranks)


def map_rollout_columns(df: pd.DataFrame, columns: dict, source: str | None = None) -> pd.DataFrame:
    """Rename a frame's columns to the rollouts frame's names (``columns``: ours -> theirs, e.g.
    {"query_id": "prompt"} for a TRL-style frame) and derive what can be derived: a missing
    ``rollout_id`` is the row's position within its query, in file order."""
    where = f" in {source}" if source else ""
    missing = {ours: theirs for ours, theirs in columns.items() if theirs and theirs not in df.columns}
    if missing:
        ours, theirs = next(iter(missing.items()))
        raise FrameError(f"column {theirs!r} (given for {ours}) is not{where}; it has {list(df.columns)}")
    pairs = {ours: theirs for ours, theirs in columns.items() if theirs and theirs != ours}
    shadowed = [ours for ours in pairs if ours in df.columns and ours not in pairs.values()]
    if shadowed:
        import warnings

        warnings.warn(
            f"{source or 'the frame'}: column(s) {shadowed} replaced by the mapped "
            f"{[pairs[c] for c in shadowed]}, as asked",
            stacklevel=2,
        )
    # copies, not renames: one source column may feed two (--completion-col text --answer-col text)
    out = df.drop(columns=shadowed).assign(**{ours: df[theirs] for ours, theirs in pairs.items()})
    out = out.drop(columns=[t for t in set(pairs.values()) if t not in pairs and t in out.columns])
    if "query_id" in out.columns and out["query_id"].dtype == object:
        out["query_id"] = out["query_id"].map(prompt_key)  # a conversational prompt: a stable key
    if "rollout_id" not in out.columns and "query_id" in out.columns:
        out["rollout_id"] = out.groupby("query_id", sort=False).cumcount()
    return out
