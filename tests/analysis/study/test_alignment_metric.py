"""The two metrics side by side (gcpo_analysis.study.alignment_metric): the floorless p, Holm over
every Adam snapshot's modulators together, and the reading, against independent computations."""

import math

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from gcpo_analysis.study.alignment_metric import adam_pairs, metric_markdown, metric_table, normal_p


def test_adam_pairs_are_the_snapshots_with_a_twin():
    assert adam_pairs(["a", "a_adam", "b", "c_adam", "d_adam_adam"]) == ["a"]
    assert adam_pairs([]) == []


def test_the_normal_p_is_read_from_the_intervals_width():
    # Δ = 0.02 with a 95% interval of half-width 0.0196: s = 0.01, z = 2
    p = normal_p([0.02, -0.02, 0.0, 0.01], [0.0004, -0.0396, -0.01, 0.01], [0.0396, -0.0004, 0.01, 0.01])
    assert p[0] == pytest.approx(math.erfc(2 / math.sqrt(2)), rel=1e-3)  # 0.0455
    assert p[1] == pytest.approx(p[0])
    assert p[2] == pytest.approx(1.0)
    assert np.isnan(p[3])  # an interval of no width: no p, not 0


def _frames(effects):
    """summary and bounds with two snapshots, each with a twin in Adam's metric: ``effects`` maps
    (snapshot, weighting) to the Adam row's (Δcos, lo, hi)."""
    rows, bounds = [], []
    for snap in ("s20", "s40"):
        for metric in ("", "_adam"):
            name = snap + metric
            rows.append(dict(snapshot=name, batch_size=4, weighting="none", kind="baseline", cos=0.1, dcos=0.0))
            for w in ("rd", "bot_rd", "oracle, cross-fitted"):
                d, lo, hi = effects.get((snap, w), (0.001, -0.002, 0.004)) if metric else (0.0, -0.003, 0.003)
                kind = "ceiling" if w.startswith("oracle") else "modulator"
                rows.append(
                    dict(
                        snapshot=name, batch_size=4, weighting=w, kind=kind, cos=0.1 + d, dcos=d, dcos_lo=lo, dcos_hi=hi
                    )
                )
                bounds.append(dict(snapshot=name, batch_size=4, weighting=w, bounded_crossfit_mu=0.04))
            rows.append(
                dict(snapshot=name, batch_size=8, weighting="rd", kind="modulator", dcos=0.5, dcos_lo=0.4, dcos_hi=0.6)
            )
    summary = pd.DataFrame(rows)
    for c in ("dcos_mu", "dcos_mu_lo", "dcos_mu_hi"):
        summary[c] = summary["dcos"]
    return summary, pd.DataFrame(bounds)


def test_holm_runs_over_every_adam_snapshots_modulators_together():
    effects = {("s20", "rd"): (0.02, 0.0104, 0.0296), ("s40", "bot_rd"): (-0.03, -0.0496, -0.0104)}
    summary, bounds = _frames(effects)
    table = metric_table(summary, bounds)
    mods = table[table["kind"] == "modulator"]
    assert len(mods) == 4 and set(table["snapshot"]) == {"s20", "s40"}  # batch size 8 left out
    expected = multipletests(mods["adam_p_normal"], method="holm")[1]
    np.testing.assert_allclose(mods["adam_p_holm"], expected)
    reading = dict(zip(zip(table["snapshot"], table["weighting"]), table["reading"]))
    assert reading[("s20", "rd")] == "clears 0 after Holm"
    assert reading[("s40", "bot_rd")] == "below 0 after Holm"
    assert reading[("s20", "bot_rd")] == "not detected; the CI excludes Δcos > +0.004"
    assert reading[("s20", "oracle, cross-fitted")].startswith("ceiling")
    assert table["adam_p_holm"][table["kind"] == "ceiling"].isna().all()
    md = metric_markdown(table)
    assert "rd at s20 (+0.0200) clear 0." in md and "Holm over the 4 modulator rows" in md
    # a snapshot of another loss is its own family: each Holm runs over its own two rows
    split = metric_table(summary, bounds, family={"s20": "dapo", "s40": "sequence"})
    for fam, snap in (("dapo", "s20"), ("sequence", "s40")):
        rows = split[(split["kind"] == "modulator") & (split["snapshot"] == snap)]
        assert (rows["family"] == fam).all()
        np.testing.assert_allclose(rows["adam_p_holm"], multipletests(rows["adam_p_normal"], method="holm")[1])
    assert "2 (dapo) and 2 (sequence)" in metric_markdown(split)


def test_a_wide_interval_reads_beyond_the_margin_and_nothing_clears():
    summary, bounds = _frames({("s20", "rd"): (0.005, -0.004, 0.014)})
    table = metric_table(summary, bounds)
    r = table[(table["snapshot"] == "s20") & (table["weighting"] == "rd")].iloc[0]
    assert r["reading"] == "not detected; the CI excludes Δcos > +0.014 (≥ the margin 0.01)"
    assert "no weighting's Δcos in Adam's metric clears 0" in metric_markdown(table)


def test_no_twin_gives_an_empty_table():
    summary, bounds = _frames({})
    summary = summary[~summary["snapshot"].str.endswith("_adam")]
    assert metric_table(summary, bounds).empty
    assert metric_markdown(metric_table(summary, bounds)).startswith("No snapshot")
