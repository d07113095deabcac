"""The study numbers that the README and the docs pages quote are the committed tables', rounded once
from the tables (2 decimals; 3 for the retrieval AUCs). Checked, wherever they are quoted (README.md,
docs/**/*.md; each must be quoted somewhere): the Spearman table (ρ, CI, CI width, N), the paired Δρ
sentence, the retrieval sentence, the V = 0 decomposition table, and every gradient-size-control
table. A bold ρ must be exactly one whose Holm-adjusted p is < 0.05."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.doc_pages import doc_pages

ROOT = Path(__file__).resolve().parents[2]
RUNS = {"default": "default_study", "cpu-large": "cpu_large", "cpu-math": "cpu_math"}
LABELS = {
    "token entropy": "token_entropy",
    "SE (discrete)": "se",
    "SE (likelihood-weighted)": "se_lw",
    "SE-LW": "se_lw",
    "KLE": "kle",
    "CD": "cd",
    "BoT": "bot",
    "RD": "rd",
}
NUM = r"[−-]?\d+\.\d+"
CELL = re.compile(rf"^(\*\*)?({NUM})(\*\*)? \[({NUM}), ({NUM})\](?: \(({NUM})\))?$")


def _f(text: str) -> float:
    return float(text.replace("−", "-"))


def _table(run: str, name: str) -> pd.DataFrame:
    return pd.read_csv(ROOT / "figures" / RUNS[run] / "tables" / f"{name}.csv")


def _tables(text: str, marker: str) -> list[list[list[str]]]:
    """Every markdown table whose header line contains ``marker``: rows of stripped cells."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("|") and marker in line:
            rows = []
            for row in lines[i:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            out.append([rows[0]] + rows[2:])  # header, then the body (the --- line dropped)
    return out


def _check_cell(cell: str, rho, lo, hi, p_holm=None, width=None, where=""):
    m = CELL.match(cell)
    assert m, f"{where}: cannot read {cell!r}"
    bold, value, _, low, high, w = m.groups()
    assert _f(value) == round(rho, 2) and _f(low) == round(lo, 2) and _f(high) == round(hi, 2), (where, cell)
    if w is not None:
        assert _f(w) == round(width, 2), (where, cell, width)
    if p_holm is not None:
        assert bool(bold) == bool(p_holm < 0.05), f"{where}: bold must mean Holm p < 0.05 (p_holm = {p_holm:.3g})"


def _quoted_tables(marker: str) -> list[tuple[str, list[list[str]]]]:
    """(page, table) for every table with ``marker`` in its header, in README.md and docs/."""
    found = [(page, table) for page, text in doc_pages().items() for table in _tables(text, marker)]
    assert found, f"no table with {marker!r} in README.md or docs/: the numbers moved out of sight of this test"
    return found


def _joined_pages() -> list[tuple[str, str]]:
    return [(page, " ".join(text.split())) for page, text in doc_pages().items()]


@pytest.mark.parametrize("page_table", _quoted_tables("| measure | default (N ="), ids=lambda pt: pt[0])
def test_spearman_table(page_table):
    _, table = page_table
    runs = [re.match(r"([\w-]+) \(N = (\d+)\)", h).groups() for h in table[0][1:]]
    for run, n in runs:
        assert (_table(run, "spearman")["n"] == int(n)).all(), run
    for row in table[1:]:
        measure = LABELS[row[0]]
        for (run, _), cell in zip(runs, row[1:]):
            t = _table(run, "spearman").set_index("measure").loc[measure]
            _check_cell(cell, t.rho, t.ci_low, t.ci_high, t.p_holm, t.ci_high - t.ci_low, f"{run}/{measure}")


def test_paired_delta_and_retrieval_sentences():
    quoted = [(p, t) for p, t in _joined_pages() if "Paired Δρ = ρ(BoT) − ρ(u) on cpu-large" in t]
    assert quoted, "the paired Δρ sentence is in neither README.md nor docs/"
    for page, text in quoted:
        _check_delta_and_retrieval(text, page)


def _check_delta_and_retrieval(text: str, page: str):
    sentence = re.search(r"Paired Δρ = ρ\(BoT\) − ρ\(u\) on cpu-large: (.*?)\. ", text).group(1)
    names = {"entropy": "token_entropy", "SE": "se", "SE-LW": "se_lw", "KLE": "kle", "CD": "cd", "RD": "rd"}
    boot = _table("cpu-large", "bootstrap").set_index("measure")
    found = re.findall(rf"([\w-]+) ({NUM}) \[({NUM}), ({NUM})\]", sentence)
    assert {names[n] for n, *_ in found} == set(boot.index)
    for name, d, lo, hi in found:
        t = boot.loc[names[name]]
        assert (_f(d), _f(lo), _f(hi)) == (round(t.delta, 2), round(t.ci_low, 2), round(t.ci_high, 2)), name
    auc = _table("cpu-large", "retrieval").set_index("measure")["auc"]
    rb = _table("cpu-large", "retrieval_bootstrap").set_index(["metric", "measure"])
    m = re.search(
        rf"AUC ({NUM}) vs ({NUM}), paired ΔAUC ({NUM}) \[({NUM}), ({NUM})\]; ΔP@10% ({NUM}) "
        rf"\[({NUM}), ({NUM})\]",
        text,
    )
    got = [_f(x) for x in m.groups()]
    a, p = rb.loc[("auc", "cd")], rb.loc[("precision_at_10", "cd")]
    assert got[:5] == [
        round(auc["bot"], 3),
        round(auc["cd"], 3),
        round(a.delta, 3),
        round(a.ci_low, 3),
        round(a.ci_high, 3),
    ]
    assert got[5:] == [round(p.delta, 2), round(p.ci_low, 2), round(p.ci_high, 2)]


@pytest.mark.parametrize("page_table", _quoted_tables("(a) AUC for 1[V > 0]"), ids=lambda pt: pt[0])
def test_decomposition_table(page_table):
    _, table = page_table
    d = _table("cpu-large", "decomposition").set_index("measure")
    n_all = re.search(r"\(all (\d+)\)", table[0][1]).group(1)
    n_pos = re.search(r"within the (\d+) V > 0", table[0][2]).group(1)
    assert int(n_all) == d.n_pos.iloc[0] + d.n_zero.iloc[0] and int(n_pos) == d.n_pos.iloc[0]
    for row in table[1:]:
        m, t = LABELS[row[0]], d.loc[LABELS[row[0]]]
        if row[1] == "1.00 (by construction)":
            assert t.auc_pos == 1.0
        else:
            _check_cell(row[1], t.auc_pos, t.auc_pos_ci_low, t.auc_pos_ci_high, where=f"{m} (a)")
        _check_cell(row[2], t.rho_pos, t.rho_pos_ci_low, t.rho_pos_ci_high, t.rho_pos_p_holm, where=f"{m} (b)")
        if row[3] == "—":
            assert np.isnan(t.delta_rho_pos)
        else:
            _check_cell(row[3], t.delta_rho_pos, t.delta_rho_pos_ci_low, t.delta_rho_pos_ci_high, where=f"{m} (c)")


_STATS = {"ρ(u, V ∣ s)": "partial", "ρ(u, V / s)": "ratio", "ρ(u, s)": "norm"}
_SUBSETS = {"all": "all", "V > 0": "v_pos", "V = 0": "v_zero"}


def test_size_control_tables():
    for src, table in _quoted_tables("| measure (gradient size, "):
        run = re.match(r"measure \(gradient size, ([\w-]+)\)", table[0][0]).group(1)
        sc = _table(run, "size_control").set_index(["subset", "statistic", "measure"])
        cols = []
        for head in table[0][1:]:
            stat, subset = re.match(r"(.+), (all|V > 0|V = 0) \(N = \d+\)$", head).groups()
            cols.append((_SUBSETS[subset], _STATS[stat]))
            n = int(re.search(r"N = (\d+)", head).group(1))
            assert (sc.loc[(_SUBSETS[subset], _STATS[stat])]["n"] == n).all(), (src, head)
        for row in table[1:]:
            m = LABELS[row[0]]
            for (subset, stat), cell in zip(cols, row[1:]):
                t = sc.loc[(subset, stat, m)]
                if cell == "—":
                    assert np.isnan(t.rho), (src, run, m, subset, stat)
                else:
                    _check_cell(cell, t.rho, t.ci_low, t.ci_high, t.p_holm, where=f"{src} {run} {m} {subset} {stat}")
