"""The update-alignment study's two metrics side by side: each snapshot filed in Adam's metric
(``<snap>_adam``, ``gcpo align --adam-metric``) read beside its Euclidean twin (``<snap>``), at
the protocol's batch size, against the pass's plan (``figures/update_alignment/adam/plan.md``).

The test in Adam's metric: with B bootstrap replicates the percentile p has a floor of 2/(B + 1),
which Holm over the 26 weightings of a block raises above 0.05, so no weighting could pass. The
plan fixes a floorless p instead, the normal approximation from the bootstrap interval,

    s = (hi − lo) / (2 z₀.₉₇₅),   p = 2 Φ(−|Δcos| / s),

and Holm over the modulators (kind ``modulator``: the paper's, the field's and each one shuffled;
no ceiling, no baseline, no dose variant) of every Adam snapshot at that batch size together. The
bootstrap p and its per-block Holm stay in ``summary.parquet``. A reading says "clears 0 after
Holm" only for a Holm-adjusted p below 0.05 with Δcos > 0; otherwise "not detected" and the
equivalence bound (the CI's upper end) it excludes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import norm

from gcpo_analysis.stats.size_control import holm
from gcpo_analysis.study.alignment_settings import LEVEL, PROTOCOL_BATCH
from gcpo_analysis.study.alignment_tables import MARGIN  # the plan's primary margin in Δcos

ADAM_SUFFIX = "_adam"  # gcpo_train.align.adam_metric files a snapshot in Adam's metric under this
ALPHA = 0.05


def adam_pairs(names) -> list[str]:
    """The Euclidean snapshots that have a twin in Adam's metric, in name order."""
    names = set(names)
    return sorted(n for n in names if not n.endswith(ADAM_SUFFIX) and n + ADAM_SUFFIX in names)


def normal_p(dcos, lo, hi, level: float = LEVEL) -> np.ndarray:
    """2 Φ(−|Δ| / s) with s = (hi − lo) / (2 z) from a ``level`` interval; NaN where the interval
    has no width (a weighting equal to the baseline in every replicate) or a value is missing."""
    d, lo, hi = (np.asarray(x, float) for x in (dcos, lo, hi))
    s = (hi - lo) / (2.0 * norm.ppf(0.5 + level / 2.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2.0 * norm.sf(np.abs(d) / s)
    return np.where(np.isfinite(s) & (s > 0) & np.isfinite(d), p, np.nan)


def metric_table(
    summary: pd.DataFrame, bounds: pd.DataFrame, batch_size: int = PROTOCOL_BATCH, family: dict | None = None
) -> pd.DataFrame:
    """One row per (snapshot, weighting) of the snapshots with an Adam twin, at ``batch_size``:
    Δcos with its CI in each metric (``raw_*``, ``adam_*``), the Adam row's normal-approximation p
    and its Holm-adjusted p over its family, the noise-corrected upper end against a quarter of
    its bounded ceiling, and the reading. ``family`` maps a snapshot to its Holm family (restat:
    the run's loss aggregation, so that a snapshot of another loss is not tested with the
    protocol's); by default every snapshot is one family."""
    pairs = adam_pairs(summary["snapshot"].unique())
    if not pairs:
        return pd.DataFrame()
    s = summary[summary["batch_size"] == batch_size]
    keep = ["weighting", "kind", "cos", "dcos", "dcos_lo", "dcos_hi", "dcos_mu", "dcos_mu_lo", "dcos_mu_hi"]
    rows = []
    for snap in pairs:
        raw = s[s["snapshot"] == snap][keep].set_index("weighting")
        adam = s[s["snapshot"] == snap + ADAM_SUFFIX][keep].set_index("weighting")
        both = raw.merge(adam, left_index=True, right_index=True, suffixes=("_r", "_a"), how="inner")
        both = both[both["kind_a"] != "baseline"]
        for w, r in both.iterrows():
            rows.append(
                dict(
                    snapshot=snap,
                    weighting=w,
                    kind=r["kind_a"],
                    raw_cos=r["cos_r"],
                    raw_dcos=r["dcos_r"],
                    raw_lo=r["dcos_lo_r"],
                    raw_hi=r["dcos_hi_r"],
                    adam_cos=r["cos_a"],
                    adam_dcos=r["dcos_a"],
                    adam_lo=r["dcos_lo_a"],
                    adam_hi=r["dcos_hi_a"],
                    raw_mu=r["dcos_mu_r"],
                    raw_mu_lo=r["dcos_mu_lo_r"],
                    raw_mu_hi=r["dcos_mu_hi_r"],
                    adam_mu=r["dcos_mu_a"],
                    adam_mu_lo=r["dcos_mu_lo_a"],
                    adam_mu_hi=r["dcos_mu_hi_a"],
                )
            )
    table = pd.DataFrame(rows)
    tested = (table["kind"] == "modulator").to_numpy()
    table["adam_p_normal"] = np.where(tested, normal_p(table["adam_dcos"], table["adam_lo"], table["adam_hi"]), np.nan)
    table["family"] = [str((family or {}).get(snap, "")) for snap in table["snapshot"]]
    table["adam_p_holm"] = np.nan
    table.loc[tested, "adam_p_holm"] = (
        table[tested].groupby("family")["adam_p_normal"].transform(lambda p: holm(p.to_numpy())).to_numpy()
    )
    ceiling = bounds[bounds["batch_size"] == batch_size].set_index(["snapshot", "weighting"])["bounded_crossfit_mu"]
    table["adam_bounded_crossfit_mu"] = [
        ceiling.get((snap + ADAM_SUFFIX, w), np.nan) for snap, w in zip(table["snapshot"], table["weighting"])
    ]
    table["reading"] = [_reading(r) for r in table.to_dict("records")]
    return table


def _reading(r: dict) -> str:
    if r["kind"] != "modulator":
        return "ceiling (described, not tested)"
    if r["adam_p_holm"] < ALPHA:
        return "clears 0 after Holm" if r["adam_dcos"] > 0 else "below 0 after Holm"
    hi = r["adam_hi"]
    return f"not detected; the CI excludes Δcos > {hi:+.3f}" + ("" if hi < MARGIN else f" (≥ the margin {MARGIN})")


def _ci(d: float, lo: float, hi: float) -> str:
    if not np.isfinite(d):
        return "–"
    return f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]"


def metric_markdown(table: pd.DataFrame, batch_size: int = PROTOCOL_BATCH) -> str:
    """The table of ``metric_table`` as markdown: per snapshot, each weighting's Δcos raw and in
    Adam's metric, the Adam row's p and Holm, and the reading."""
    if table.empty:
        return "No snapshot has a twin in Adam's metric.\n"
    sizes = table[table["kind"] == "modulator"].groupby("family").size()
    n_family = " and ".join(f"{n}{f' ({f})' if f else ''}" for f, n in sizes.items())
    lines = [
        f"# Δcos against equal weights, raw and in Adam's metric (batch of {batch_size})",
        "",
        f"{LEVEL:.0%} group-bootstrap CIs. p: the normal approximation from the Adam row's interval; Holm "
        f"over the {n_family} modulator rows of the Adam snapshots of one loss aggregation together "
        "(plan.md). Ceilings are described, not tested.",
        "",
    ]
    for snap, t in table.groupby("snapshot", sort=True):
        lines += [
            f"## {snap}",
            "",
            "| weighting | raw Δcos [CI] | Adam Δcos [CI] | p (Adam) | Holm | reading |",
            "|---|---|---|---|---|---|",
        ]
        for r in t[t["kind"] == "modulator"].to_dict("records"):
            p = "" if not np.isfinite(r["adam_p_normal"]) else f"{r['adam_p_normal']:.3g}"
            h = "" if not np.isfinite(r["adam_p_holm"]) else f"{r['adam_p_holm']:.3g}"
            lines.append(
                f"| {r['weighting']} | {_ci(r['raw_dcos'], r['raw_lo'], r['raw_hi'])} | "
                f"{_ci(r['adam_dcos'], r['adam_lo'], r['adam_hi'])} | {p} | {h} | {r['reading']} |"
            )
        lines += [
            "",
            "| ceiling (described, not tested) | raw, noise-corrected [CI] | Adam, noise-corrected [CI] |",
            "|---|---|---|",
        ]
        for r in t[t["kind"] == "ceiling"].to_dict("records"):
            lines.append(
                f"| {r['weighting']} | {_ci(r['raw_mu'], r['raw_mu_lo'], r['raw_mu_hi'])} | "
                f"{_ci(r['adam_mu'], r['adam_mu_lo'], r['adam_mu_hi'])} |"
            )
        lines.append("")
    passed = table[table["reading"] == "clears 0 after Holm"]
    lines.append(
        "**After Holm:** "
        + (
            "no weighting's Δcos in Adam's metric clears 0."
            if passed.empty
            else "; ".join(f"{r.weighting} at {r.snapshot} ({r.adam_dcos:+.4f})" for r in passed.itertuples())
            + " clear 0."
        )
    )
    return "\n".join(lines) + "\n"
