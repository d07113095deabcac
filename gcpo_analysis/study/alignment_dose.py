"""Dose-response of the update-alignment study: does a stronger modulation move the update more?

From the committed groups frames alone (no resampling of rollouts): the measures behind bot_rd,
rd and se are implied exactly by their weights at the run's α (``implied_measures``), and the
weights are recomputed at α ∈ ``ALPHAS`` with the package's own weight functions
(``dispersion.rd_weight``, ``dispersion.geometry_weight``, ``entropy.entropy_weight``; α_G = α/ln G),
plus each one's rank-normalised weight, ω = 1 + s (2 (rank − 1)/(n − 1) − 1) with s = ``RANK_SPREAD``
over the groups with a gradient (the same order as the run's ω, a spread of ±50% whatever the
measure's scale). Δcos of each against equal weights is read against the mean within-batch
coefficient of variation of ω (``within_batch_spread``): the dose the update actually feels.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from gcpo_analysis.frames import write_figure
from gcpo_analysis.measures.dispersion import alpha_g, geometry_weight, rd_weight
from gcpo_analysis.measures.entropy import entropy_weight

ALPHAS = (0.6, 1.0, 2.0, 5.0, 10.0)
DOSE_MEASURES = ("bot_rd", "rd", "se")
RANK_SPREAD = 0.5
RANK = "rank ±50%"


def implied_measures(w_rd, w_bot, w_se, G: int, alpha: float) -> dict[str, np.ndarray]:
    """RD, BoT² and SE that give the weights ω_RD = 1 + α_G RD, ω_BoT = 1 − α_G BoT² (unclipped:
    α_G BoT² < 1 for BoT ≤ 1 and α ≤ ln G) and ω_SE = 1 − α SE/ln G (SE ≤ ln G) at α."""
    a = alpha_g(G, alpha)
    return {
        "rd": np.clip((np.asarray(w_rd, float) - 1.0) / a, 0.0, 1.0),
        "bot2": np.clip((1.0 - np.asarray(w_bot, float)) / a, 0.0, None),
        "se": np.clip((1.0 - np.asarray(w_se, float)) * math.log(G) / alpha, 0.0, None),
    }


def rank_weight(w: np.ndarray, live: np.ndarray, spread: float = RANK_SPREAD) -> np.ndarray:
    """1 + spread (2 (rank − 1)/(n − 1) − 1) by the rank of ω among the live groups (ties
    averaged), in [1 − spread, 1 + spread]; 1 for a group with no gradient (it moves nothing)."""
    out = np.ones(len(w))
    n = int(live.sum())
    if n > 1:
        out[live] = 1.0 + spread * (2.0 * (rankdata(w[live]) - 1.0) / (n - 1) - 1.0)
    return out


def dose_weights(groups: pd.DataFrame, G: int, alpha_run: float) -> dict[str, np.ndarray]:
    """'<measure> α=<a>' for every α in ``ALPHAS`` and '<measure> rank ±50%', from the frame's
    w_rd, w_bot, w_se at the run's α (``alpha_run``) and its ``live`` column; with 'none'."""
    m = implied_measures(groups["w_rd"], groups["w_bot"], groups["w_se"], G, alpha_run)
    live = groups["live"].to_numpy(bool)
    out = {"none": np.ones(len(groups))}
    for alpha in ALPHAS:
        rd = np.asarray(rd_weight(m["rd"], G, alpha), float)
        out[f"rd α={alpha:g}"] = rd
        out[f"bot_rd α={alpha:g}"] = np.asarray(geometry_weight(np.sqrt(m["bot2"]), G, alpha), float) * rd
        out[f"se α={alpha:g}"] = np.asarray(entropy_weight(m["se"], G, alpha), float)
    for name in DOSE_MEASURES:
        out[f"{name} {RANK}"] = rank_weight(groups[f"w_{name}"].to_numpy(float), live)
    return out


def within_batch_spread(W: np.ndarray, live: np.ndarray) -> float:
    """Mean over batches of the coefficient of variation (population std / mean) of ω over the
    batch's live groups (batches with fewer than two live groups left out)."""
    rows = []
    for w, ok in zip(W, live):
        if ok.sum() >= 2 and w[ok].mean() != 0:
            rows.append(w[ok].std() / abs(w[ok].mean()))
    return float(np.mean(rows)) if rows else float("nan")


def split_name(name: str) -> tuple[str, str]:
    """('bot_rd', 'α=0.6') or ('se', 'rank ±50%') from a dose weighting's name."""
    measure, _, dose = name.partition(" ")
    return measure, dose


def dose_figure(table: pd.DataFrame, path_stem) -> None:
    """Δcos (95% CI) against the within-batch spread of ω, one panel per snapshot, a line per
    measure over α and an open marker for its rank weight; PNG and SVG at ``path_stem``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "gcpo"  # the SVG's ids the same at every run
    snaps = list(dict.fromkeys(table["snapshot"]))
    fig, axes = plt.subplots(1, len(snaps), figsize=(3.2 * len(snaps), 3.2), sharey=True, squeeze=False)
    colours = dict(zip(DOSE_MEASURES, ("C0", "C1", "C2")))
    for ax, snap in zip(axes[0], snaps):
        # a snapshot with too few live groups has no defined cosine and no spread: an empty panel
        t = table[(table["snapshot"] == snap) & (table["spread"] > 0)]
        if t.empty:
            ax.text(0.5, 0.5, "no defined cosine", ha="center", va="center", transform=ax.transAxes, fontsize=8)
        for measure in DOSE_MEASURES:
            rows = t[t["measure"] == measure]
            for is_rank, style in ((False, dict(marker="o", ls="-")), (True, dict(marker="s", ls="none", mfc="none"))):
                r = rows[(rows["dose"] == RANK) == is_rank]
                # the percentile CI need not hold the estimate: drawn as an interval, not as ± errors
                ax.vlines(r["spread"], r["dcos_lo"], r["dcos_hi"], color=colours[measure], lw=0.8)
                ax.plot(
                    r["spread"],
                    r["dcos"],
                    color=colours[measure],
                    label=f"{measure}{' (rank)' if is_rank else ''}",
                    **style,
                )
        ax.axhline(0, color="grey", lw=0.8)
        if not t.empty:
            ax.set_xscale("log")  # every spread plotted is > 0 (equal weights are not plotted)
        ax.set_title(snap, fontsize=9)
        ax.set_xlabel("within-batch CV of ω")
    axes[0][0].set_ylabel("Δcos vs equal weights (batch of 4)")
    axes[0][-1].legend(fontsize=6, loc="best")
    fig.tight_layout()
    for ext in ("png", "svg"):
        write_figure(fig, f"{path_stem}.{ext}", dpi=150)
    plt.close(fig)
