"""The README's headline table of the trained comparison (gcpo compare), wherever it is quoted
(README.md, docs/**/*.md), against the committed figures/train_compare/compare/summary.csv it is
rounded from: a rerun or resumed comparison that changes the summary, or an edit that drifts,
fails here."""

import re
from pathlib import Path

import pandas as pd
from helpers.doc_pages import doc_pages

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "figures" / "train_compare" / "compare" / "summary.csv"
NUM = r"[+−-]?\d+\.\d+"


def _f(text: str) -> float:
    return float(text.replace("−", "-").replace("+", ""))


def test_compare_headline_table():
    summary = pd.read_csv(SUMMARY).set_index("arm")
    rows = []
    for page, text in doc_pages().items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("| arm (trained) |"):
                for r in lines[i + 2 :]:
                    if not r.startswith("|"):
                        break
                    rows.append((page, r))
    assert rows, "no '| arm (trained) |' table in README.md or docs/: the numbers moved out of sight of this test"
    for page, row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        arm = cells[0].split(" ")[0]
        s = summary.loc[arm]
        mean, sd = (_f(x) for x in re.fullmatch(rf"({NUM}) ± ({NUM})", cells[1]).groups())
        assert [mean, sd] == [round(s.heldout_mean, 2), round(s.heldout_sd, 2)], (page, arm)
        if arm == "none":
            assert cells[2] == "—", page
        else:
            shown = [_f(x) for x in re.fullmatch(rf"({NUM}) \[({NUM}), ({NUM})\]", cells[2]).groups()]
            assert shown == [round(s.delta, 2), round(s.delta_low, 2), round(s.delta_high, 2)], (page, arm)
        low, high = (_f(x) for x in cells[3].split("–"))
        assert [low, high] == [round(s.omega_p5, 2), round(s.omega_p95, 2)], (page, arm)
