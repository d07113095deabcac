"""How far apart two recorded values are: numbers by their relative difference, everything else exactly.

The relative difference of two numbers is ``|x - y| / max(|x|, |y|)`` (0 when both are 0 or equal,
infinite when one is NaN or infinite and the other is not; two NaNs are the same missing value).
A ``Gap`` collects, over a whole file, the largest relative difference, how many numbers differ,
and the differences no tolerance covers (a text, a shape, a key, a dtype): ``structure``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# JSON keys that are not recorded numbers of the method: never compared (a folder written on
# another day, by another version or on another machine differs there by design)
IGNORED_KEYS = {
    "started": "wall-clock date",
    "finished": "wall-clock date",
    "at": "wall-clock date",
    "date": "wall-clock date",
    "seconds": "run time",
    "timings_s": "run time per stage",
    "timing_note": "run time",
    "tokens_per_s": "throughput (time)",
    "wall_seconds": "run time",
    "peak_rss_gb_finishing_process": "memory use",
    "versions": "library versions",
    "version": "package version",
    "gcpo_version": "package version",
    "environment": "gcpo version and commit, processor, threads",
    "policy_load": "where the packaged policy was read from (its cache or the GGUF: the same weights)",
    "restat": "the record of a later re-scoring (its tables are compared)",
}
# paths of inputs and outputs: ignored when both values are strings or null (a number under the
# same name is still compared)
PATH_KEYS = {
    "path",
    "output",
    "output_dir",
    "run",
    "source",
    "data_path",
    "from_rollouts",
    "target_from",
    "source_checkpoint",
}
IGNORED_PATTERNS = {  # key regex -> why
    r"(^|/)time_": "run time of a phase (log.jsonl time_generate, time_total; TRL gcpo/time_weights)",
    r"(^|_)(runtime|step_time)$|_per_second$": "run time, throughput (TRL's trainer_state log_history)",
}
# frame columns that are run times: `t_generate`, `t_gradvar` (the groups frame reserves the prefix
# t_ for them: frames.schema.RESERVED_PREFIXES) and a trainer log's time_*
TIME_COLUMN = re.compile(r"^(t|time)_")
# lists compared as sets: their writer serializes a Python set, in string-hash order (PYTHONHASHSEED)
UNORDERED_KEYS = {"target_modules": "peft's adapter_config.json"}
# an absolute path inside a text ("packaged:SmolLM2 (/home/me/.venv/.../model.gguf)"): compared by its last part
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+)")


def rel_diff(x: float, y: float) -> float:
    """``|x - y| / max(|x|, |y|)``; 0 for equal values (two NaNs included), inf for NaN or inf against another value."""
    if x == y or (math.isnan(x) and math.isnan(y)):
        return 0.0
    if not (math.isfinite(x) and math.isfinite(y)):
        return math.inf
    return abs(x - y) / max(abs(x), abs(y))


def rel_diffs(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``rel_diff`` elementwise on two float arrays of one shape."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.abs(x - y) / np.maximum(np.abs(x), np.abs(y))
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    d = np.where(same, 0.0, d)
    return np.where(np.isnan(d), np.inf, d)  # NaN against a number, inf against another value


@dataclass
class Gap:
    """What separates two files: numbers that differ (count, largest relative difference, where),
    numbers that differ only in their last printed digit (a text's rounding), and structure."""

    n_numbers: int = 0
    max_rel: float = 0.0
    where: str = ""
    n_last_digit: int = 0
    structure: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.n_numbers or self.n_last_digit or self.structure)

    def add(self, d: np.ndarray | float, where: str) -> None:
        d = np.atleast_1d(np.asarray(d, dtype=float))
        n = int((d > 0).sum())
        if n:
            self.n_numbers += n
            top = float(d.max())
            if top > self.max_rel or not self.where:
                self.max_rel, self.where = top, where


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def ignored_reason(key: str, a=None, b=None) -> str | None:
    """Why the JSON key ``key`` (values a, b) is not compared, or None when it is."""
    if key in IGNORED_KEYS:
        return IGNORED_KEYS[key]
    if key in PATH_KEYS and all(v is None or isinstance(v, str) for v in (a, b)):
        return "file system path"
    return next((why for p, why in IGNORED_PATTERNS.items() if re.search(p, key)), None)


def json_gap(a, b, gap: Gap, where: str = "", ignored: set[str] | None = None) -> Gap:
    """Walk two parsed JSON values into ``gap``: numbers by relative difference, the rest exactly
    (an int against a float is a change of type; ignored keys are skipped and, when their values
    differed, named in ``ignored``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if ignored_reason(str(k), a.get(k), b.get(k)):
                if ignored is not None and a.get(k) != b.get(k):
                    ignored.add(str(k))
            elif k not in a or k not in b:
                gap.structure.append(f"{where}.{k}: only in {'B' if k not in a else 'A'}")
            elif k in UNORDERED_KEYS and isinstance(a[k], list) and isinstance(b[k], list):
                json_gap(sorted(a[k], key=str), sorted(b[k], key=str), gap, f"{where}.{k}", ignored)
            else:
                json_gap(a[k], b[k], gap, f"{where}.{k}", ignored)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            gap.structure.append(f"{where}: length {len(a)} vs {len(b)}")
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                json_gap(x, y, gap, f"{where}[{i}]", ignored)
    elif _is_number(a) and _is_number(b) and type(a) is type(b):
        gap.add(rel_diff(float(a), float(b)), where or "<root>")
    elif isinstance(a, str) and isinstance(b, str) and a != b:
        if _ABSOLUTE_PATH.sub(r"\1", a) != _ABSOLUTE_PATH.sub(r"\1", b):
            gap.structure.append(f"{where or '<root>'}: {a[:60]!r} vs {b[:60]!r}")
    elif type(a) is not type(b) or (a != b and not isinstance(a, str)):
        gap.structure.append(f"{where or '<root>'}: {a!r} vs {b!r}")
    return gap


# a number as a table or a summary prints it: sign, digits, decimals, exponent
_NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


def _last_digit_unit(text: str) -> float:
    """One unit in the last printed digit of a number's text (0.0123 -> 1e-4, 2.5e-07 -> 1e-8)."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** (int(exponent or 0) - decimals)


def _float(text: str) -> float:
    return float(text.replace("−", "-"))


def text_gap(a: str, b: str, gap: Gap, rtol: float) -> Gap:
    """Two texts (Markdown tables, summaries): the words between the numbers exactly; each number
    by its relative difference, except that, with a tolerance (``rtol`` > 0), two printed numbers
    one unit apart in their last digit count as rounding (values within ``rtol`` can round either
    way there; the table's CSV twin holds the values themselves)."""
    words_a, words_b = _NUMBER.split(a), _NUMBER.split(b)
    nums_a, nums_b = _NUMBER.findall(a), _NUMBER.findall(b)
    if len(nums_a) != len(nums_b) or [_ABSOLUTE_PATH.sub(r"\1", w) for w in words_a] != [
        _ABSOLUTE_PATH.sub(r"\1", w) for w in words_b
    ]:
        gap.structure.append(_first_line_difference(a, b))
        return gap
    for i, (x, y) in enumerate(zip(nums_a, nums_b)):
        if x == y:
            continue
        d = rel_diff(_float(x), _float(y))
        unit = max(_last_digit_unit(x), _last_digit_unit(y))
        if 0 < rtol < d and abs(_float(x) - _float(y)) <= unit * (1 + 1e-9):
            gap.n_last_digit += 1
        else:
            gap.add(d, f"number {i + 1}: {x} vs {y}")
    return gap


def _first_line_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb), 1):
        if x != y:
            return f"line {i}: {x[:70]!r} vs {y[:70]!r}"
    return f"{len(la)} vs {len(lb)} lines"


def frame_gap(a, b, gap: Gap) -> Gap:
    """Two data frames: the same columns, shape and dtypes; numeric columns (and arrays in cells,
    such as an embedding per row) by relative difference, run times (``TIME_COLUMN``) not at all,
    every other column exactly."""
    import pandas as pd

    if list(a.columns) != list(b.columns) or a.shape != b.shape:
        only_a, only_b = sorted(set(a.columns) - set(b.columns)), sorted(set(b.columns) - set(a.columns))
        gap.structure.append(f"shape {a.shape} vs {b.shape}; columns only in A {only_a}, only in B {only_b}")
        return gap
    for c in a.columns:
        x, y = a[c], b[c]
        if TIME_COLUMN.match(str(c)):
            continue
        if x.dtype != y.dtype:
            gap.structure.append(f"{c}: dtype {x.dtype} vs {y.dtype}")
        elif pd.api.types.is_numeric_dtype(x) and not pd.api.types.is_bool_dtype(x):
            d = rel_diffs(x.to_numpy(dtype=float), y.to_numpy(dtype=float))
            if d.any():
                gap.add(d, f"{c}, row {int(np.argmax(d))}")
        elif x.map(lambda v: isinstance(v, np.ndarray) and v.dtype.kind == "f").all() and len(x):
            _array_cells(x, y, c, gap)
        elif not x.equals(y):
            n = int((x.astype(str) != y.astype(str)).sum())
            gap.structure.append(f"{c}: {n} values differ" if n else f"{c}: values differ")
    return gap


def _array_cells(x, y, column: str, gap: Gap) -> None:
    for row, (u, v) in enumerate(zip(x, y)):
        if u.shape != v.shape:
            gap.structure.append(f"{column}, row {row}: shape {u.shape} vs {v.shape}")
            return
        d = rel_diffs(u, v)
        if d.any():
            gap.add(d, f"{column}, row {row}")


def tensors_gap(a: Path, b: Path, gap: Gap) -> Gap:
    """Two safetensors files: the same tensor names and shapes, values by relative difference."""
    from safetensors.numpy import load_file

    ta, tb = load_file(str(a)), load_file(str(b))
    if set(ta) != set(tb):
        gap.structure.append(
            f"tensors only in A {sorted(set(ta) - set(tb))[:3]}, only in B {sorted(set(tb) - set(ta))[:3]}"
        )
        return gap
    for k in sorted(ta):
        if ta[k].shape != tb[k].shape:
            gap.structure.append(f"{k}: shape {ta[k].shape} vs {tb[k].shape}")
        else:
            d = rel_diffs(ta[k].astype(float).ravel(), tb[k].astype(float).ravel())
            if d.any():
                gap.add(d, k)
    return gap
