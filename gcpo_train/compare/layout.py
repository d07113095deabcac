"""Where a comparison's files live: ``OUT/runs/<arm folder>/seed_<s>/`` for each arm-seed run
(the rest of the layout is in ``compare.run``'s docstring). One function, imported by the runner,
the report and the treatment tables alike, so a run's folder is named in one place; and one that
finds the finished runs (``finished_runs``: a ``done.json``, written once trained and evaluated)."""

from __future__ import annotations

import re
from pathlib import Path

# the files of a comparison folder besides its plan (compare.run's record and results,
# compare.report's tables, gcpo pilot span-gate --compare's gate.md), lower case
COMPARISON_FILES = (
    "compare.json",
    "results.parquet",
    "summary.md",
    "summary.csv",
    "control.csv",
    "coupling.csv",
    "gate.md",
)


def arm_folder(out, arm: str) -> Path:
    """``out/runs/<arm's folder name>``, the parent of the arm's seed folders (``bot_rd:shuffled``
    lives in ``bot_rd-shuffled``, ``measures.shuffled.arm_folder_name``)."""
    from gcpo_analysis.measures.shuffled import arm_folder_name

    return Path(out) / "runs" / arm_folder_name(arm)  # a folder name: never a path


def arm_seed_folder(out, arm: str, seed: int) -> Path:
    """``out/runs/<arm's folder name>/seed_<seed>``: the one place that names a run's folder."""
    folder = arm_folder(out, arm) / f"seed_{seed}"
    legacy = Path(out) / "runs" / arm / f"seed_{seed}"
    if legacy != folder and legacy.exists() and not folder.exists():  # made before the ':' was dropped
        raise ValueError(f"{legacy} is {arm!r}'s run from an older gcpo: rename {legacy.parent} to {folder.parent}")
    return folder


def finished_runs(out, arm: str | None = None, seed: int | None = None) -> list[Path]:
    """The run folders under ``out/runs`` whose run finished (``done.json``), sorted; only
    ``arm``'s or only ``seed``'s when given."""
    parent = Path(out) / "runs" if arm is None else arm_folder(out, arm)
    pattern = ("*/" if arm is None else "") + ("seed_*" if seed is None else f"seed_{seed}") + "/done.json"
    return sorted(done.parent for done in parent.glob(pattern))


SEED_FOLDER = re.compile(r"seed_(0|[1-9][0-9]*)")  # f"seed_{seed}", seeds >= 0: seed_00 is no run's


def finished_seeds(out, arm: str) -> list[int]:
    """The seeds of ``arm`` whose run finished (``done.json``), sorted: what the report describes,
    and what a published copy of the folder holds. A finished run in a folder ``arm_seed_folder``
    does not name (seed_00, seed_x) is refused by name: it is a copy or a rename by hand, and
    read as a seed it would count that seed's rollouts, logs or evaluations a second time."""
    seeds = []
    for run in finished_runs(out, arm=arm):
        m = SEED_FOLDER.fullmatch(run.name)
        if m is None:
            raise ValueError(
                f"{run}: not a run of the comparison (gcpo compare names a seed's folder seed_<s>, "
                f"e.g. seed_0); move it out of {run.parent}"
            )
        seeds.append(int(m[1]))
    return sorted(seeds)
