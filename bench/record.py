"""Run one bench script and commit-ready record its output: bench/results/<name>.md holds the
command, when and where it ran (date, commit, CPU cores, load average before and after, versions)
and the script's printed tables verbatim. docs/developer/benchmarks.md includes these files
(``--8<--``), so a timing on the site is a recorded run, never retyped.

    python bench/record.py bench/measures.py [its arguments ...]
    python bench/record.py --name hostile_5000 bench/hostile.py --n 5000

The script's stdout is the record (progress on stderr passes through), in a text block when it
prints no markdown table; a script that fails writes nothing. The record is replaced whole (written to a temporary file, then renamed).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _versions() -> str:
    found = []
    for pkg in ("numpy", "torch", "transformers", "trl", "sympy"):
        try:
            found.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            pass
    return ", ".join([f"Python {platform.python_version()}", *found])


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout
    except OSError:
        return "unknown"
    return (
        out.stdout.strip() + (" (uncommitted changes)" if dirty.strip() else "") if out.returncode == 0 else "unknown"
    )


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--name", help="the record's name (default: the script's, e.g. measures)")
    ap.add_argument("script", help="a bench/*.py script")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    a = ap.parse_args(argv)
    script = Path(a.script)
    if not script.is_file():
        ap.error(f"no such bench script: {script}")
    name = a.name or script.stem
    command = " ".join(["python", script.as_posix(), *a.args])
    started, load_before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), _load()
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, str(script), *a.args], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if run.returncode != 0:
        print(f"{command} failed (exit {run.returncode}); nothing recorded", file=sys.stderr)
        return run.returncode
    header = (
        f"<!-- written by `python bench/record.py {' '.join([script.as_posix(), *a.args])}`: do not edit -->\n\n"
        f"`{command}` — {started}, commit {_commit()}, {os.cpu_count()} CPU cores, load average "
        f"(1/5/15 min) {load_before} before and {_load()} after, {time.perf_counter() - t0:.0f} s in all; "
        f"{_versions()}.\n\n"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.md"
    tmp = out.with_suffix(".md.tmp")
    body = run.stdout.strip().replace(f"{ROOT}/", "")  # paths inside the repository, not this machine's
    if not any(line.startswith("|") for line in body.splitlines()):  # plain text: kept as printed
        body = f"```text\n{body}\n```"
    tmp.write_text(header + body + "\n")
    tmp.replace(out)
    print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
