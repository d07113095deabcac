"""Figures of the numerical checks (paper Sec. 3 and App. C): the simulator's two gaps, and whether
gradients follow the embedding (the Lipschitz assumption)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from ..stats.gap_result import MEASURE_LABELS
from .base import _errorbars, _human, _label, _measure_ticks, plt, save_figure


def simulation_gaps_plot(rho_table: pd.DataFrame, filter_table: pd.DataFrame, path=None):
    """The simulator's two gaps side by side.

    Left: Spearman rho(u, V) per measure (``rho_table`` columns measure, rho, setting and, when
    present, ci_low/ci_high), one bar group per setting. Right: the calibration gap: mean RD, V(q)
    and ||g_hat|| of the kept and removed queries relative to all queries (``entropy_filter_effect``
    output; its ``rel_*_ci_low/high`` columns, when present, are drawn as 95% CIs), with tau.
    """
    for name, t, cols in (
        ("rho_table", rho_table, ("measure", "rho", "setting")),
        ("filter_table", filter_table, ("subset",)),
    ):
        missing = [c for c in cols if c not in t.columns]
        if missing:
            raise ValueError(f"simulation_gaps_plot: {name} lacks column(s) {missing}")
    fig, (a, b) = plt.subplots(1, 2, figsize=(14, 5), layout="constrained")
    rt = _label(rho_table).assign(setting=lambda d: d["setting"].map(_human))
    settings = list(dict.fromkeys(rt["setting"]))
    labels = list(dict.fromkeys(rt["label"]))
    width = 0.8 / len(settings)
    for i, (setting, color) in enumerate(zip(settings, sns.color_palette("deep"))):
        part = rt[rt["setting"] == setting].set_index("label").reindex(labels)
        x = np.arange(len(labels)) - 0.4 + width * (i + 0.5)
        a.bar(x, part["rho"], width, color=color, label=setting)
        if {"ci_low", "ci_high"} <= set(part.columns):
            _errorbars(a, x, part["rho"], part["ci_low"], part["ci_high"], None)
    a.axhline(0, color="grey", lw=0.8)
    ci = " with 95% bootstrap CIs" if {"ci_low", "ci_high"} <= set(rt.columns) else ""
    a.set(title=f"Anisotropic gap: Spearman ρ(u, V){ci}", ylabel="ρ(u, V)")
    _measure_ticks(a, labels)
    a.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1, frameon=False)

    names = {"rd": "mean RD", "grad_var": "mean V(q)", "update_norm": "mean ‖ĝ‖"}
    ft = filter_table.set_index("subset")
    metrics = [c[len("mean_") :] for c in ft.columns if c.startswith("mean_")]
    subsets = [s for s in ("kept", "removed") if s in ft.index]
    width = 0.8 / max(len(subsets), 1)
    n = {s: int(ft["n"].loc[s]) for s in subsets} if "n" in ft.columns else {}
    for i, (subset, color) in enumerate(zip(subsets, sns.color_palette("deep")[2:])):
        x = np.arange(len(metrics)) - 0.4 + width * (i + 0.5)
        rel = np.array([ft[f"mean_{m}"].loc[subset] / ft[f"mean_{m}"].loc["all"] for m in metrics])
        label = {"kept": "kept: H ≤ τ", "removed": "removed: H > τ"}[subset] + (f" ({n[subset]} queries)" if n else "")
        b.bar(x, rel, width, color=color, label=label)
        if all(f"rel_{m}_ci_low" in ft.columns for m in metrics):
            lo = ft.loc[subset, [f"rel_{m}_ci_low" for m in metrics]].to_numpy(float)
            hi = ft.loc[subset, [f"rel_{m}_ci_high" for m in metrics]].to_numpy(float)
            _errorbars(b, x, rel, lo, hi, None)
    b.axhline(1, color="black", lw=1, ls="--", label="all queries (= 1)")
    b.set_xticks(np.arange(len(metrics)), [names.get(m, m) for m in metrics])
    tau = f"τ = {ft['tau'].iloc[0]:.3g}" if "tau" in ft.columns else "τ"
    if "tau_quantile" in ft.columns:
        h = MEASURE_LABELS.get(ft["measure"].iloc[0], ft["measure"].iloc[0]) if "measure" in ft.columns else "H"
        tau += f", the {ft['tau_quantile'].iloc[0]:.0%} quantile of {h}"
    has_ci = all(f"rel_{m}_ci_low" in ft.columns for m in metrics)
    b.set(
        title=f"Calibration gap: entropy filter H ≤ τ ({tau})",
        ylabel="subset mean ÷ mean over all queries" + (" (95% bootstrap CI)" if has_ci else ""),
    )
    b.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3, frameon=False)
    if path is not None:
        save_figure(fig, path)
    return fig


def lipschitz_plot(
    pairs: pd.DataFrame, per_group: pd.DataFrame, summary: pd.DataFrame, path=None, title: str | None = None
):
    """Do gradients follow the embedding? (``gcpo_analysis.stats.lipschitz``, paper App. C's assumption.)

    (a) the per-group Spearman rho(d_g, d_e), one dot per group, with the mean and its bootstrap
    CI; (b) every pair: d_e / group mean against d_g / group mean (log axis), with the median of
    d_g in deciles of d_e and the pooled rho; (c) d_g / group mean of same-cluster and
    different-cluster pairs, with the ratio of means and the AUC (bootstrap CIs over groups).
    """
    need = {
        "pairs": (pairs, ("query_id", "grad_norm", "emb_norm")),
        "per_group": (per_group, ("rho",)),
        "summary": (summary, ("statistic", "estimate", "ci_low", "ci_high")),
    }
    for name, (t, cols) in need.items():
        missing = [c for c in cols if c not in t.columns]
        if missing:
            raise ValueError(f"lipschitz_plot: {name} lacks column(s) {missing}")
    s = summary.set_index("statistic")
    palette = sns.color_palette("deep")
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.6), layout="constrained")

    def stat(name):
        r = s.loc[name] if name in s.index else None
        if r is None or not np.isfinite(r["estimate"]):
            return "n/a"
        return f"{r['estimate']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"

    rho = per_group["rho"].dropna().to_numpy()
    jitter = np.random.default_rng(0).uniform(-0.15, 0.15, len(rho))
    ax[0].scatter(rho, jitter, s=18, alpha=0.7, color=palette[0])
    if "mean_rho" in s.index and np.isfinite(s["estimate"].loc["mean_rho"]):
        m = s.loc["mean_rho"]
        ax[0].errorbar(
            [m["estimate"]],
            [0.3],
            xerr=[[m["estimate"] - m["ci_low"]], [m["ci_high"] - m["estimate"]]],
            fmt="D",
            color="black",
            capsize=4,
            label="mean, 95% CI",
        )
        ax[0].legend(fontsize=8, loc="lower left")
    ax[0].axvline(0, color="grey", lw=0.8)
    ax[0].set(
        xlim=(-1.05, 1.05),
        ylim=(-0.5, 0.5),
        yticks=[],
        xlabel="Spearman ρ(‖g_i − g_j‖², 1 − cos(e_i, e_j))",
        title=f"(a) per group: {len(rho)} of {len(per_group)} groups, mean ρ = {stat('mean_rho')}\n"
        f"gradient directions only, 1 − cos(g_i, g_j): mean ρ = {stat('mean_rho_direction')}",
    )

    ok = pairs.dropna(subset=["grad_norm", "emb_norm"])
    ok = ok[ok["grad_norm"] > 0]
    ax[1].scatter(ok["emb_norm"], ok["grad_norm"], s=6, alpha=0.25, color=palette[0], rasterized=True)
    if ok["emb_norm"].nunique() >= 10:
        bins = pd.qcut(ok["emb_norm"], 10, duplicates="drop")
        med = ok.groupby(bins, observed=True).agg(x=("emb_norm", "median"), y=("grad_norm", "median"))
        ax[1].plot(med["x"], med["y"], "o-", color="black", lw=1.5, label="median per decile of d_e")
        ax[1].legend(fontsize=8, loc="lower right")
    ax[1].set_yscale("log")
    ax[1].set(
        xlabel="embedding distance / group mean",
        ylabel="gradient distance / group mean",
        title=f"(b) all pairs: pooled ρ = {stat('pooled_rho')}",
    )

    if "same_cluster" in pairs.columns:
        used = per_group.loc[per_group.get("same_mean", pd.Series(dtype=float)).notna(), "query_id"]
        cp = pairs[pairs["query_id"].isin(used)].assign(
            kind=lambda d: np.where(d["same_cluster"], "same cluster", "different cluster")
        )
        if len(cp):
            sns.boxplot(
                data=cp,
                x="kind",
                y="grad_norm",
                order=["same cluster", "different cluster"],
                ax=ax[2],
                hue="kind",
                palette=[palette[2], palette[3]],
                legend=False,
                showfliers=False,
            )
            # the points by hand, not sns.stripplot, whose jitter draws from numpy's global RNG:
            # a redraw must give the same bytes
            strip = np.random.default_rng(0)
            for k, kind in enumerate(["same cluster", "different cluster"]):
                y = cp.loc[cp["kind"] == kind, "grad_norm"].to_numpy()
                ax[2].scatter(k + strip.uniform(-0.2, 0.2, len(y)), y, s=4, color="black", alpha=0.3, lw=0)
        ax[2].set(
            xlabel="",
            ylabel="gradient distance / group mean",
            title=f"(c) {len(used)} groups with both kinds of pair\nratio = {stat('cluster_ratio')}, "
            f"AUC = {stat('cluster_auc')}",
        )
    else:
        ax[2].set_axis_off()
    if title:
        fig.suptitle(f"Do gradients follow the embedding? {_human(title)}", fontsize=13, fontweight="bold")
    if path is not None:
        save_figure(fig, path)
    return fig
