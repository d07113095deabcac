"""The numbers the README and the docs pages quote from `gcpo proofs` are the numbers it prints (and
the committed figures/proofs.json that `gcpo proofs --json` wrote)."""

import json
import math
import re
from pathlib import Path

import pytest
from helpers.doc_pages import doc_pages

from gcpo_analysis.cli import main
from gcpo_analysis.theory.proofs import check_all

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def claims():
    table = check_all()  # the defaults of `gcpo proofs`
    return {row.claim: row for row in table.itertuples()}


def _rows(marker: str) -> list[str]:
    """Every table row, in the README or a docs page, that quotes the claim named by ``marker``."""
    rows = [ln for text in doc_pages().values() for ln in text.splitlines() if ln.startswith("|") and marker in ln]
    assert rows, f"no table row with {marker!r} in README.md or docs/: the number moved out of sight of this test"
    return rows


def test_readme_bot_bound_numbers(claims):
    c = claims["BoT bound V_inter^cluster <~ L^2 BoT"]
    for row in _rows("App. C BoT bound"):
        worst, median, pct = re.search(
            r"worst ratio V/\(L²·BoT\) = ([\d.]+), median ([\d.]+).*up to ([\d.]+)%", row
        ).groups()
        assert float(worst) == round(c.worst_ratio, 3) and float(median) == round(c.median, 3)
        assert float(pct) == round(100 * (c.worst_ratio - 1), 1)


def test_readme_reweighting_numbers(claims):
    c = claims["App. F '≈' form vs exact (m(q) varies)"]
    for row in _rows('App. F "≈"'):
        median, worst = re.search(r"median ([\d.]+), worst ([\d.]+)", row).groups()
        assert float(median) == round(c.median, 3) and float(worst) == round(c.worst_ratio, 3)


def test_committed_proofs_json_is_what_the_command_writes(tmp_path, claims):
    assert main(["proofs", "--json", str(tmp_path / "p.json")]) == 0
    fresh = json.loads((tmp_path / "p.json").read_text())
    committed = json.loads((ROOT / "figures" / "proofs.json").read_text())
    assert fresh["settings"] == committed["settings"]
    for a, b in zip(fresh["claims"], committed["claims"]):
        assert a["claim"] == b["claim"] and a["holds"] == b["holds"]
        for key in ("worst_violation", "worst_ratio", "median"):
            x, y = a[key], b[key]
            assert (x is None and y is None) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-15), (a["claim"], key)
