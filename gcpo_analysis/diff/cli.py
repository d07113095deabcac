"""``gcpo diff REFERENCE OTHER``: does OTHER reproduce REFERENCE? One row per file, exit 1 if not."""

from __future__ import annotations

import argparse
import math
import textwrap

from .folders import DEFAULT_RTOL, RANK_TABLES

_RANK_TABLES = textwrap.fill("(in a tables/ folder: " + ", ".join(RANK_TABLES) + ")", 79)
DESCRIPTION = f"""Compare two output folders file by file (a committed study and a fresh
run of it, say).

Each file is `equal` (every value the same), `within RTOL` (every number within
the relative tolerance |a - b| / max(|a|, |b|) <= RTOL, its largest relative
difference shown; texts, shapes, columns and keys the same), `differs`,
`missing` (in one folder only) or `skipped` (a rendered figure). Rank tables
{_RANK_TABLES}
must be equal: their statistics read ranks only, so a difference there is a
rank that moved. Markdown and text files are compared word by word and number
by number; a printed number one unit apart in its last digit counts as
rounding. Not compared: JSON run times, dates, versions, the environment and
paths; frame columns of run times (t_*, time_*); a study's restart cache parts/.

The same machine reproduces a study byte for byte; another processor of the
committed studies' family within {DEFAULT_RTOL:g}, while one with AMX units moved
magnitudes beyond it (docs/guides/reproducibility.md). Exit status 1 when a file
differs or is missing, else 0.
"""


def _rtol(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def add_parser(sub):
    p = sub.add_parser(
        "diff",
        help="compare two output folders: equal, within a relative tolerance, or different",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("reference", metavar="REFERENCE", help="the folder to reproduce (a committed study, say)")
    p.add_argument("other", metavar="OTHER", help="the folder to check against it (a fresh run)")
    p.add_argument(
        "--rtol",
        type=_rtol,
        default=DEFAULT_RTOL,
        help=f"relative tolerance of the numbers outside rank tables; 0 asks every value to be equal "
        f"(default: {DEFAULT_RTOL:g})",
    )
    p.add_argument(
        "--exact",
        action="append",
        default=[],
        metavar="GLOB",
        help="also require files whose path matches GLOB to be equal, as rank tables are (repeatable)",
    )
    p.set_defaults(func=_run_diff, _parser=p)


def _run_diff(args) -> int:
    from .folders import compare_folders, failed, format_table

    rows = compare_folders(args.reference, args.other, rtol=args.rtol, exact=tuple(args.exact))
    print(format_table(rows, args.rtol))
    return int(failed(rows))
