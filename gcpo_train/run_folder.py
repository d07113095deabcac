"""The run folder ``output_dir``: never lose a run silently, resume from the newest usable
checkpoint, record what ran.

A fresh run refuses a folder that already holds a run (``log.jsonl``, ``run.json``,
``checkpoints/``, ``rollouts/``) unless ``overwrite``; then it removes those four and nothing
else. ``resume`` continues from the newest checkpoint that loads safely
(``checkpoint.load_latest_usable``) and cuts the log back to that checkpoint's step; a log
without any checkpoint is refused rather than appended to.
"""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

from gcpo_analysis.frames import write_text

from .runlog import read_log

RUN_FILES = ("log.jsonl", "checkpoints", "run.json", "rollouts")


def prepare_run_folder(out: Path, *, resume: bool, overwrite: bool, is_main: bool, load_latest) -> tuple[int, str | None]:
    """Check ``out`` and return (first step to run, the checkpoint resumed from or None).

    ``load_latest()`` restores the newest usable checkpoint into the model, optimizer and
    scheduler and returns (state, path), or (None, None) when there is none. Only the main
    process writes or deletes files."""
    log = out / "log.jsonl"
    if resume:
        state, latest = load_latest()
        rows = read_log(log) if log.exists() else []
        if latest is None:
            if rows:
                raise ValueError(f"--resume: {out} has a log.jsonl with {len(rows)} step(s) but no checkpoint "
                                 f"to resume from; pass --overwrite to start over, or choose another output_dir")
            warnings.warn(f"--resume: no checkpoint in {out}/checkpoints; starting at step 1")
            return 1, None
        if is_main and log.exists():  # drop steps logged after the checkpoint (and a partial line)
            keep = [r for r in rows if r["step"] <= state["step"]]
            write_text(log, "".join(json.dumps(r) + "\n" for r in keep))
        return state["step"] + 1, str(latest)
    existing = [out / name for name in RUN_FILES if (out / name).exists()]
    if existing and not overwrite:
        raise ValueError(f"{out} already holds a run ({', '.join(p.name for p in existing)}); pass --resume "
                         f"to continue it, --overwrite to replace it, or choose another output_dir")
    if existing and is_main:
        for p in existing:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    return 1, None


def write_run_info(out: Path, info: dict) -> None:
    """``run.json``: the configuration, its hash, the modulator's models, devices and versions."""
    import torch
    import transformers

    info = {**info, "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    write_text(out / "run.json", json.dumps(info, indent=2, default=str))
