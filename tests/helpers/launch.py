"""Launch a test script in 2 CPU processes with ``accelerate launch`` (gloo), as the
multi-process tests of our loop and of the TRL bridge do."""

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:  # a fixed port collides with other launches on the machine
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accelerate_two_processes(script: Path, *args: str, timeout: int = 900) -> None:
    """``script args...`` under ``accelerate launch`` with 2 processes on CPU; fails the test
    with the end of stderr when the launch does not exit 0."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    # --multi_gpu is accelerate's torchrun launcher; with no GPU the processes run on CPU over gloo.
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        str(script),
        *args,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
