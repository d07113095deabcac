"""Where a command may write: never over its own input, into a checkpoint, or into the parts of a
training run folder that ``gcpo train`` prunes or replaces (issue "Trust, round two").

``check_output(path, inputs)`` refuses, naming both paths, an output that
- equals an input, or lies inside an input folder (``gcpo export CKPT CKPT/merged``);
- lies inside a checkpoint folder (one holding ``state.json``: a later prune deletes it, and a
  file written there can replace the checkpoint's own ``state.json``);
- lies inside a run folder's ``checkpoints/`` or ``rollouts/`` (pruned and replaced by
  ``gcpo train``), or is one of the run's own files (``log.jsonl``, ``run.json``).
"""

from __future__ import annotations

from pathlib import Path

RUN_MARKERS = ("log.jsonl", "run.json")
PRUNED = ("checkpoints", "rollouts")


def _is_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_MARKERS)


def check_output(path, inputs=(), what: str = "output") -> Path:
    """``path`` resolved, or a ValueError naming why writing there would destroy data."""
    out = Path(path).resolve()
    for item in inputs:
        if item is None:
            continue
        source = Path(item).resolve()
        if out == source:
            raise ValueError(f"{what} {out} is the input {source}; choose another path")
        if source in out.parents and source.is_dir():
            raise ValueError(f"{what} {out} lies inside the input folder {source}; choose a path outside it")
    for folder in [out, *out.parents]:
        if folder != out and (folder / "state.json").exists() and (folder / "trainable.pt").exists():
            raise ValueError(
                f"{what} {out} lies inside the checkpoint {folder} (a prune would delete it, and it "
                f"can replace the checkpoint's files); choose a path outside it"
            )
        if folder.name in PRUNED and _is_run(folder.parent) and folder != out:
            raise ValueError(
                f"{what} {out} lies inside {folder}, which gcpo train prunes and replaces; "
                f"choose a path outside the run's {folder.name}/"
            )
    if out.name in RUN_MARKERS and _is_run(out.parent):
        raise ValueError(f"{what} {out} is a training run's own {out.name}; choose another path")
    return out
