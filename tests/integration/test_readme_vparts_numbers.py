"""The README's headline tables of what V is made of (V = N + C) and of the confirmatory contrast,
wherever they are quoted (README.md, docs/**/*.md), against the committed tables they are rounded
from (figures/<run>/tables/v_parts.csv, confirmatory.csv): a rerun that changes a table, or an
edit that drifts, fails here."""

import re
from pathlib import Path

import pandas as pd
from helpers.doc_pages import doc_pages

ROOT = Path(__file__).resolve().parents[2]
NUM = r"[−-]?\d+\.\d+"


def _f(text: str) -> float:
    return float(text.replace("−", "-").rstrip("%"))


def _rows(marker: str) -> list[tuple[str, list[str]]]:
    found = []
    for page, text in doc_pages().items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(marker):
                for row in lines[i + 2 :]:
                    if not row.startswith("|"):
                        break
                    found.append((page, [c.strip() for c in row.strip().strip("|").split("|")]))
    assert found, f"no table starting {marker!r} in README.md or docs/: the numbers moved out of sight of this test"
    return found


def _triple(cell: str) -> list[float]:
    return [_f(x) for x in re.fullmatch(rf"({NUM}%?) \[({NUM}%?), ({NUM}%?)\]", cell).groups()]


def test_v_parts_headline_table():
    for page, row in _rows("| study (V parts) |"):
        run = re.fullmatch(r"`(\w+)`", row[0]).group(1)
        t = pd.read_csv(ROOT / "figures" / run / "tables" / "v_parts.csv")
        t = t[(t.frame == "trimmed") & (t.subset == "v_pos")].set_index("statistic")
        share = t.loc["share_C_over_V_median"]
        assert int(row[1]) == int(share.n), (page, run)
        assert _triple(row[2]) == [round(100 * x, 1) for x in (share.estimate, share.ci_low, share.ci_high)], (
            page,
            run,
        )
        low, high = (_f(x) for x in row[3].split(" to "))
        assert [low, high] == [
            round(100 * t.loc["share_C_over_V_q05"].estimate, 1),
            round(100 * t.loc["share_C_over_V_q95"].estimate, 1),
        ], (page, run)
        for cell, statistic in ((row[4], "rho(V, grad_var_norm)"), (row[5], "rho(V, grad_norm2_mean)")):
            x = t.loc[statistic]
            assert _triple(cell) == [round(x.estimate, 2), round(x.ci_low, 2), round(x.ci_high, 2)], (page, statistic)


def test_confirmatory_headline_table():
    targets = {"V": "grad_var", "C": "grad_var_cross"}
    for page, row in _rows("| study (confirmatory) |"):
        run = re.fullmatch(r"`(\w+)`", row[0]).group(1)
        c = pd.read_csv(ROOT / "figures" / run / "tables" / "confirmatory.csv")
        c = c[(c.frame == "trimmed") & (c.target == targets[row[1]])].set_index("contrast")
        assert int(row[2]) == int(c.n.iloc[0]), (page, run)
        for cell, contrast in zip(row[3:], ("bot - se", "bot - token_entropy")):
            est, holm = cell.split(", Holm p ")
            x = c.loc[contrast]
            assert _triple(est) == [round(x.estimate, 2), round(x.ci_low, 2), round(x.ci_high, 2)], (page, contrast)
            assert float(holm) == round(x.p_holm, 2), (page, contrast)
