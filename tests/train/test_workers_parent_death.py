"""``gcpo compare --workers 2`` killed by SIGKILL: its workers kept training, then stayed alive.
They now die with their parent (``compare.workers``: the parent-death signal on Linux and a
thread polling the parent). The comparison's second arm is a plug-in's modulator named by
``--plugin``: a worker trains it only if it loaded its parent's plug-ins (it could not before)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
if not Path("/proc/self/stat").exists():
    pytest.skip("reads the process table from /proc", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """model: tiny:llama
dataset: narrativeqa
steps: 1000
group_size: 2
queries_per_step: 1
max_new_tokens: 4
max_context_tokens: 16
judge: lexical
device: cpu
checkpoint_every: 0
save_rollouts: false
compare:
  eval_every: 0
  eval_n: 2
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _workers_of(parent: int) -> list[int]:
    """The multiprocessing workers (spawn_main) whose parent is ``parent``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"spawn_main" in cmdline:
            found.append(int(proc.name))
    return found


def _logged_steps(log: Path) -> int:
    try:
        return sum(1 for line in log.read_text().splitlines() if line.strip())
    except OSError:
        return 0


@pytest.mark.slow
def test_workers_of_a_killed_comparison_die_with_it_and_run_its_plugins(tmp_path):
    from gcpo_train.compare.workers import available_cpus

    if available_cpus() < 2:
        pytest.skip("--workers 2 needs 2 CPUs")
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "cmp"
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    env.pop("GCPO_PLUGINS", None)
    argv = ["--plugin", "helpers.toy_modulator", "compare", "--config", str(config), "--output", str(out)]
    argv += ["--seeds", "0", "--modulators", "none,toy_half", "--workers", "2", "--no_progress"]
    parent = subprocess.Popen(
        [sys.executable, "-m", "gcpo_analysis", *argv],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    workers: list[int] = []
    try:
        logs = [out / "runs" / arm / "seed_0" / "log.jsonl" for arm in ("none", "toy_half")]
        deadline = time.monotonic() + 300
        while not all(_logged_steps(log) for log in logs):  # both workers train (the plug-in's arm too)
            if parent.poll() is not None:
                pytest.fail(
                    f"gcpo compare ended ({parent.returncode}) before its workers trained: {parent.stderr.read()}"
                )
            assert time.monotonic() < deadline, "the workers logged no step within 300 s"
            time.sleep(0.5)
        first = json.loads(logs[1].read_text().splitlines()[0])
        assert first["w_toy_half"] == 0.5  # the plug-in's weight, in its worker
        workers = _workers_of(parent.pid)
        assert len(workers) == 2, workers
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived their killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in workers:  # this test's own workers, should the fix fail
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
