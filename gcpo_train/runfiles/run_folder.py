"""The run folder ``output_dir``: one run at a time, nothing of the user's ever deleted, resume
from the newest usable checkpoint, record what ran.

- **One run per folder.** ``RunFolder`` holds a ``filelock`` lock (``output_dir/.gcpo.lock``)
  for the whole run, with either backend; a second process is refused with one line naming the
  holder's PID (``.gcpo.owner.json``). The OS drops the lock when its holder dies, SIGKILL
  included, so a stale lock never blocks a rerun.
- **Only gcpo's files.** A fresh run refuses a folder that already holds a run (``RUN_ENTRIES``)
  unless ``overwrite``; then it removes only what gcpo or TRL writes: the names in
  ``RUN_ENTRIES``, and inside its folders only names matching ``OWN_NAMES`` (``step_000012.parquet``,
  ``checkpoint-50``, ...). Any other file there (``rollouts/my_data.jsonl``) is a refusal that
  names it, before anything is removed.
- **A failed start leaves the folder as found.** The replaced run is moved aside
  (``.gcpo-replaced/``) and deleted only once the first step is logged; if the run fails before
  that, what it created is removed and the replaced run is moved back.
- ``resume`` continues from the newest checkpoint that loads (``checkpoint.load_latest_usable``)
  and cuts the log back to that checkpoint's step. A log without any checkpoint (a run killed
  before its first checkpoint) restarts at step 1 when ``run.json`` records the same
  configuration, and is refused, naming both hashes, when it does not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from pathlib import Path

from gcpo_analysis.frames import write_text
from gcpo_analysis.outputs import is_temporary
from gcpo_analysis.provenance import environment
from gcpo_train.runfiles.runlog import read_log

LOCK_NAME, OWNER_NAME, REPLACED = ".gcpo.lock", ".gcpo.owner.json", ".gcpo-replaced"
# What gcpo's loop and the TRL backend write at the top of a run folder: name -> the pattern of
# the names allowed inside it (None: a file; "*": a folder written whole by TRL).
# a writer killed mid-write leaves its temporary (gcpo_analysis.outputs.atomic_write's
# ".<name>.<random>.gcpo-tmp"; older versions' "<name>.tmp"): gcpo's too
_TMP = r"(\.tmp)?"
RUN_ENTRIES = {
    "log.jsonl": None,
    "run.json": None,
    REPLACED: "*",
    "checkpoints": rf"step_\d{{6}}{_TMP}",
    "rollouts": rf"step_\d{{6}}\.parquet{_TMP}",
    "eval": rf"(step_\d{{6}}|final)(\.json|\.predictions\.parquet){_TMP}",
    "tensorboard": r"events\.out\.tfevents\..*",
    "gcpo_groups": rf"(train|eval)_step_\d{{6}}\.parquet{_TMP}",
}
TRL_CHECKPOINT = re.compile(r"checkpoint-\d+")  # TRL's (HF Trainer's) checkpoint folders
RUN_MARKERS = ("log.jsonl", "run.json", "checkpoints", "rollouts")  # the folder holds a run


class RunFolderBusy(RuntimeError):
    """Another process holds the run folder's lock."""


def take_lock(lock_path: Path, owner_path: Path, what: str):
    """A held ``filelock.FileLock`` on ``lock_path`` and our PID in ``owner_path``; when another
    process holds it, ``RunFolderBusy`` naming that process's PID and command."""
    import datetime
    import sys

    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        try:
            owner = json.loads(Path(owner_path).read_text())
        except (OSError, ValueError):
            owner = {}
        raise RunFolderBusy(
            f"{what} is in use by another gcpo process (PID {owner.get('pid', '?')}: "
            f"{owner.get('command', 'unknown command')}, since {owner.get('since', '?')}); "
            f"wait for it to finish, or choose another folder"
        ) from None
    write_text(
        owner_path,
        json.dumps(
            {
                "pid": os.getpid(),
                "command": " ".join(["gcpo"] + sys.argv[1:3]),
                "since": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            }
        ),
    )
    return lock


def run_entries(out: Path) -> list[Path]:
    """The top-level entries of ``out`` that a gcpo or TRL run wrote."""
    if not out.is_dir():
        return []
    return sorted(
        p for p in out.iterdir() if p.name in RUN_ENTRIES or (TRL_CHECKPOINT.fullmatch(p.name) and p.is_dir())
    )


def foreign_files(entries) -> list[Path]:
    """Files inside the run's folders that gcpo did not write (by name): they block ``overwrite``."""
    bad = []
    for entry in entries:
        pattern = RUN_ENTRIES.get(entry.name, "*")
        if pattern is None:
            if entry.is_dir():
                bad.append(entry)
            continue
        if not entry.is_dir():
            bad.append(entry)
        elif pattern != "*":
            bad += [p for p in sorted(entry.iterdir()) if not re.fullmatch(pattern, _target_name(p.name))]
    return bad


def _target_name(name: str) -> str:
    """The file an ``atomic_write`` temporary was to become (``name`` itself for any other)."""
    if is_temporary(name):
        return name[1:].rsplit(".", 2)[0]
    return name


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


class RunFolder:
    """The lock and the start-up bookkeeping of one training run in ``out`` (a context manager).

    ``with RunFolder(out, is_main=...) as folder:`` takes the lock (main process only),
    ``folder.prepare(...)`` checks / clears / resumes, ``folder.started()`` after the first
    logged step makes the replacement final. Leaving the block with an exception before
    ``started()`` puts the folder back as it was found."""

    def __init__(self, out, *, is_main: bool = True):
        self.out, self.is_main = Path(out), is_main
        self._lock, self._created_dir, self._started = None, False, False
        self._before: set[str] = set()

    def __enter__(self):
        if not self.is_main:
            return self
        self._created_dir = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock = take_lock(self.out / LOCK_NAME, self.out / OWNER_NAME, f"run folder {self.out}")
        self._before = {p.name for p in self.out.iterdir()}
        return self

    def __exit__(self, kind, err, tb):
        try:
            if self.is_main and kind is not None and not self._started:
                self._restore()
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None
        return False

    # ------------------------------------------------------------------ start-up
    def prepare(
        self, *, resume: bool, overwrite: bool, load_latest, config_hash: str | None = None, steps: int | None = None
    ) -> tuple[int, str | None]:
        """Check the folder and return (first step to run, the checkpoint resumed from or None).

        ``load_latest()`` restores the newest usable checkpoint into the model, optimizer and
        scheduler and returns (state, path), or (None, None) when there is none. Only the main
        process writes or moves files. ``steps``: the run's last step; resuming a checkpoint at or
        past it is refused before anything of the run (its log, run.json) is rewritten."""
        out = self.out
        self._recover_replaced()
        if resume:
            return self._resume(load_latest, config_hash, steps)
        existing = [p for p in run_entries(out) if p.name != REPLACED]
        if any(p.name in RUN_MARKERS or TRL_CHECKPOINT.fullmatch(p.name) for p in existing) and not overwrite:
            raise ValueError(
                f"{out} already holds a run ({', '.join(p.name for p in existing)}); pass --resume "
                f"to continue it, --overwrite to replace it, or choose another output_dir"
            )
        if existing and self.is_main:
            self.replace(existing)
        return 1, None

    def replace(self, existing) -> None:
        """Move the earlier run aside (refusing, before anything moves, a file gcpo did not write)."""
        foreign = foreign_files(existing)
        if foreign:
            names = ", ".join(str(p.relative_to(self.out)) for p in foreign[:5])
            raise ValueError(
                f"--overwrite: {self.out} holds files gcpo did not write ({names}"
                f"{', ...' if len(foreign) > 5 else ''}); move them out of the run folder first, "
                f"nothing was deleted"
            )
        aside = self.out / REPLACED
        if aside.exists():
            shutil.rmtree(aside)
        aside.mkdir()
        for p in existing:
            os.replace(p, aside / p.name)
        self._before = {p.name for p in self.out.iterdir()}

    def _recover_replaced(self) -> None:
        """A ``.gcpo-replaced`` left by a run killed before its first step: moved back when nothing
        else of a run is there, else (a newer run started) deleted."""
        aside = self.out / REPLACED
        if not (self.is_main and aside.is_dir()):
            return
        if any(p.name in RUN_MARKERS for p in run_entries(self.out)):
            shutil.rmtree(aside)
        else:
            for p in aside.iterdir():
                os.replace(p, self.out / p.name)
            aside.rmdir()
        self._before = {p.name for p in self.out.iterdir()}

    def _resume(self, load_latest, config_hash, steps=None) -> tuple[int, str | None]:
        out, log = self.out, self.out / "log.jsonl"
        state, latest = load_latest()
        if latest is not None and steps is not None and state["step"] >= steps:
            raise ValueError(
                f"--resume: {out} already reached step {state['step']} (checkpoint {Path(latest).name}) and "
                f"steps is {steps}: nothing to train, and the run's record is left as it is; pass "
                f"--steps greater than {state['step']} to train further"
            )
        rows = read_log(log) if log.exists() else []
        if latest is None:
            if rows:
                recorded = _recorded_hash(out)
                if config_hash is None or recorded != config_hash:
                    raise ValueError(
                        f"--resume: {out} has a log.jsonl with {len(rows)} step(s) but no checkpoint, "
                        f"and its run.json records configuration {recorded} (now {config_hash}); "
                        f"pass --overwrite to start over, or choose another output_dir"
                    )
                warnings.warn(
                    f"--resume: {out} has {len(rows)} logged step(s) but no checkpoint (the run stopped "
                    f"before its first one); restarting the same configuration at step 1",
                    stacklevel=2,
                )
                if self.is_main:
                    for p in [log, out / "rollouts"]:
                        if p.exists() and not foreign_files([p]):
                            _remove(p)
                return 1, None
            warnings.warn(f"--resume: no checkpoint in {out}/checkpoints; starting at step 1", stacklevel=2)
            return 1, None
        if self.is_main and log.exists():  # drop steps logged after the checkpoint (and a partial line)
            keep = [r for r in rows if r["step"] <= state["step"]]
            write_text(log, "".join(json.dumps(r) + "\n" for r in keep))
        return state["step"] + 1, str(latest)

    def started(self) -> None:
        """The first step is logged: the replaced run is deleted, a later failure leaves the run."""
        if self._started:
            return
        self._started = True
        aside = self.out / REPLACED
        if self.is_main and aside.exists():
            shutil.rmtree(aside)

    def _restore(self) -> None:
        """Remove what this run created before its first step and move a replaced run back."""
        for name in sorted({p.name for p in self.out.iterdir()} - self._before - {LOCK_NAME, OWNER_NAME}):
            path = self.out / name
            if name in RUN_ENTRIES and not foreign_files([path]):
                _remove(path)
        aside = self.out / REPLACED
        if aside.is_dir():
            for p in aside.iterdir():
                if not (self.out / p.name).exists():
                    os.replace(p, self.out / p.name)
            if not any(aside.iterdir()):
                aside.rmdir()
        if self._created_dir and {p.name for p in self.out.iterdir()} <= {LOCK_NAME, OWNER_NAME}:
            shutil.rmtree(self.out)


def _recorded_hash(out: Path):
    try:
        return json.loads((out / "run.json").read_text()).get("config_hash")
    except (OSError, ValueError, AttributeError):
        return None


def prepare_run_folder(
    out: Path,
    *,
    resume: bool,
    overwrite: bool,
    is_main: bool,
    load_latest,
    config_hash: str | None = None,
    steps: int | None = None,
) -> tuple[int, str | None]:
    """``RunFolder(out).prepare(...)`` without the lock, the replaced run deleted at once (callers
    that hold no lock and keep no way back)."""
    folder = RunFolder(out, is_main=is_main)
    first = folder.prepare(
        resume=resume, overwrite=overwrite, load_latest=load_latest, config_hash=config_hash, steps=steps
    )
    folder.started()
    return first


def write_run_info(out: Path, info: dict) -> None:
    """``run.json``: the configuration, its hash, the modulator's models, devices, versions and
    the ``environment`` (gcpo version and commit, processor, thread counts)."""
    import torch
    import transformers

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    info = {**info, "versions": versions, "environment": environment()}
    write_text(out / "run.json", json.dumps(info, indent=2, default=str))
