"""docs/architecture.md names real code: every `name` (path.py) is defined in that file, and every
other backticked identifier is defined somewhere in the packages, so a rename that forgets the page
fails here."""

import ast
import re
from pathlib import Path

from helpers.source_trees import parsed

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# an identifier, or a comma-separated list of them, followed by the file that defines them
ATTACHED = re.compile(r"((?:`\w+`(?:, )?)+) \(((?:gcpo_analysis|gcpo_train)/[\w/]+\.py)\)")
NOT_OURS = {"eval", "export"}  # subcommand names in the prose


def _names(path: Path) -> set[str]:
    """Functions, methods, classes and module-level names defined in a file."""
    names = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_every_attached_name_is_defined_in_its_file():
    text = DOC.read_text()
    pairs = [(name, path) for names, path in ATTACHED.findall(text) for name in re.findall(r"`(\w+)`", names)]
    assert len(pairs) > 40  # the four call chains are written this way
    missing = [f"{name} ({path})" for name, path in pairs if name not in _names(ROOT / path)]
    assert missing == []


def test_every_other_identifier_exists_in_the_packages():
    defined = set().union(*(_names(p) for pkg in ("gcpo_analysis", "gcpo_train") for p in (ROOT / pkg).rglob("*.py")))
    words = set(re.findall(r"`([A-Za-z_]\w*)`", DOC.read_text()))
    assert sorted(words - defined - NOT_OURS) == []


def test_the_readme_links_the_page():
    assert "docs/architecture.md" in (ROOT / "README.md").read_text()
