"""A comparison's record, ``OUT/compare.json``: what was compared (the config, the arms and seeds,
the steps, the evaluation and its margin), written by ``Comparison`` and read back by every later
run, the report, the planner and the publishing script. Read as untrusted: a file that is not a
record, or a field of the wrong type, is refused by name, never turned into a wrong report."""

from __future__ import annotations

import json
import math
from pathlib import Path


def read_json_mapping(path: Path, what: str, shape: str, unreadable: str, not_mapping: str) -> dict:
    """The JSON object in ``path``, or a ValueError naming the file as no readable ``what`` (what
    to do: ``unreadable``) or as no ``what`` of the ``shape`` it must have (``not_mapping``): the
    one reader of the comparison's records (compare.json, done.json, an evaluation's .json)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path} is not a readable {what} ({type(err).__name__}: {err}); {unreadable}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} is not a {what} ({shape}); {not_mapping}")
    return record


def read_record(path: Path) -> dict:
    """A comparison's ``compare.json``, or a ValueError naming the file when it is not one."""
    shape = "no 'config' mapping"
    remedy = "restore it, or use another --output"
    record = read_json_mapping(path, "comparison record", shape, remedy + " folder", remedy)
    if not isinstance(record.get("config"), dict):
        raise ValueError(f"{path} is not a comparison record ({shape}); {remedy}")
    _check_record_fields(path, record)
    return record


def _check_record_fields(path: Path, record: dict) -> None:
    """The fields of compare.json that listing and reporting read, each of its type, or a
    ValueError naming the field (a hand-edited record must not become a wrong report)."""

    def bad(field: str, want: str):
        return ValueError(f"{path}: field {field!r} must be {want}, got {record[field]!r}; restore the file")

    seeds = record.get("seeds", [])
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise bad("seeds", "a list of integers")
    arms = record.get("modulators", [])
    if not isinstance(arms, list) or not all(isinstance(a, str) and a for a in arms):
        raise bad("modulators", "a list of names")
    margin = record.get("equivalence_margin", 0.1)
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 < margin < 1:
        raise bad("equivalence_margin", "a number in (0, 1), a share of GRPO's held-out score")
    steps = record.get("steps", 1)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise bad("steps", "a positive integer")
    # the trainer's meanings (config.max_grad_norm, loop.update): 0 or null clips nothing, absent is
    # the default 1.0; NaN (which json reads) made every step count as not clipped, "0%"
    clip = record["config"].get("max_grad_norm")
    if clip is not None and (
        isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip < 0
    ):
        raise ValueError(
            f"{path}: config field 'max_grad_norm' must be a finite number >= 0 (0 or null: no clipping), "
            f"got {clip!r}; restore the file"
        )


def read_spec(out: Path) -> dict:
    """The record of the comparison folder ``out`` (``read_record``), {} when it has none yet."""
    path = Path(out) / "compare.json"
    return read_record(path) if path.exists() else {}


def read_done(path: Path) -> dict:
    """A finished run's ``done.json`` (``Comparison.train_arm``: arm, seed, steps, and the torch
    threads of runs finished since that record), or a ValueError naming the file and the field.
    A truncated or hand-edited marker must stop the command that reads it by name, not as a
    KeyError or a JSONDecodeError naming nothing."""
    record = read_json_mapping(
        path,
        "run record",
        "a mapping of arm, seed, steps",
        "restore it, or remove it and rerun gcpo compare to finish the run again",
        "restore it",
    )

    def count(value, low: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= low

    wanted = {
        "arm": ("a non-empty name", lambda v: isinstance(v, str) and bool(v)),
        "seed": ("an integer >= 0", lambda v: count(v, 0)),
        "steps": ("an integer >= 1", lambda v: count(v, 1)),
    }
    for field, (want, ok) in wanted.items():
        if field not in record:
            raise ValueError(f"{path}: field {field!r} is missing (it must be {want}); restore the file")
        if not ok(record[field]):
            raise ValueError(f"{path}: field {field!r} must be {want}, got {record[field]!r}; restore the file")
    if "threads" in record and not count(record["threads"], 1):  # absent in runs finished before it was recorded
        raise ValueError(f"{path}: field 'threads' must be an integer >= 1, got {record['threads']!r}; restore it")
    return record
