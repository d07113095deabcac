"""Copy what a ``gcpo compare`` folder has finished into a folder meant for git (issue 35's
comparisons are committed as their arm-seeds land, across sessions):

    python scripts/publish_comparison.py runs/nqa_fp32_pilot figures/train_compare/nqa_fp32/confirmatory

What is copied: the comparison's record and report (compare.json, base/, results.parquet,
summary.md/csv, control.csv, coupling.csv, figures/, plan.md, gate.md, nopassage/) and, of every arm-seed run
with a ``done.json`` (finished and evaluated), its done.json, run.json, log.jsonl, eval/ and
rollouts/. Never copied: checkpoints (tens of MB a run; the no-passage control reads them in the
source folder), locks and owner files (``.gcpo*``), and unfinished runs (a half-trained run is
not a result). The destination must be new or an earlier copy of the same comparison (its
compare.json's config equal); files of the destination that the source no longer has are left.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

TOP = (
    "compare.json",
    "results.parquet",
    "summary.md",
    "summary.csv",
    "control.csv",
    "coupling.csv",
    "plan.md",
    "gate.md",
)
TOP_FOLDERS = ("base", "figures", "nopassage")
RUN_FILES = ("done.json", "run.json", "log.jsonl")
RUN_FOLDERS = ("eval", "rollouts")


def _config(folder: Path) -> dict:
    from gcpo_train.compare.run import read_record

    path = folder / "compare.json"
    try:
        return read_record(path)["config"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: not a gcpo compare record ({type(e).__name__}: {e})") from None


def _skip(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n.startswith(".gcpo") or n == "checkpoints"]


def publish(source: Path, dest: Path) -> list[Path]:
    """Copy ``source``'s finished results into ``dest``; the finished run folders copied."""
    source, dest = Path(source), Path(dest)
    config = _config(source)
    if dest.resolve() == source.resolve() or source.resolve() in dest.resolve().parents:
        raise SystemExit(f"{dest} is {source} or inside it: copy a comparison to a folder of its own")
    if dest.exists() and any(dest.iterdir()):
        if not (dest / "compare.json").exists() or _config(dest) != config:
            raise SystemExit(f"{dest} holds something other than a copy of {source}'s comparison: not written")
    _copy(source, dest, TOP, TOP_FOLDERS)
    runs = []
    from gcpo_train.compare.layout import finished_runs

    for run in finished_runs(source):
        runs.append(dest / run.relative_to(source))
        _copy(run, runs[-1], RUN_FILES, RUN_FOLDERS)
    return runs


def _copy(source: Path, dest: Path, files: tuple[str, ...], folders: tuple[str, ...]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in files:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)
    for name in folders:
        if (source / name).is_dir():
            shutil.copytree(source / name, dest / name, ignore=_skip, dirs_exist_ok=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="the gcpo compare folder (its --output)")
    p.add_argument("dest", help="the folder to copy into (new, or an earlier copy of the same comparison)")
    args = p.parse_args(argv)
    runs = publish(Path(args.source), Path(args.dest))
    print(f"{len(runs)} finished arm-seed run(s) copied to {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
