"""A comparison's arm-seed runs in parallel processes on one machine (``gcpo compare --workers N``).

The runs of a comparison are independent (each its own folder, lock, seed and records), so N of
them can train at once, each worker with ⌊C / N⌋ torch threads, C the threads torch uses in this
process (``OMP_NUM_THREADS``). Workers share the device the config names; on one GPU a single run
usually keeps it busy, so this is meant for CPU comparisons. It is no distributed trainer (a run
that outgrows one machine belongs to TRL).

Pairing: two arms of one seed are paired by common random numbers, which hold only if both run
with the same numerics. A CPU's reductions may depend on the thread count, so every run records
its torch thread count in ``done.json`` and a seed's runs keep one count (``check_threads``):
resume a seed with the threads per run it was started with. (A run stopped midway and resumed at
another count is not detected: only finished runs record it.)

Processes are started by ``spawn`` (a forked torch may deadlock); the comparison object is
pickled to them, so trainer_kwargs must be picklable (module-level functions, plain data). Each
worker loads the plug-ins its parent loaded (entry points, ``GCPO_PLUGINS``, ``--plugin``), so a
plug-in's modulator trains there too, and dies with its parent: on Linux by the kernel's
parent-death signal (``prctl(PR_SET_PDEATHSIG)``), elsewhere (and as a second guard) by a thread
that exits the worker once its parent process is gone. A killed ``gcpo compare`` leaves no
worker training on.
"""

from __future__ import annotations

import os
from pathlib import Path

from gcpo_analysis.models import require
from gcpo_train.compare.layout import finished_runs
from gcpo_train.compare.record import read_done


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says, else the count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every system
        return os.cpu_count() or 1


def check_workers(workers, flag: str = "--workers") -> int:
    """``workers`` as a count from 1 to the CPUs available (each worker needs a thread of its own;
    more would only share them), else a ValueError naming ``flag``: checked before anything is
    written (a huge count passed and failed in the process pool, after the base evaluations)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"{flag} must be an integer >= 1, got {workers!r}")
    if workers > available_cpus():
        raise ValueError(
            f"{flag} {workers}: at most {available_cpus()}, the CPUs this process may use (each worker trains "
            "with threads of its own)"
        )
    return workers


def threads_per_worker(workers: int) -> int:
    """⌊torch's threads in this process / workers⌋, at least 1."""
    torch = require("torch")
    return max(1, torch.get_num_threads() // workers)


def recorded_threads(out: Path, seed: int) -> dict[str, int]:
    """{run folder: torch threads} of the finished runs of ``seed`` in the comparison folder ``out``
    that recorded theirs (runs finished before this record have none). A done.json that is not a
    record, or whose ``threads`` is not an integer >= 1, is refused naming the file and field: read
    as absent, it would let a run of the seed train at another thread count, unpaired."""
    found = {}
    for run in finished_runs(out, seed=seed):
        threads = read_done(run / "done.json").get("threads")  # read_done refuses a threads that is no count
        if threads is None:
            continue
        found[str(run.relative_to(out))] = threads
    return found


def check_threads(out: Path, seed: int, threads: int) -> None:
    """Refuse to train a run of ``seed`` with another thread count than the seed's finished runs
    recorded (other seeds are not paired with it and may differ)."""
    other = {run: n for run, n in recorded_threads(out, seed).items() if n != threads}
    if other:
        run, n = next(iter(other.items()))
        raise ValueError(
            f"{out}: {run} trained with {n} torch thread(s), this run of seed {seed} would use {threads}; a CPU's "
            f"sums may depend on the thread count, which would unpair the arms of a seed. Set OMP_NUM_THREADS "
            f"and --workers so that each run gets {n} (threads per run = torch's threads // workers)"
        )


PARENT_POLL_SECONDS = 1.0


def _die_with_parent(parent_pid: int) -> None:
    """End this worker when ``parent_pid`` ends: the kernel's parent-death signal where there is
    one (Linux), and a daemon thread that polls the parent everywhere."""
    import signal
    import threading
    import time

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl (not Linux): the thread below is the guard
        pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)  # the parent is gone (its orphan was adopted): nothing waits for this run

    if os.getppid() != parent_pid:  # the parent died before the signal was asked for
        os._exit(1)
    threading.Thread(target=watch, name="gcpo-parent-watch", daemon=True).start()


def _start_worker(parent_pid: int, plugin_modules: list[str]) -> None:
    """Each worker's first act: die with the parent, and load the parent's plug-ins."""
    from gcpo_analysis.plugins import load_plugins

    _die_with_parent(parent_pid)
    load_plugins(plugin_modules)


def _train_one(comparison, arm: str, seed: int, threads: int) -> tuple[str, int]:
    torch = require("torch")
    torch.set_num_threads(threads)
    comparison.train_arm(arm, seed, progress=False)
    return arm, seed


def train_in_workers(comparison, workers: int, progress: bool = True) -> None:
    """Train the comparison's unfinished arm-seed runs, ``workers`` at a time, seed-major; the
    tables are rewritten after each finished run (a failure there warns and training goes on:
    ``report_between_runs``). An error in one run stops the others' start and is raised once the
    running ones end (they stop at their next step when interrupted)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    threads = threads_per_worker(workers)
    jobs = [(arm, seed) for seed in comparison.seeds for arm in comparison.unfinished(seed)]
    for seed in dict.fromkeys(seed for _, seed in jobs):
        check_threads(comparison.out, seed, threads)
    from gcpo_analysis.plugins import loaded_modules

    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(os.getpid(), loaded_modules()),
    )
    try:
        futures = {pool.submit(_train_one, comparison, arm, seed, threads): (arm, seed) for arm, seed in jobs}
        for future in tqdm(as_completed(futures), total=len(futures), desc="arm-seed runs", disable=not progress):
            arm, seed = future.result()
            comparison.report_between_runs(arm, seed)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
