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

import json
import os
import tempfile
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
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


# --------------------------------------------------------------------------- the one safe writer
# Every output file goes through ``atomic_write``:
# - the temporary file is created fresh beside the target by ``tempfile.mkstemp`` (O_CREAT|O_EXCL,
#   a random name): never through an existing path or a symlink, never shared by two processes;
# - ``os.replace`` puts it in place atomically (a symlink at the target is replaced, not followed);
# - inside ``staged_outputs()`` the replacements wait until every file of the block is written and
#   then run together, under a lock on the folder, so a failed write leaves the previous outputs
#   whole and two writers never leave a mix of their files.
TMP_SUFFIX = ".gcpo-tmp"  # a temporary's name: .<target name>.<random><TMP_SUFFIX>
_STAGED: ContextVar[list | None] = ContextVar("gcpo_staged_outputs", default=None)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()  # mkstemp makes 0600; outputs get the mode open() would give them


def is_temporary(name: str) -> bool:
    """Whether ``name`` is one of ``atomic_write``'s temporaries (a killed writer leaves them)."""
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def atomic_write(path, write) -> Path:
    """Write ``path`` through ``write(tmp_path)`` into a fresh temporary beside it, then replace
    ``path`` by it (at once, or at the end of the enclosing ``staged_outputs`` block). Any failure
    removes the temporary, leaves ``path`` as it was and raises (an OSError names ``path``)."""
    path = Path(path)
    tmp = None
    try:
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(21, "is a folder, not a file", str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
        os.close(fd)
        tmp = Path(name)
        os.chmod(tmp, _MODE)
        write(tmp)
        staged = _STAGED.get()
        if staged is not None:
            staged.append((tmp, path))
        else:
            os.replace(tmp, path)
        tmp = None
    except OSError as err:
        if err.filename is None:
            err.filename = str(path)
        raise
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return path


@contextmanager
def staged_outputs():
    """Write every ``atomic_write`` of the block to its temporary and replace the targets only
    when the block ends without an error, all together, holding ``folder_lock`` on each target
    folder (one writer's set of outputs at a time). An error inside the block removes every
    temporary: the outputs are the previous ones, whole. Nested blocks join the outer one."""
    if _STAGED.get() is not None:
        yield
        return
    staged: list = []
    token = _STAGED.set(staged)
    try:
        yield
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    finally:
        _STAGED.reset(token)
    folders = sorted({str(target.parent.resolve()) for _, target in staged})
    with ExitStack() as stack:
        for folder in folders:
            stack.enter_context(folder_lock(folder, wait=True))
        try:
            for tmp, target in staged:
                os.replace(tmp, target)
        finally:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)


@contextmanager
def folder_lock(folder, wait: bool = False, what: str = "output folder"):
    """An exclusive OS lock on ``folder`` itself (``flock`` on its directory handle; the OS drops
    it when the process dies, so a killed writer never blocks the next). ``wait``: block until the
    other writer is done; else a ValueError naming the folder when another process holds it."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise ValueError(
                f"{what} {folder} is being written by another gcpo process; wait for it to finish, "
                f"or choose another folder"
            ) from None
        yield
    finally:
        os.close(fd)  # closing the handle releases the lock


def claim_numbered_folder(parent, stem: str) -> Path:
    """A new, empty folder ``parent/stem-N`` (N = 1, 2, ...), created here: ``mkdir`` fails on an
    existing name, so two processes never claim the same N."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        folder = parent / f"{stem}-{n}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            n += 1


def json_object_with(path: Path, keys: set[str]) -> bool:
    """Whether ``path`` holds a JSON object with ``keys``: a file an earlier run of the command
    wrote, which it may replace (anything else is the user's)."""
    try:
        blob = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(blob, dict) and keys <= blob.keys()
