"""Compare two output folders: equal, within a relative tolerance, or different (``gcpo diff``).

``compare_folders(a, b, rtol)`` gives one ``FileResult`` per file; docs/guides/reproducibility.md
says what reproduces where.
"""

from .folders import DEFAULT_RTOL, RANK_TABLES, FileResult, compare_folders, failed, format_table, is_rank_table
from .values import Gap, rel_diff, rel_diffs

__all__ = [
    "DEFAULT_RTOL",
    "RANK_TABLES",
    "FileResult",
    "Gap",
    "compare_folders",
    "failed",
    "format_table",
    "is_rank_table",
    "rel_diff",
    "rel_diffs",
]
