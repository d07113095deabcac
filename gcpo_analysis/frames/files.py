"""Reading and writing frames and every other output: Parquet, JSONL, JSON or CSV in (a CSV's ids and
texts kept as written), and atomic writes out (a temporary file renamed into place, so a failed
write loses nothing)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .schema import FrameError
from .validate import validate_groups, validate_rollouts


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
        from ..errors import not_utf8

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
# summation order (a bootstrap quantile, a regression), and a study's tables must regenerate on
# another machine (up to a last-digit rounding where a value sits at a rounding boundary); the
# frames (Parquet) keep full precision.
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
    from ..outputs import atomic_write

    atomic_write(path, write)
