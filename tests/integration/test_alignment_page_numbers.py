"""The update-alignment page's answer quotes its committed tables: each number of its bullets is
read back from figures/update_alignment (headline.md, reading.md, dose.md)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIG = ROOT / "figures" / "update_alignment"
PAGE = " ".join((ROOT / "docs/results/update_alignment.md").read_text(encoding="utf-8").split())
NUM = r"[-+]?\d+\.\d+"


def _headline() -> dict[str, list[str]]:
    lines = (FIG / "headline.md").read_text().splitlines()
    return {ln.split("|")[1].strip(): [c.strip() for c in ln.strip("|").split("|")[1:]] for ln in lines[2:]}


def _m(text: str) -> str:
    return text.replace("-", "−")


def test_the_oracles_ranges():
    cells = _headline()

    def span(row):
        est = [float(re.findall(NUM, c)[0]) for c in cells[row]]
        return min(est), max(est)

    lo, hi = span("*oracle, in-sample (fits the reference that scores it)*")
    assert f"from {_m(f'{lo:+.3f}')} to {_m(f'{hi:+.3f}')} in-sample" in PAGE
    lo, hi = span("*oracle, cross-fitted*")
    assert f"to between {_m(f'{lo:+.3f}')} and {_m(f'{hi:+.3f}')}" in PAGE


def test_the_field_weightings_at_the_base_policy():
    cells = _headline()
    col = 1  # nqa_step0
    for row in ("inv_variance", "inv_grad_norm", "inv_reward_std"):
        est, low, high = re.findall(NUM, cells[row][col])
        assert f"{_m(est)} [{_m(low)}, {_m(high)}]" in PAGE, row


def test_the_bounded_ceiling_and_the_holm_floor():
    reading = (FIG / "reading.md").read_text()
    cross = [
        float(x)
        for x in re.findall(
            r"Positive weights in 0.4–1.3 reach [-+]\d\.\d+ in-sample and ([-+]\d\.\d+) cross-fitted", reading
        )
    ]
    assert len(cross) == 5 and f"gain at most {_m(f'{max(cross):+.3f}')} cross-fitted" in PAGE
    assert f"{_m(f'{max(cross[3:]):+.3f}')} or less at steps 40 and 60" in PAGE
    floor = re.search(r"the smallest p is (\d\.\d+), (\d\.\d+) after Holm", reading)
    assert f"the smallest attainable p is {float(floor.group(1)):.3f}, {floor.group(2)} after Holm" in PAGE


def _dose_rows() -> dict[tuple[str, str, str], list[str]]:
    rows, snapshot = {}, None
    for line in (FIG / "dose.md").read_text().splitlines():
        if line.startswith("## "):
            snapshot = line[3:].strip()
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(NUM, cells[3] or "x"):
            rows[snapshot, cells[0], cells[1]] = cells
    return rows


def test_the_dose_response_extremes():
    rows = _dose_rows()
    best = max(rows.values(), key=lambda c: float(c[3]))
    low, high = re.findall(NUM, best[4])
    assert f"is {_m(best[3])} [{_m(low)}, {_m(high)}], {best[0]} at α = 1" in PAGE and best[1] == "α=1"
    for key, where in (
        (("asdiv_step0", "se", "α=2"), "on ASDiv"),
        (("nqa_step0", "se", "α=10"), "on the NarrativeQA base policy"),
    ):
        cells = rows[key]
        low, high = re.findall(NUM, cells[4])
        assert f"{where}: {_m(cells[3])} [{_m(low)}, {_m(high)}]" in PAGE, key
    worst = min(rows.values(), key=lambda c: float(c[3]))
    assert worst == rows["nqa_step0", "se", "α=10"]
