"""Figures of the paper from tidy frames (seaborn on the Agg backend).

Every function takes frames (or ``GapStudyResult``s), returns a matplotlib Figure and, when
``path`` (a file stem, e.g. ``figures/fig1``) is given, writes ``<stem>.png`` and ``<stem>.svg``.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: figures are files, never windows
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .stats import MEASURE_LABELS, GapStudyResult  # noqa: E402


def save_figure(fig, path) -> list[Path]:
    """Write ``fig`` as <path>.png (150 dpi) and <path>.svg; return the two paths."""
    stem = Path(path)
    if stem.suffix in (".png", ".svg", ".pdf"):
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(out[0], dpi=150, bbox_inches="tight")
    fig.savefig(out[1], bbox_inches="tight")
    return out


def _label(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    out["label"] = out["measure"].map(lambda m: MEASURE_LABELS.get(m, m))
    return out


def _errorbars(ax, x, y, lo, hi, color):
    ax.errorbar(x, y, yerr=[np.asarray(y) - np.asarray(lo), np.asarray(hi) - np.asarray(y)],
                fmt="none", ecolor="black", capsize=3, lw=1)


def figure1(results, path=None):
    """Figure 1 (Sec. 2, App. D): one row per dataset, four panels.

    (a) Spearman rho(u, V) with bootstrap CIs; (b) AUC and precision@10% for the top-10% by V;
    (c) paired-bootstrap Delta rho = rho(ref, V) - rho(u, V) with CIs and a zero line;
    (d) held-out MAE and Spearman (mean ± std over folds).
    """
    if isinstance(results, GapStudyResult):
        results = {results.name: results}
    if not results:
        raise ValueError("figure1 needs at least one GapStudyResult")
    palette = sns.color_palette("deep")
    fig, axes = plt.subplots(len(results), 4, figsize=(18, 3.8 * len(results)), squeeze=False)
    for row, (name, res) in enumerate(results.items()):
        ax = axes[row]
        s = _label(res.spearman)
        ax[0].bar(s["label"], s["rho"], color=palette[0])
        _errorbars(ax[0], np.arange(len(s)), s["rho"], s["ci_low"], s["ci_high"], palette[0])
        ax[0].axhline(0, color="grey", lw=0.8)
        title = _human(name)
        ax[0].set(title=f"{title}: (a) Spearman ρ with V (95% CI)", ylabel="ρ")
        r = _label(res.retrieval).melt(id_vars=["label"], value_vars=["auc", "precision_at_10"],
                                       var_name="metric", value_name="value")
        r["metric"] = r["metric"].map({"auc": "AUC", "precision_at_10": "Precision@10%"})
        sns.barplot(data=r, x="label", y="value", hue="metric", ax=ax[1], palette=palette[1:3])
        ax[1].axhline(0.5, color="grey", lw=1, ls=":", label="AUC = 0.5 (chance)")
        for bars in ax[1].containers:  # a zero-height bar is a value of 0, not a missing one
            for bar in bars:
                if np.isfinite(bar.get_height()) and abs(bar.get_height()) < 1e-9:
                    ax[1].annotate("0", (bar.get_x() + bar.get_width() / 2, 0), ha="center", va="bottom", fontsize=8)
        ax[1].set(title="(b) retrieval of the top-10% V queries", xlabel="", ylabel="", ylim=(0, 1.05))
        ax[1].legend(fontsize=8, loc="upper left")
        b = _label(res.bootstrap)
        ax[2].errorbar(b["label"], b["delta"], yerr=[b["delta"] - b["ci_low"], b["ci_high"] - b["delta"]],
                       fmt="o", color=palette[3], capsize=4)
        ax[2].axhline(0, color="black", lw=1, ls="--")
        ref = res.settings.get("reference", "bot")
        ax[2].set(title=f"(c) paired Δρ = ρ({MEASURE_LABELS.get(ref, ref)}) − ρ(u) (95% CI)", ylabel="Δρ")
        h = _label(res.heldout)
        x = np.arange(len(h))
        # MAE is in V's units; divided by the mean V it reads as a fraction of a typical V.
        y_scale = float(res.settings.get("target_mean") or np.nan)
        scale = y_scale if np.isfinite(y_scale) and y_scale > 0 else 1.0
        unit = "MAE / mean V" if scale != 1.0 else "MAE (units of V)"
        mae = ax[3].bar(x - 0.2, h["mae_mean"] / scale, 0.4, yerr=h["mae_std"] / scale, capsize=3, color=palette[4])
        twin = ax[3].twinx()
        rho = twin.bar(x + 0.2, h["spearman_mean"], 0.4, yerr=h["spearman_std"], capsize=3, color=palette[5])
        ax[3].set_xticks(x, h["label"])
        ax[3].set(title="(d) held-out V̂ = b₀ + b₁u (k-fold, mean ± sd)", ylabel=unit)
        twin.set_ylabel("Spearman ρ(V̂, V)")
        ax[3].legend(handles=[mae, rho], labels=[f"{unit} (left axis)", "Spearman ρ (right axis)"], fontsize=8,
                     loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
        for a in ax[:3]:
            a.set_xlabel("")
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig


def _human(name: str) -> str:
    """A panel title from an identifier: 'narrativeqa' -> 'NarrativeQA', 'lipschitz=True' -> ..."""
    known = {"narrativeqa": "NarrativeQA", "qasper": "Qasper", "hotpotqa": "HotpotQA", "math500": "MATH500",
             "aime24": "AIME24", "olympiadbench": "OlympiadBench",
             "lipschitz=True": "gradients follow the embedding (Lipschitz)",
             "lipschitz=False": "gradients unrelated to the embedding"}
    return known.get(str(name), str(name))


def decomposition(result, path=None):
    """Our addition, not the paper's: the V = 0 decomposition (``gcpo_analysis.decomposition``).

    (a) AUC of u for 1[V > 0] over all groups, with an AUC = 0.5 line; (b) Spearman rho(u, V)
    within the V > 0 groups; (c) the paired bootstrap Delta rho = rho(reference, V) - rho(u, V)
    within V > 0, with a zero line. Every point carries its 95% percentile bootstrap CI.
    """
    d = result.decomposition if isinstance(result, GapStudyResult) else result
    if d is None or len(d) == 0:
        raise ValueError("decomposition: this result has no decomposition table (re-run gap_study)")
    d = _label(d)
    ref = result.settings.get("reference", "bot") if isinstance(result, GapStudyResult) else "bot"
    n_pos, n_zero = int(d["n_pos"].iloc[0]), int(d["n_zero"].iloc[0])
    palette = sns.color_palette("deep")
    fig, ax = plt.subplots(1, 3, figsize=(15, 3.8))
    panels = [("auc_pos", f"(a) AUC for 1[V > 0] ({n_pos} with V > 0, {n_zero} with V = 0)", 0.5, "AUC"),
              ("rho_pos", f"(b) Spearman ρ(u, V) within the {n_pos} V > 0 groups", 0.0, "ρ"),
              ("delta_rho_pos", f"(c) Δρ = ρ({MEASURE_LABELS.get(ref, ref)}) − ρ(u) within V > 0", 0.0, "Δρ")]
    for a, (col, title, line, ylabel), color in zip(ax, panels, palette):
        ok = d[col].notna()
        x = np.flatnonzero(ok.to_numpy())
        y, lo, hi = d.loc[ok, col], d.loc[ok, col + "_ci_low"], d.loc[ok, col + "_ci_high"]
        a.errorbar(x, y, yerr=[y - lo, hi - y], fmt="o", color=color, capsize=4)
        a.axhline(line, color="grey", lw=1, ls="--")
        a.set_xticks(np.arange(len(d)), d["label"])
        a.set(title=title, ylabel=ylabel, xlim=(-0.5, len(d) - 0.5))
        a.title.set_fontsize(10)
    fig.suptitle(f"{_human(getattr(result, 'name', ''))}: our addition, not the paper's — the V = 0 decomposition "
                 "(95% bootstrap CIs)", fontsize=11)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig


def ablation_plot(frame: pd.DataFrame, x: str = "alpha", y: str = "f1", hue: str = "method", path=None):
    """Figure 4: a training metric ``y`` against the strength ``x`` (alpha_base) per ``hue``,
    mean ± sd over the rows sharing (x, hue) (e.g. seeds)."""
    missing = [c for c in (x, y, hue) if c not in frame.columns]
    if missing:
        raise ValueError(f"ablation_plot: column(s) {missing} not in the frame {list(frame.columns)}")
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.lineplot(data=frame, x=x, y=y, hue=hue, marker="o", errorbar="sd", ax=ax)
    ax.set(xlabel="α" if x == "alpha" else x, ylabel=y.upper() if y == "f1" else y)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig


def _stars(p: float) -> str:
    return "" if not np.isfinite(p) else "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


def correlation_heatmap(result, path=None, title: str | None = None):
    """Correlation table as a heatmap: rows = datasets/targets, columns = measures, cells
    annotated with rho and significance stars (* p<0.05, ** p<0.01, *** p<0.001).

    ``result``: a GapStudyResult (rows: the target and, if present, the success rate), a dict
    {name: GapStudyResult}, or a tidy frame with columns row, measure, rho, p.
    """
    if isinstance(result, GapStudyResult):
        result = {result.name: result}
    if isinstance(result, dict):
        parts = []
        for name, res in result.items():
            tables = {f"{name} · {res.settings.get('target', 'V')}": res.spearman}
            if res.success is not None:
                tables[f"{name} · success"] = res.success
            for row, t in tables.items():
                parts.append(t.assign(row=row)[["row", "measure", "rho", "p"]])
        tidy = pd.concat(parts, ignore_index=True)
    else:
        tidy = result
    missing = [c for c in ("row", "measure", "rho", "p") if c not in tidy.columns]
    if missing:
        raise ValueError(f"correlation_heatmap: column(s) {missing} missing; need row, measure, rho, p")
    tidy = _label(tidy)
    order = [MEASURE_LABELS.get(m, m) for m in dict.fromkeys(tidy["measure"])]
    rho = tidy.pivot(index="row", columns="label", values="rho")[order]
    p = tidy.pivot(index="row", columns="label", values="p")[order]
    annot = rho.map(lambda v: f"{v:.2f}") + p.map(_stars)
    fig, ax = plt.subplots(figsize=(1.3 * len(order) + 2.5, 0.7 * len(rho) + 1.5))
    sns.heatmap(rho, annot=annot, fmt="", cmap="vlag", vmin=-1, vmax=1, center=0, ax=ax,
                cbar_kws={"label": "Spearman ρ"})
    ax.set(xlabel="", ylabel="", title=title or "")
    ax.text(0, -0.02, "stars: two-sided Spearman p < 0.05 (*), < 0.01 (**), < 0.001 (***)",
            transform=ax.transAxes, ha="left", va="top", fontsize=8)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig


def simulation_gaps_plot(rho_table: pd.DataFrame, filter_table: pd.DataFrame, path=None):
    """The simulator's two gaps side by side.

    Left: Spearman rho(u, V) per measure (``rho_table`` columns measure, rho, setting), one bar
    group per setting (e.g. lipschitz=True / False). Right: the calibration gap, mean RD,
    grad_var and ||g_hat|| of the kept vs all queries (``entropy_filter_effect`` output),
    normalised by the 'all' row.
    """
    for name, t, cols in (("rho_table", rho_table, ("measure", "rho", "setting")),
                          ("filter_table", filter_table, ("subset",))):
        missing = [c for c in cols if c not in t.columns]
        if missing:
            raise ValueError(f"simulation_gaps_plot: {name} lacks column(s) {missing}")
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.2))
    rt = _label(rho_table).assign(setting=lambda d: d["setting"].map(_human))
    sns.barplot(data=rt, x="label", y="rho", hue="setting", ax=a)
    if {"ci_low", "ci_high"} <= set(rt.columns):  # 95% bootstrap CIs on each bar
        for bars, (_, part) in zip(a.containers, rt.groupby("setting", sort=False)):
            xs = [bar.get_x() + bar.get_width() / 2 for bar in bars]
            _errorbars(a, xs, part["rho"], part["ci_low"], part["ci_high"], None)
    a.set(title="Anisotropic gap: Spearman ρ(u, V) with 95% bootstrap CIs", xlabel="", ylabel="ρ")
    a.legend(title="", fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    metrics = [c for c in filter_table.columns if c.startswith("mean_")]
    base = filter_table.set_index("subset").loc["all", metrics]
    rel = (filter_table.set_index("subset")[metrics] / base).reset_index()
    rel = rel.melt(id_vars="subset", var_name="metric", value_name="relative to all")
    names = {"mean_rd": "mean RD", "mean_grad_var": "mean V(q)", "mean_update_norm": "mean ‖ĝ‖"}
    rel["metric"] = rel["metric"].map(lambda m: names.get(m, m))
    sns.barplot(data=rel, x="metric", y="relative to all", hue="subset", ax=b)
    b.axhline(1, color="black", lw=0.8, ls="--")
    tau = f" (τ = {filter_table['tau'].iloc[0]:.3g}, the median entropy)" if "tau" in filter_table.columns else ""
    b.set(title=f"Calibration gap: keep queries with H ≤ τ{tau}", xlabel="", ylabel="mean / mean over all queries")
    b.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig
