"""Shipped text says what a thing is, never which tracker entry it came from: a user cannot look
up a project-internal number, so no code, doc, config or test outside the history files
(CHANGELOG.md, the committed outputs under figures/) cites one. The scan covers *.py, *.md,
*.yaml, *.yml and *.toml; run outputs (runs/), the built site (site/), virtual environments and
tool caches are not shipped."""

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml")
SKIPPED_DIRS = {".git", "figures", "runs", "site", "__pycache__", "node_modules"}
SKIPPED_FILES = {"CHANGELOG.md"}
# a word, then a number: how a tracker entry is cited ("Issues" too, any case)
CITATION = re.compile(r"\bissues?\s+[0-9]+", re.IGNORECASE)


def _skipped_dir(name: str) -> bool:
    """History, outputs, environments and caches (.venv, .venv-trl, .mypy_cache, gcpo.egg-info...)."""
    return (
        name in SKIPPED_DIRS
        or name.startswith(".venv")
        or name.endswith((".egg-info", "_cache"))
        or name in {".hypothesis", "build", "dist"}
    )


def citations(root: Path) -> list[str]:
    """'path:line: text' of every line of a shipped file under ``root`` that cites a tracker number."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _skipped_dir(d))
        here = Path(folder)
        for name in sorted(files):
            if not name.endswith(SUFFIXES) or (here == root and name in SKIPPED_FILES):
                continue
            path = here / name
            text = path.read_text(encoding="utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), 1):
                if CITATION.search(line):
                    found.append(f"{path.relative_to(root).as_posix()}:{number}: {line.strip()[:160]}")
    return found


def test_the_scan_finds_citations_where_shipped_and_only_there(tmp_path):
    cite = "see " + "issue" + " 35 for why"
    shipped = {
        "pkg/mod.py": f"x = 1\n# {cite}\n",
        "docs/page.md": "Fixed in " + "Issues" + " 25 and 35.\n",
        "configs/run.yaml": f"# {cite}\nseed: 0\n",
        ".ci/test.yml": f"# {cite}\n",
        "pyproject.toml": f"# {cite}\n",
    }
    not_shipped = {
        "CHANGELOG.md": cite,
        "figures/study/plan.md": cite,
        "runs/a/log.md": cite,
        "site/index.md": cite,
        ".venv-trl/lib/x.py": cite,
        ".git/COMMIT_EDITMSG.md": cite,
        "gcpo.egg-info/PKG-INFO.md": cite,
        "pkg/data.json": cite,
        "pkg/ok.py": "# the issue is 35 ms of latency; tissue" + " 4\n",
    }
    for rel, text in {**shipped, **not_shipped}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = citations(tmp_path)
    assert sorted(hit.split(":")[0] for hit in found) == sorted(shipped)
    assert "pkg/mod.py:2: # see" in "\n".join(found)


def test_no_shipped_file_cites_a_tracker_number():
    found = citations(ROOT)
    assert not found, "say what the thing is instead of citing a tracker number:\n" + "\n".join(found)
