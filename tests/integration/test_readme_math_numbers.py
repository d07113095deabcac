"""The math-run numbers of the README and the docs pages (the Table 4 row, wherever it is quoted, and
the measures table of the findings page) against the committed tables of figures/cpu_math: a rerun
that changes a table, or an edit that drifts, fails here."""

import re
from pathlib import Path

import pandas as pd
import pytest
from helpers.doc_pages import doc_pages

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "figures" / "cpu_math"
NAMES = {
    "token entropy": "token_entropy",
    "SE (discrete)": "se",
    "SE (likelihood-weighted)": "se_lw",
    "KLE": "kle",
    "CD": "cd",
    "BoT": "bot",
    "RD": "rd",
}


def _num(text: str) -> float:
    return float(text.replace("−", "-").strip("* "))


HEADING = "### Math (ASDiv), beside the paper's Table 4"


def _math_section() -> str:
    """The math run's section of the findings page (whichever page holds it)."""
    texts = [text for text in doc_pages().values() if HEADING in text]
    assert len(texts) == 1, f"exactly one page (README.md or docs/) must hold {HEADING!r}"
    start = texts[0].index(HEADING)
    return texts[0][start : texts[0].index("### NarrativeQA", start)]


@pytest.mark.skipif(not RUN.exists(), reason="no committed math run")
def test_table4_row_matches_the_committed_table():
    rows = [s for text in doc_pages().values() for s in text.splitlines() if s.startswith("| gcpo, ASDiv")]
    assert rows, "no '| gcpo, ASDiv' row in README.md or docs/"
    table = pd.read_csv(RUN / "tables" / "table4_grad_var.csv")
    rho = table[table["row"] == "Rho"].iloc[0]
    for row in rows:
        values = [_num(c) for c in row.strip("|").split("|")[1:]]
        assert values == [float(rho[c]) for c in ("Entropy", "SE", "CD", "BoT")], row


@pytest.mark.skipif(not RUN.exists(), reason="no committed math run")
def test_measures_table_matches_spearman_decomposition_and_size_control():
    sp = pd.read_csv(RUN / "tables" / "spearman.csv").set_index("measure")
    dec = pd.read_csv(RUN / "tables" / "decomposition.csv").set_index("measure")
    sc = pd.read_csv(RUN / "tables" / "size_control.csv")
    pos = sc[sc["subset"] == "v_pos"].set_index(["statistic", "measure"])
    rows = [s for s in _math_section().splitlines() if s.split("|")[1:2] and s.split("|")[1].strip() in NAMES]
    assert len(rows) == 7
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        m = NAMES[cells[0]]
        triples = [[_num(x) for x in re.findall(r"[−\-]?\d+\.\d+", c)] for c in cells[1:]]
        checks = [
            (triples[0], sp.loc[m, ["rho", "ci_low", "ci_high"]], sp.loc[m, "p_holm"]),
            (triples[2], dec.loc[m, ["rho_pos", "rho_pos_ci_low", "rho_pos_ci_high"]], dec.loc[m, "rho_pos_p_holm"]),
            (triples[3], dec.loc[m, ["auc_pos", "auc_pos_ci_low", "auc_pos_ci_high"]], None),
            (triples[4], pos.loc[("partial", m), ["rho", "ci_low", "ci_high"]], pos.loc[("partial", m), "p_holm"]),
            (triples[5], pos.loc[("norm", m), ["rho", "ci_low", "ci_high"]], pos.loc[("norm", m), "p_holm"]),
        ]
        for k, (shown, expect, p_holm) in enumerate(checks):
            assert shown == [round(float(v), 2) for v in expect], (m, k, shown)
            if p_holm is not None:  # bold exactly when Holm p < 0.05
                assert cells[[1, 3, 4, 5, 6][k]].startswith("**") == (p_holm < 0.05), (m, k)
