"""Run the math grader's sympy comparisons in another process under a hard time limit.

sympy cannot be interrupted from inside (``signal.alarm`` works in the main thread only, and
a thread cannot be stopped), so comparisons run in a worker process that is killed when one
exceeds its time; nothing the worker computes can then delay the caller beyond the limit.

Three processes: the caller; a supervisor (``python -c``, started on the first comparison, never
by an import) that imports sympy once and relays requests; and a worker, forked from the
supervisor, that computes. On a timeout the supervisor kills the worker and forks a fresh one
from its own already-warm memory (a few ms, where a new interpreter would take ~1 s to import
sympy), so the next comparison runs at full speed. Forking the single-threaded supervisor is
safe; forking the caller (threads, CUDA) would not be. The supervisor is a plain subprocess, not
a multiprocessing child, so the caller's ``__main__`` is never re-imported.

Messages are JSON lines (nothing is ever unpickled): caller → supervisor ``[timeout_s,
request]``; supervisor → caller ``["ok", result]``, ``["time"]`` (killed), ``["crash", why]``
(the worker died or raised). Every failure is an exception for the caller to count:
``WorkerTimeout`` or ``WorkerUnavailable``. The supervisor and worker exit when the caller's
pipe closes; a fork of the caller starts its own supervisor.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TARGET = "gcpo_analysis.rewards.math.sympy_check"  # module with handle(request) and, optionally, warm()
STARTUP_TIMEOUT_S = 60.0  # Python + sympy import on a loaded machine; paid once per process
RETRY_AFTER_S = 60.0  # after a failed start, string comparison until this much time has passed
GRACE_S = 0.5  # the supervisor's own time to kill and re-fork, on top of a request's timeout
WORKER_MEMORY_BYTES = 2 << 30  # address space a worker may add (an expansion eats GBs in 1 s)


class WorkerTimeout(Exception):
    """The comparison ran past its time limit; the worker was killed (and replaced)."""


class WorkerUnavailable(Exception):
    """No worker could answer: it could not start, it died, or its reply was malformed."""


def _read_line(fd: int, buffer: bytearray, deadline: float) -> bytes | None:
    """One ``\\n``-terminated line from ``fd``, waiting at most until ``deadline``
    (time.monotonic()); None at the deadline; b"" at end of file."""
    while b"\n" not in buffer:
        left = None if deadline == float("inf") else deadline - time.monotonic()
        if left is not None and (left <= 0 or not select.select([fd], [], [], left)[0]):
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b""
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def _write_line(fd: int, value) -> None:
    data = json.dumps(value).encode() + b"\n"
    while data:
        data = data[os.write(fd, data) :]


# ----------------------------------------------------------------------------- caller side
class Worker:
    """Client of one supervisor. ``call(request, timeout)`` returns the target's
    ``handle(request)`` (JSON values in and out) or raises ``WorkerTimeout`` /
    ``WorkerUnavailable``. Thread-safe (calls are serialised). Starts the supervisor on the
    first call and again after it failed, but at most once per ``RETRY_AFTER_S`` after a
    failed start."""

    def __init__(self, target: str = TARGET):
        self.target = target
        self._proc: subprocess.Popen | None = None
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._failed_at = -float("inf")
        self._failure = ""

    def call(self, request, timeout: float):
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            raise WorkerTimeout("another thread's comparison held the worker past this one's time")
        try:
            proc = self._started()
            assert proc.stdin is not None and proc.stdout is not None  # started with PIPE
            deadline = time.monotonic() + timeout + GRACE_S
            try:
                _write_line(proc.stdin.fileno(), [timeout, request])
                line = _read_line(proc.stdout.fileno(), self._buffer, deadline)
            except OSError:  # the supervisor's pipe is closed: it exited
                line = b""
            except BaseException:  # interrupted mid-request: its reply must not answer the next one
                self._stop()
                raise
            try:
                reply = json.loads(line) if line else None
            except ValueError:
                reply = None
            if not (isinstance(reply, list) and reply and reply[0] in ("ok", "time", "crash")):
                self._stop()
                why = "no reply in time" if line is None else f"it exited or sent {line[:80]!r}"
                raise WorkerUnavailable(f"the sympy supervisor failed ({why})")
            if reply[0] == "time":
                raise WorkerTimeout(f"comparison exceeded {timeout:.3g} s")
            if reply[0] == "crash":
                raise WorkerUnavailable(f"the sympy worker failed: {reply[1:]!r:.200}")
            return reply[1]
        finally:
            self._lock.release()

    def pid(self) -> int | None:
        """Process id of the supervisor, None when none runs (for tests and diagnostics)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _started(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        if time.monotonic() - self._failed_at < RETRY_AFTER_S:
            raise WorkerUnavailable(f"{self._failure}; retrying {RETRY_AFTER_S:.0f} s after the failure")
        try:
            self._proc = self._launch()
        except (OSError, ValueError, WorkerUnavailable) as err:
            self._stop()
            self._failed_at, self._failure = time.monotonic(), f"the sympy worker could not start: {err}"
            raise WorkerUnavailable(self._failure) from None
        return self._proc

    def _launch(self) -> subprocess.Popen:
        if not hasattr(os, "fork") or not sys.executable:
            raise WorkerUnavailable("this platform has no os.fork or no Python executable")
        root = str(Path(__file__).resolve().parents[3])  # the folder holding gcpo_analysis: importable uninstalled
        code = (
            f"import sys; sys.path.insert(0, {root!r}); "
            f"from gcpo_analysis.rewards.math.sympy_worker import supervise; supervise({self.target!r})"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            start_new_session=True,
        )  # Ctrl-C reaches the caller only
        self._proc, self._buffer = proc, bytearray()
        assert proc.stdout is not None  # started with PIPE
        line = _read_line(proc.stdout.fileno(), self._buffer, time.monotonic() + STARTUP_TIMEOUT_S)
        if line != b'["ready"]':
            why = "no answer" if line is None else f"exit code {proc.poll()}" if not line else repr(line[:80])
            raise WorkerUnavailable(f"the supervisor did not become ready within {STARTUP_TIMEOUT_S:.0f} s ({why})")
        return proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _close_pipes(proc)
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def close(self) -> None:
        """Stop the supervisor and its worker (a later call starts new ones)."""
        with self._lock:
            self._stop()

    def _forget_in_child(self) -> None:
        # After os.fork the child shares the parent's supervisor pipes: close its copies
        # (the parent keeps its own) and start a supervisor of its own when it needs one.
        proc, self._proc, self._buffer, self._lock = self._proc, None, bytearray(), threading.Lock()
        if proc is not None:
            _close_pipes(proc)


def _close_pipes(proc: subprocess.Popen) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is None:
            continue
        try:
            stream.close()
        except OSError:
            pass


# ----------------------------------------------------------------------------- supervisor side
def _limit_memory() -> None:
    """At most WORKER_MEMORY_BYTES more address space than the worker has at its fork (Linux;
    elsewhere no limit): a MemoryError in sympy is reported as such, the machine keeps its memory."""
    try:
        import resource

        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = used + WORKER_MEMORY_BYTES
        if soft == resource.RLIM_INFINITY or soft > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass


def _fork_worker(handle, out: int) -> tuple[int, int, int]:
    """(pid, request fd, reply fd) of a new worker serving ``handle`` one JSON line at a time;
    ``out`` is the supervisor's reply pipe, which the worker closes (only the supervisor speaks)."""
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: never returns
        code = 0
        try:
            for fd in (req_w, rep_r, out, 0):
                os.close(fd)
            _limit_memory()
            buffer = bytearray()
            while True:
                line = _read_line(req_r, buffer, float("inf"))
                if not line:
                    break
                try:
                    reply = ["ok", handle(json.loads(line))]
                except BaseException as err:  # reported, not fatal: the next request still runs
                    reply = ["crash", type(err).__name__, str(err)[:200]]
                _write_line(rep_w, reply)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(req_r)
    os.close(rep_w)
    return pid, req_w, rep_r


def _kill(pid: int, *fds: int) -> None:
    for fd in fds:
        os.close(fd)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def supervise(target: str) -> None:
    """The supervisor's main loop (run by ``Worker`` in a fresh interpreter): import ``target``,
    warm it, fork a worker, say ``["ready"]``, then relay each ``[timeout, request]`` line from
    stdin to the worker, killing and re-forking it when a reply does not come within the
    timeout. Returns at end of stdin (the caller closed the pipe or died)."""
    import importlib

    out = os.dup(1)
    os.dup2(2, 1)  # a stray print in sympy or the target goes to stderr, not into the protocol
    module = importlib.import_module(target)
    if hasattr(module, "warm"):
        module.warm()
    pid, req_w, rep_r = _fork_worker(module.handle, out)
    _write_line(out, ["ready"])
    buffer, worker_buffer = bytearray(), bytearray()
    while True:
        line = _read_line(0, buffer, float("inf"))
        if not line:
            break
        timeout, request = json.loads(line)
        deadline = time.monotonic() + float(timeout)
        try:
            _write_line(req_w, request)
            reply = _read_line(rep_r, worker_buffer, deadline)
        except OSError:
            reply = b""
        if reply:
            _write_line(out, json.loads(reply))
            continue
        _kill(pid, req_w, rep_r)
        worker_buffer.clear()
        pid, req_w, rep_r = _fork_worker(module.handle, out)
        _write_line(out, ["time"] if reply is None else ["crash", "the worker exited"])
    _kill(pid, req_w, rep_r)


# ----------------------------------------------------------------------------- the grader's worker
WORKER = Worker()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WORKER._forget_in_child)
atexit.register(WORKER._stop)  # without the lock: a daemon thread may hold it at exit
