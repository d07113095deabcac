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


def test_the_adam_metric_section():
    """Each number of the page's Adam's-metric bullets, read back from figures/update_alignment/adam."""
    import json

    import pandas as pd

    adam = FIG / "adam"
    m = pd.read_parquet(adam / "metric.parquet")
    summary = pd.read_parquet(adam / "summary.parquet")
    dose = pd.read_parquet(adam / "dose.parquet")
    cards = {p.name[: -len(".card.json")]: json.loads(p.read_text()) for p in (adam / "snapshots").glob("*.card.json")}
    steps = ("fp32_step20", "fp32_step40", "fp32_step60")

    def tri(d, lo, hi, digits=3):
        return _m(f"{d:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]")

    frozen = [cards[s + "_adam"]["frozen_v_check"]["cos_median"] for s in steps]
    assert "median of {:.3f}, {:.3f} and {:.3f} at steps 20, 40 and 60".format(*frozen) in PAGE
    dapo = m[(m["kind"] == "modulator") & (m["family"] == "dapo")]
    assert len(dapo) == 78 and "Holm over the 78 weightings of the three snapshots" in PAGE
    assert not (m["reading"] == "clears 0 after Holm").any()
    paper = dapo[dapo["weighting"].isin(["se", "kle", "care", "rd", "cd", "bot", "cd_rd", "bot_rd"])]
    top = paper.loc[paper["adam_hi"].idxmax()]
    assert top["weighting"] == "se" and top["snapshot"] == "fp32_step60"
    assert f"the largest CI upper end is {_m(f'{top.adam_hi:+.3f}')}, SE at step 60" in PAGE
    row = dapo.set_index(["snapshot", "weighting"])
    bot = [tri(*row.loc[(s, "bot_rd"), ["adam_dcos", "adam_lo", "adam_hi"]], digits=4) for s in steps]
    assert f"bot_rd: {bot[0]}, {bot[1]} and {bot[2]} at steps 20, 40 and 60" in PAGE
    inv = [tri(*row.loc[(s, "inv_reward_std"), ["adam_dcos", "adam_lo", "adam_hi"]]) for s in steps[:2]]
    assert f"at steps 20 and 40 ({inv[0]} and {inv[1]}, unadjusted)" in PAGE
    cf = summary[(summary["batch_size"] == 4) & (summary["weighting"] == "oracle, cross-fitted")].set_index("snapshot")
    a = [_m(f"{cf.loc[s + '_adam', 'dcos']:+.3f}") for s in steps]
    r = [_m(f"{cf.loc[s, 'dcos']:+.3f}") for s in steps]
    assert f"gains {a[0]}, {a[1]} and {a[2]} in Adam's metric ({r[0]}, {r[1]} and {r[2]} raw)" in PAGE
    assert ((cf["dcos_lo"] < 0) & (cf["dcos_hi"] > 0)).loc[[s + "_adam" for s in steps]].all()
    room = summary[(summary["batch_size"] == 4) & (summary["weighting"] == "ideal room")].set_index("snapshot")
    a20, r20 = room.loc["fp32_step20_adam"], room.loc["fp32_step20"]
    assert a20["dcos_mu_lo"] > 0 and r20["dcos_mu_lo"] < 0
    assert f"{tri(a20.dcos_mu, a20.dcos_mu_lo, a20.dcos_mu_hi)} in Adam's" in PAGE
    assert f"(raw there {tri(r20.dcos_mu, r20.dcos_mu_lo, r20.dcos_mu_hi)})" in PAGE
    later = room.loc[["fp32_step40_adam", "fp32_step60_adam"]]
    assert (later["dcos_mu_lo"] < -0.3).all() and (later["dcos_mu_hi"] > 0.3).all()
    in_adam = dose[dose["snapshot"].isin([s + "_adam" for s in steps])]
    assert (in_adam["dcos_lo"] <= 0).all()
    best = in_adam.loc[in_adam["dcos"].idxmax()]
    assert (best["snapshot"], best["weighting"]) == ("fp32_step20_adam", "bot_rd rank ±50%")
    assert f"at step 20, {tri(best.dcos, best.dcos_lo, best.dcos_hi)})" in PAGE
    seq = m[(m["snapshot"] == "fp32_step60_seq") & (m["weighting"] == "bot_rd")].iloc[0]
    assert f"bot_rd {tri(seq.adam_dcos, seq.adam_lo, seq.adam_hi, 4)} in Adam's metric" in PAGE
    minutes = [
        (cards[s]["wall_seconds"]["generate"] + cards[s]["wall_seconds"]["gradient"]) / 60
        for s in (*steps, "fp32_step60_seq")
    ]
    assert "took {:.1f}, {:.1f} and {:.1f} CPU-minutes".format(*minutes[:3]) in PAGE
    assert f"{minutes[3]:.1f} for the per-sequence one" in PAGE
    gram = [cards[s]["wall_seconds"]["gram_and_weights"] for s in (*steps, "fp32_step60_seq")]
    assert f"the Gram {min(gram):.0f}–{max(gram):.0f} s" in PAGE
