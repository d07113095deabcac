"""``gcpo diff A B``: whether folder B reproduces folder A, file by file, and how closely.

Each file present in both folders gets one status:

- ``equal``: every value the same (a CSV or JSON whose text differs only in formatting too);
- ``within tol``: every number within the relative tolerance ``rtol`` (the largest relative
  difference is reported), everything else (texts, shapes, columns, keys) the same;
- ``differs``: anything beyond that, or any change at all in a rank table;
- ``missing``: in one folder only; ``skipped``: a rendered figure (png, svg, pdf).

Rank tables (``RANK_TABLES``) hold statistics of ranks only (Spearman ρ, their CIs, p-values,
AUCs): a relative change of ``rtol`` in V moves no rank unless two values lie that close, so
these tables must be equal, and a difference there is a rank that moved. The magnitudes (V, the
Gram entries, mean absolute errors, Lipschitz ratios) are summed in float32 by the backward pass,
in an order the processor's kernels choose: on another processor of the committed studies'
family they move in the 6th to 7th significant digit, so they are compared within ``rtol``; one
with AMX units moved them further (docs/guides/reproducibility.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

from .values import IGNORED_KEYS, Gap, frame_gap, json_gap, tensors_gap, text_gap

# figures/default_study against a fresh `gcpo study` (docs/guides/reproducibility.md): largest
# relative difference 3.1e-6 (the rollouts' float32 log-probabilities), 7.1e-7 in the groups
# frame, 1.8e-7 in a table; the next power of ten above the largest
DEFAULT_RTOL = 1e-5
# file names (in a tables/ folder, untrimmed/ included) of the study's tables of rank statistics
RANK_TABLES = (
    "spearman*",
    "success.*",
    "bootstrap.*",
    "confirmatory.*",
    "decomposition.*",
    "retrieval*",
    "size_control*",
    "v_parts_measures.*",
)
SKIPPED_SUFFIXES = (".png", ".svg", ".pdf")  # rendered figures: not recorded numbers
# top-level folders not compared: a study's restart cache (the same numbers as its frames) and
# scripts/check_recorded_outputs.py's command logs
SKIPPED_FOLDERS = {"parts": "a study's restart cache", "_produce": "command logs"}
STATUSES = ("equal", "within tol", "differs", "missing", "skipped")


@dataclass
class FileResult:
    """One file's comparison: its path in both folders, status, largest relative difference, why."""

    path: str
    status: str
    max_rel: float | None = None
    detail: str = ""


def is_rank_table(rel: str, exact: tuple[str, ...] = ()) -> bool:
    """Whether ``rel`` (a path inside the folder) must be equal: a rank table of a ``tables/``
    folder, or a file matching one of the ``exact`` globs (matched against the whole path)."""
    path = PurePosixPath(rel)
    in_tables = "tables" in path.parts[:-1]
    return (in_tables and any(fnmatch(path.name, g) for g in RANK_TABLES)) or any(fnmatch(rel, g) for g in exact)


def file_gap(a: Path, b: Path, rtol: float) -> Gap:
    """What separates two files of one name, read by their suffix."""
    import pandas as pd

    gap = Gap()
    suffix = a.suffix.lower()
    if a.read_bytes() == b.read_bytes():
        return gap
    if suffix == ".parquet":
        return frame_gap(pd.read_parquet(a), pd.read_parquet(b), gap)
    if suffix == ".csv":  # pandas >= 3 parses floats round-trip
        return frame_gap(pd.read_csv(a), pd.read_csv(b), gap)
    if suffix == ".safetensors":
        return tensors_gap(a, b, gap)
    if suffix in (".json", ".jsonl"):
        return json_gap(_read_json(a), _read_json(b), gap)
    try:
        return text_gap(a.read_text(encoding="utf-8"), b.read_text(encoding="utf-8"), gap, rtol)
    except UnicodeDecodeError:
        gap.structure.append(f"bytes differ ({a.stat().st_size} vs {b.stat().st_size} bytes)")
        return gap


def _read_json(path: Path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def judge(rel: str, gap: Gap, rtol: float, exact: tuple[str, ...] = ()) -> FileResult:
    """The status of a file from its gap: equal, within tol or differs (a rank table has no tolerance)."""
    if gap.exact:
        return FileResult(rel, "equal", 0.0)
    rounding = f"{gap.n_last_digit} printed numbers one unit apart in the last digit" if gap.n_last_digit else ""
    numbers = f"{gap.n_numbers} numbers differ, largest at `{gap.where}`" if gap.n_numbers else ""
    detail = "; ".join(x for x in (*gap.structure[:3], numbers, rounding) if x)
    if len(gap.structure) > 3:
        detail += f" (+{len(gap.structure) - 3} more)"
    if is_rank_table(rel, exact):
        return FileResult(rel, "differs", gap.max_rel, "rank table, must be equal: " + detail)
    if gap.structure or gap.max_rel > rtol:
        return FileResult(rel, "differs", gap.max_rel, detail)
    return FileResult(rel, "within tol", gap.max_rel, detail)


def _files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] not in SKIPPED_FOLDERS
    }


def compare_folders(a, b, rtol: float = DEFAULT_RTOL, exact: tuple[str, ...] = ()) -> list[FileResult]:
    """Every file of either folder, compared (``FileResult`` per file, sorted by path)."""
    a, b = Path(a), Path(b)
    for folder, flag in ((a, "REFERENCE"), (b, "OTHER")):
        if not folder.is_dir():
            raise FileNotFoundError(f"{flag} {folder} is not a folder")
    if not (rtol >= 0):
        raise ValueError(f"--rtol must be >= 0, got {rtol}")
    rows = []
    for rel in sorted(_files(a) | _files(b)):
        fa, fb = a / rel, b / rel
        if rel.lower().endswith(SKIPPED_SUFFIXES):
            rows.append(FileResult(rel, "skipped", None, "rendered figure"))
        elif not fa.exists() or not fb.exists():
            rows.append(FileResult(rel, "missing", None, f"only in {'OTHER' if not fa.exists() else 'REFERENCE'}"))
        else:
            try:
                gap = file_gap(fa, fb, rtol)
            except (ValueError, OSError) as err:  # unreadable in one folder: a difference, named
                gap = Gap(structure=[f"could not be read and compared: {err}"])
            rows.append(judge(rel, gap, rtol, exact))
    return rows


def failed(rows: list[FileResult]) -> bool:
    """Whether anything differs beyond the tolerance or is missing (``gcpo diff`` exits 1)."""
    return any(r.status in ("differs", "missing") for r in rows)


def format_table(rows: list[FileResult], rtol: float) -> str:
    """The Markdown table ``gcpo diff`` prints: file, status, max rel diff, detail, then the counts."""
    from tabulate import tabulate

    body = [[r.path, r.status if r.status != "within tol" else f"within {rtol:g}", _rel(r), r.detail] for r in rows]
    table = tabulate(body, headers=["file", "status", "max rel diff", "detail"], tablefmt="github")
    counts = "; ".join(f"{sum(r.status == s for r in rows)} {s}" for s in STATUSES)
    return (
        f"{table}\n\n{counts} (relative tolerance {rtol:g}; rank tables must be equal)\n"
        f"JSON keys not compared: {', '.join(sorted(IGNORED_KEYS))}, run times, and paths; frame columns "
        f"t_*, time_* (run times); folders not compared: "
        + ", ".join(f"{name}/ ({why})" for name, why in SKIPPED_FOLDERS.items())
    )


def _rel(r: FileResult) -> str:
    if r.max_rel is None:
        return ""
    return "0" if r.max_rel == 0 else f"{r.max_rel:.2g}"
