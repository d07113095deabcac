"""The environment every command records: gcpo version and commit, processor, thread counts."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gcpo_analysis import __version__, provenance
from gcpo_analysis.provenance import cpu_signature, environment, git_state, processor_model, torch_threads

ROOT = Path(__file__).resolve().parents[2]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root: Path, *args: str) -> str:
    cmd = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    """A git checkout holding a package folder, committed."""
    root = tmp_path / "repo"
    (root / "gcpo_analysis").mkdir(parents=True)
    (root / "gcpo_analysis" / "a.py").write_text("x = 1\n")
    (root / "notes.txt").write_text("n\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    return root


@needs_git
def test_git_state_names_the_commit_and_whether_the_code_differs_from_it(checkout):
    head = _git(checkout, "rev-parse", "HEAD")
    assert git_state(checkout) == (head, False)
    (checkout / "notes.txt").write_text("changed\n")  # outside the packages: the code is the commit's
    assert git_state(checkout) == (head, False)
    (checkout / "gcpo_analysis" / "a.py").write_text("x = 2\n")
    assert git_state(checkout) == (head, True)
    _git(checkout, "checkout", "-q", "--", "gcpo_analysis")
    (checkout / "gcpo_analysis" / "new.py").write_text("y = 1\n")  # an untracked module runs too
    assert git_state(checkout) == (head, True)


@needs_git
def test_no_commit_outside_a_checkout_top_nor_without_git(checkout, monkeypatch):
    # site-packages of a venv inside some repository: not a checkout of gcpo
    inner = checkout / ".venv" / "lib" / "site-packages"
    inner.mkdir(parents=True)
    assert git_state(inner) == (None, None)
    monkeypatch.setenv("PATH", "")  # git missing: no error, no commit
    assert git_state(checkout) == (None, None)


def test_this_checkout_reports_its_own_head():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout with git installed")
    commit, dirty = git_state()
    assert provenance.source_tree() == ROOT
    assert commit == _git(ROOT, "rev-parse", "HEAD") and isinstance(dirty, bool)


def test_processor_model_reads_cpuinfo_else_platform(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Example CPU @ 2.0GHz\n\nprocessor\t: 1\n")
    assert processor_model(info) == "Example CPU @ 2.0GHz"
    info.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # an ARM cpuinfo has no model name
    assert processor_model(info) == (platform.processor() or None)
    assert processor_model(tmp_path / "missing") == (platform.processor() or None)


def test_torch_threads_only_when_torch_ran(monkeypatch):
    torch = pytest.importorskip("torch")
    assert torch_threads() == torch.get_num_threads()
    monkeypatch.delitem(sys.modules, "torch")
    assert torch_threads() is None


def test_environment_has_every_field(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    env = environment()
    assert set(env) == {
        "gcpo",
        "git_commit",
        "git_dirty",
        "processor",
        "cpu_signature",
        "machine",
        "cpu_count",
        "torch_threads",
        "omp_num_threads",
    }
    assert env["gcpo"] == __version__ and env["omp_num_threads"] == "3"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert environment()["omp_num_threads"] is None


def test_cpu_signature_reads_the_first_processor_and_tells_flag_sets_apart(tmp_path):
    block = "processor\t: {n}\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Xeon\nstepping\t: 8\nflags\t\t: {flags}\n"
    one = tmp_path / "one"
    one.write_text(block.format(n=0, flags="sse avx2 avx512f") + "\n" + block.format(n=1, flags="sse"))
    other = tmp_path / "other"
    other.write_text(block.format(n=0, flags="sse avx2"))
    same_set = tmp_path / "same"
    same_set.write_text(block.format(n=0, flags="avx512f sse avx2"))
    sig = cpu_signature(one)
    assert sig is not None and sig.startswith("family 6 model 143 stepping 8 flags ")
    assert cpu_signature(other) != sig  # another vector unit
    assert cpu_signature(same_set) == sig  # the same flags in another order
    assert cpu_signature(tmp_path / "missing") is None
    (tmp_path / "noflags").write_text("processor\t: 0\nmodel name\t: x\n")
    assert cpu_signature(tmp_path / "noflags") is None
