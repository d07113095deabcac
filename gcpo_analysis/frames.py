"""The two data frames every part of gcpo passes around (docs/conventions.md, "How data flows").

rollouts frame (long, one row per rollout)
    required: query_id, rollout_id, completion, answer, reward
    optional: references (list[str]), token_entropy (mean per-token entropy),
              logprob (sum of token log-probabilities), temperature (the sampling
              temperature), n_tokens, success (bool), dataset, step,
              ratio_var (Var_t of the policy ratio, for R2VPO)
    token_entropy and logprob describe the policy pi_theta itself, at temperature 1 (softmax of
    the raw logits), whatever temperature the rollouts were sampled at; ``gcpo study`` and
    ``gcpo train`` both write them so (``check_logprob_convention`` warns on a frame that may
    not).
groups frame (one row per query)
    required: query_id, G
    optional: one column per measure (token_entropy, se, kle, cd, bot, rd, ...), weights
              (w_cd, w_bot, w_rd, ...), n_clusters, success_rate, mean_reward, grad_var

Both round-trip through Parquet and JSONL. A bad frame is refused with a message that
names the column and the row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

ROLLOUT_REQUIRED = ("query_id", "rollout_id", "completion", "answer", "reward")
ROLLOUT_NUMERIC = ("reward", "token_entropy", "logprob", "ratio_var")
GROUP_REQUIRED = ("query_id", "G")
# the columns that describe pi_theta at temperature 1 (docs/conventions.md, "The frames")
POLICY_COLUMNS = ("token_entropy", "logprob")
# columns only gcpo train's own loop writes: a frame with them and no temperature column is one of
# its frames from before the convention, whose POLICY_COLUMNS were at the sampling temperature
TRAINER_COLUMNS = ("advantage", "reward_failed")
# rollouts columns that cannot be negative, and why: refused naming the row, never averaged in
NONNEGATIVE_ROLLOUT_COLUMNS = {
    "token_entropy": "a mean per-token entropy",
    "ratio_var": "a variance of the policy ratio",
    "n_tokens": "a completion length",
}
# Columns of the two frames that are not measures: a measure (a groups column named as the
# measure, its weight w_<name>) may not take one of these names, nor a name with one of the
# prefixes (w_: every measure's weight; train_, grad_var_: the training study's and V's parts),
# or it would overwrite that column (issue 38). token_entropy is both a rollouts column and the
# measure that averages it.
RESERVED_COLUMNS = frozenset(
    ROLLOUT_REQUIRED
    + ("references", "logprob", "temperature", "n_tokens", "success", "dataset", "step", "ratio_var")
    + TRAINER_COLUMNS
    + GROUP_REQUIRED
    + ("mean_reward", "success_rate", "n_clusters", "grad_var", "grad_norm2_mean", "t_generate", "t_gradvar")
    + ("grad_cos_abs_mean", "n_tokens_mean", "cap_share", "adv_all_zero", "phase", "prompt", "task", "G_eff")
)
RESERVED_PREFIXES = ("w_", "train_", "grad_var_", "t_")


def reserved_column(name: str) -> str | None:
    """Why ``name`` may not be a measure's column (a frame column or prefix of one), else None."""
    if name in RESERVED_COLUMNS:
        return f"{name!r} is a column of the rollouts or groups frame"
    for prefix in RESERVED_PREFIXES:
        if name.startswith(prefix):
            return f"names starting with {prefix!r} are reserved for the frames' {prefix}* columns"
    return None


# groups columns that are shares of the group's rollouts
SHARE_GROUP_COLUMNS = ("success_rate",)


def _show(value) -> str:
    """repr of a cell as a user wrote it (1, not np.int64(1))."""
    return repr(value.item() if isinstance(value, np.generic) else value)


class FrameError(ValueError):
    """A frame that does not follow docs/conventions.md's frames; the message names column and row."""


def check_columns(df: pd.DataFrame, required, kind: str, source: str | None, has=None) -> None:
    """A FrameError naming the ``required`` columns a ``kind`` frame (from ``source``) lacks and
    listing the ones it has; ``has``: the columns to list as the file's (default ``df``'s), where
    ``df`` holds derived ones. The one missing-column check of the frames gcpo reads."""
    where = f" in {source}" if source else ""
    missing = [c for c in required if c not in df.columns]
    if missing:
        listed = list(df.columns if has is None else has)
        raise FrameError(f"{kind} frame{where} is missing required column(s) {missing}; it has {listed}")


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
                f"rollouts frame: column {col!r} is null at row {row} (query_id={_show(df['query_id'].iloc[row])})"
            )
    dup = df.duplicated(["query_id", "rollout_id"]).to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        raise FrameError(
            f"rollouts frame: duplicate (query_id, rollout_id) = "
            f"({_show(df['query_id'].iloc[row])}, {_show(df['rollout_id'].iloc[row])}) at row {row}"
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
            f"{kind} frame{where}: column {col!r} must hold text, got {_show(cell)[:80]} "
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
            f"{kind} frame{where}: column {col!r} mixes types: {_show(values.iloc[0])} ({first}) "
            f"at row 0 and {_show(values.iloc[row])} ({kinds.iloc[row]}) at row {row}; use one type"
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
            f"got {_show(df[col].iloc[row])} at row {row} (query_id={_show(df['query_id'].iloc[row])})"
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
            f"{kind} frame{where}: column {col!r} must be numeric, got {_show(values.iloc[row])} "
            f"({type(values.iloc[row]).__name__}) at row {row} (query_id={_show(qid)})"
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
            f"groups frame{where}: query_id {_show(df['query_id'].iloc[row])} repeats at row {row}; one row per query"
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


def read_frame(path: str | Path, kind: str = "rollouts") -> pd.DataFrame:
    """Read a Parquet, JSONL or CSV frame and validate it as ``kind`` ('rollouts' or 'groups')."""
    df = read_table(path, kind)
    if kind == "rollouts":
        return validate_rollouts(df, source=str(path))
    if kind == "groups":
        return validate_groups(df, source=str(path))
    raise ValueError(f"unknown frame kind {kind!r}; expected 'rollouts' or 'groups'")


CSV_TEXT_COLUMNS = ("query_id", "rollout_id", "completion", "answer", "prompt", "question")


def read_table(path: str | Path, kind: str = "rollouts", text_columns=()) -> pd.DataFrame:
    """Read a Parquet, JSONL or CSV file as it is (no schema check; ``read_frame`` checks).
    A CSV's id and text columns (``CSV_TEXT_COLUMNS`` and ``text_columns``) are read as strings."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such {kind} file: {path}")
    if path.is_file() and path.stat().st_size == 0:  # pandas said "No columns to parse from file", unnamed
        raise FrameError(f"{path}: the {kind} file is empty (no header, no rows)")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            df = pd.read_parquet(path)
        elif suffix in (".jsonl", ".ndjson"):
            df = _read_jsonl(path)
        elif suffix == ".json":  # values as written: no type guessing ("01" stays a string, not 1)
            df = pd.read_json(path, dtype=False)
        elif suffix == ".csv":
            df = _read_csv(path, CSV_TEXT_COLUMNS + tuple(text_columns))
        else:
            raise FrameError(f"{path}: unknown frame format {suffix!r} (use .parquet, .jsonl or .csv)")
    except UnicodeDecodeError as err:
        from .errors import not_utf8

        raise not_utf8(path, err) from None
    return df


# pandas' default NA strings, read as missing only in a CSV's non-text columns (numbers)
CSV_NA_STRINGS: tuple[str, ...] = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND")
CSV_NA_STRINGS += ("1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


def _read_csv(path: Path, text_columns) -> pd.DataFrame:
    """A CSV with its id and text columns as written: strings ("01" and "1" are two queries, "42"
    is text) and "None", "NA", "null" or an empty cell as those texts, not as missing values
    (which pandas makes of them by default); other columns read pandas' NA strings as missing."""
    header = pd.read_csv(path, nrows=0).columns
    text = [c for c in header if c in text_columns]
    return pd.read_csv(
        path,
        dtype={c: str for c in text},
        keep_default_na=False,
        na_values={c: list(CSV_NA_STRINGS) for c in header if c not in text},
    )


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


def _read_jsonl(path: Path) -> pd.DataFrame:
    import json

    records = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise FrameError(f"{path}, line {lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise FrameError(
                    f"{path}, line {lineno}: a JSONL line must be one JSON object (one row), "
                    f"got a {type(record).__name__}"
                )
            records.append(record)
    return pd.DataFrame.from_records(records)


def write_frame(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a frame atomically (a temporary file then a rename, so nothing written is lost).
    Any failure (the path is a folder, a parent is a file, the disk is full) removes the
    temporary file and raises OSError naming the path."""
    path = Path(path)
    suffix = path.suffix.lower()

    def jsonl(f):
        df.to_json(f, orient="records", lines=True, force_ascii=False)

    writers = {
        ".parquet": lambda f: df.to_parquet(f, index=False),
        ".jsonl": jsonl,
        ".ndjson": jsonl,
        ".csv": lambda f: df.to_csv(f, index=False),
    }
    if suffix not in writers:
        raise FrameError(f"{path}: unknown frame format {suffix!r} (use .parquet, .jsonl or .csv)")
    _atomic(path, writers[suffix])
    return path


# Tables (CSV) keep 10 significant digits: a full float repr's last digits change with the CPU's
# summation order (a bootstrap quantile, a regression), and a study's tables must regenerate byte
# for byte on another machine; the frames (Parquet) keep full precision.
TABLE_FLOAT_FORMAT = "%.10g"


def write_table(df: pd.DataFrame, path: str | Path, index: bool = False) -> Path:
    """A table as CSV, atomically (``write_frame``'s rename), floats at ``TABLE_FLOAT_FORMAT``."""
    path = Path(path)
    _atomic(path, lambda f: df.to_csv(f, index=index, float_format=TABLE_FLOAT_FORMAT))
    return path


def write_text(path: str | Path, text: str) -> Path:
    """``write_frame``'s atomic write for a text file (sidecars, run cards)."""
    path = Path(path)
    _atomic(path, lambda f: Path(f).write_text(text, encoding="utf-8"))
    return path


def write_json(path: str | Path, obj, *, indent: int | None = 2, default=None, newline: bool = False) -> Path:
    """``write_text`` of ``json.dumps(obj, indent=indent, default=default)`` (a trailing newline
    when ``newline``): the atomic writer of every JSON output (run cards, sidecars, metrics)."""
    import json

    return write_text(path, json.dumps(obj, indent=indent, default=default) + ("\n" if newline else ""))


def write_figure(fig, path: str | Path, **savefig_kw) -> Path:
    """``fig.savefig`` through the atomic write: the format is the suffix of ``path``
    (``.png``, ``.svg``, ``.pdf``), as matplotlib would infer it from the final name."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt in ("svg", "pdf"):
        # a rerun draws the same bytes: no creation date, and SVG's element ids from a fixed salt
        # (matplotlib otherwise salts them at random)
        savefig_kw.setdefault("metadata", {"Date": None} if fmt == "svg" else {"CreationDate": None})
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "gcpo"}):
        _atomic(path, lambda f: fig.savefig(f, format=fmt, **savefig_kw))
    return path


def _atomic(path: Path, write) -> None:
    from .outputs import atomic_write

    atomic_write(path, write)
