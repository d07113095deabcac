"""The headline tables of the trained comparisons (gcpo compare), wherever they are quoted
(README.md, docs/**/*.md), against the committed summary.csv each is rounded from: "| arm
(trained) |" is BoolQ's (figures/train_compare/compare/), "| arm (trained, SIQA) |" SIQA's
(figures/train_compare/siqa/), "| arm (trained, NarrativeQA spans) |" the reading task's
(figures/train_compare/nqa_spans/). A rerun or resumed comparison that changes a summary, or an
edit that drifts, fails here."""

import re
from pathlib import Path

import pandas as pd
import pytest
from helpers.doc_pages import doc_pages

ROOT = Path(__file__).resolve().parents[2]
SUMMARIES = {
    "| arm (trained) |": ROOT / "figures" / "train_compare" / "compare" / "summary.csv",
    "| arm (trained, SIQA) |": ROOT / "figures" / "train_compare" / "siqa" / "summary.csv",
    "| arm (trained, NarrativeQA spans) |": ROOT / "figures" / "train_compare" / "nqa_spans" / "summary.csv",
}
NUM = r"[+−-]?\d+\.\d+"


def _f(text: str) -> float:
    return float(text.replace("−", "-").replace("+", ""))


@pytest.mark.parametrize("header", sorted(SUMMARIES))
def test_compare_headline_table(header):
    summary = pd.read_csv(SUMMARIES[header]).set_index("arm")
    rows = []
    for page, text in doc_pages().items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(header):
                for r in lines[i + 2 :]:
                    if not r.startswith("|"):
                        break
                    rows.append((page, r))
    assert rows, f"no {header!r} table in README.md or docs/: the numbers moved out of sight of this test"
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
