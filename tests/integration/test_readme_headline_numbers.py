"""The README's headline tables of the Lipschitz check and of the training run, wherever they are
quoted (README.md, docs/**/*.md), against the committed tables they are rounded from: a rerun that
changes a table, or an edit that drifts, fails here. (The other headline tables are checked by
test_readme_study_numbers, test_readme_math_numbers and test_readme_numbers.)"""

import re
from pathlib import Path

import pandas as pd
import pytest
from helpers.doc_pages import doc_pages

ROOT = Path(__file__).resolve().parents[2]
NUM = r"[−-]?\d+\.\d+"


def _f(text: str) -> float:
    return float(text.replace("−", "-"))


def _tables(marker: str, required: bool = True) -> list[tuple[str, list[list[str]]]]:
    """(page, body rows as stripped cells) of every table whose header starts with ``marker``;
    ``required``: at least one page must quote it."""
    found = []
    for page, text in doc_pages().items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(marker):
                body = []
                for row in lines[i + 2 :]:
                    if not row.startswith("|"):
                        break
                    body.append([c.strip() for c in row.strip().strip("|").split("|")])
                found.append((page, body))
    if required:
        assert found, f"no table starting {marker!r} in README.md or docs/: the numbers moved out of sight of this test"
    return found


LIPSCHITZ_COLUMNS = ("mean_rho", "pooled_rho", "mean_rho_direction", "cluster_ratio")


def test_lipschitz_headline_table():
    for page, body in _tables("| run (Lipschitz) |"):
        assert body, page
        for row in body:
            run = re.fullmatch(r"`(\w+)`.*", row[0]).group(1)
            table = pd.read_csv(ROOT / "figures" / run / "tables" / "lipschitz.csv").set_index("statistic")
            assert len(row) == 1 + len(LIPSCHITZ_COLUMNS), (page, row)
            for statistic, cell in zip(LIPSCHITZ_COLUMNS, row[1:]):
                shown = [_f(x) for x in re.fullmatch(rf"({NUM}) \[({NUM}), ({NUM})\]", cell).groups()]
                t = table.loc[statistic]
                assert shown == [round(t.estimate, 2), round(t.ci_low, 2), round(t.ci_high, 2)], (page, run, statistic)


TRAIN_LABELS = {
    "token entropy": "token_entropy",
    "SE": "se",
    "SE-LW": "se_lw",
    "KLE": "kle",
    "CD": "cd",
    "BoT": "bot",
    "RD": "rd",
}


def test_training_run_headline_table():
    marker = "| ρ(u, V_train), phase |"
    for page, body in _tables(marker):
        header = next(line for line in doc_pages()[page].splitlines() if line.startswith(marker))
        measures = [TRAIN_LABELS[c.strip()] for c in header.strip().strip("|").split("|")[1:]]
        assert {row[0] for row in body} == {"pooled", "early", "middle", "late"}, page
        for row in body:
            sp = pd.read_csv(ROOT / "figures" / "train_gradvar" / "tables" / row[0] / "spearman.csv")
            rho = sp.set_index("measure")["rho"]
            assert [_f(c) for c in row[1:]] == [round(float(rho[m]), 2) for m in measures], (page, row[0])


def test_training_run_table_with_cis():
    """The results page's table of the training run (ρ, and a 95% CI where one is shown), while a
    page quotes it."""
    marker = "| groups | token entropy | SE | KLE | CD | BoT | RD |"
    found = _tables(marker, required=False)
    if not found:
        pytest.skip("no page quotes the training run's table with CIs")
    measures = [TRAIN_LABELS[c.strip()] for c in marker.strip("| ").split("|")[1:]]
    cell = re.compile(rf"^(?:\*\*)?({NUM})(?: \[({NUM}), ({NUM})\])?(?:\*\*)?$")
    for page, body in found:
        for row in body:
            phase = row[0].split()[0]
            sp = pd.read_csv(ROOT / "figures" / "train_gradvar" / "tables" / phase / "spearman.csv").set_index(
                "measure"
            )
            for m, text in zip(measures, row[1:]):
                rho, lo, hi = cell.match(text).groups()
                assert _f(rho) == round(float(sp.loc[m, "rho"]), 2), (page, phase, m)
                if lo is not None:
                    assert (_f(lo), _f(hi)) == (
                        round(float(sp.loc[m, "ci_low"]), 2),
                        round(float(sp.loc[m, "ci_high"]), 2),
                    ), (
                        page,
                        phase,
                        m,
                    )
