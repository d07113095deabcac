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

from .frames import write_figure  # noqa: E402
from .stats.gap import MEASURE_LABELS, GapStudyResult  # noqa: E402


def save_figure(fig, path) -> list[Path]:
    """Write ``fig`` as <path>.png (150 dpi) and <path>.svg; return the two paths."""
    stem = Path(path)
    if stem.suffix in (".png", ".svg", ".pdf"):
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    write_figure(fig, out[0], dpi=150, bbox_inches="tight")
    write_figure(fig, out[1], bbox_inches="tight")
    return out


def _label(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    out["label"] = out["measure"].map(lambda m: MEASURE_LABELS.get(m, m))
    return out


def _yerr(y, lo, hi) -> list:
    """matplotlib's [below, above] error lengths of a CI [lo, hi] around y, clipped at 0: a bound
    equal to its estimate (few V > 0 groups, --n-boot 1) can sit a rounding error past it, and a
    negative length is an error that would cost the figure (issue 27)."""
    y, lo, hi = (np.asarray(v, dtype=float) for v in (y, lo, hi))
    return [np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)]


def _errorbars(ax, x, y, lo, hi, color):
    ax.errorbar(
        x,
        y,
        yerr=_yerr(y, lo, hi),
        fmt="none",
        ecolor="black",
        capsize=3,
        lw=1,
    )


def _measure_ticks(ax, labels):
    """Measure names under a panel, slanted so that seven of them never overlap."""
    ax.set_xticks(np.arange(len(labels)), labels, rotation=30, ha="right", rotation_mode="anchor")
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_xlabel("")


def _mark_reference(ax, labels, ref):
    """Write 'reference' where the reference measure's (undefined) Delta would be."""
    ref_label = MEASURE_LABELS.get(ref, ref)
    if ref_label in list(labels):
        ax.annotate(
            "reference",
            (list(labels).index(ref_label), 0),
            ha="center",
            va="bottom",
            xytext=(0, 4),
            textcoords="offset points",
            fontsize=8,
            color="dimgrey",
        )


def figure1(results, path=None):
    """Figure 1 (Sec. 2, App. D): one row per dataset, four panels.

    (a) Spearman rho(u, V) with bootstrap CIs; (b) AUC and precision@10% for the top-10% by V,
    with the AUC = 0.5 chance line; (c) paired-bootstrap Delta rho = rho(ref, V) - rho(u, V) with
    CIs and a zero line; (d) held-out V_hat = b0 + b1 u: MAE divided by the mean V (unit-free)
    and Spearman rho(V_hat, V), mean ± sd over folds, on one axis.
    """
    if isinstance(results, GapStudyResult):
        results = {results.name: results}
    if not results:
        raise ValueError("figure1 needs at least one GapStudyResult")
    palette = sns.color_palette("deep")
    fig = plt.figure(figsize=(18, 4.4 * len(results)), layout="constrained")
    rows = np.atleast_1d(fig.subfigures(len(results), 1))
    for sub, (name, res) in zip(rows, results.items()):
        ax = sub.subplots(1, 4)
        sub.suptitle(f"{_human(name)} (N = {res.n_queries} queries)", fontsize=13, fontweight="bold")
        s = _label(res.spearman)
        x = np.arange(len(s))
        ax[0].bar(x, s["rho"], color=palette[0])
        _errorbars(ax[0], x, s["rho"], s["ci_low"], s["ci_high"], palette[0])
        ax[0].axhline(0, color="grey", lw=0.8)
        ax[0].set(title="(a) Spearman ρ(u, V), 95% bootstrap CI", ylabel="ρ")
        _measure_ticks(ax[0], s["label"])

        r = _label(res.retrieval)
        x = np.arange(len(r))
        bars = [
            ax[1].bar(x - 0.2, r["auc"], 0.4, color=palette[1], label="AUC"),
            ax[1].bar(x + 0.2, r["precision_at_10"], 0.4, color=palette[2], label="Precision@10%"),
        ]
        for group in bars:  # a zero-height bar is a value of 0, not a missing one
            for bar in group:
                if np.isfinite(bar.get_height()) and abs(bar.get_height()) < 1e-9:
                    ax[1].annotate(
                        "0",
                        (bar.get_x() + bar.get_width() / 2, 0),
                        ha="center",
                        va="bottom",
                        xytext=(0, 1),
                        textcoords="offset points",
                        fontsize=8,
                    )
        ax[1].axhline(0.5, color="black", lw=1, ls=":", label="AUC = 0.5 (chance)")
        ax[1].set(title="(b) retrieval of the top-10% V queries", ylabel="AUC / precision", ylim=(0, 1.05))
        _measure_ticks(ax[1], r["label"])
        ax[1].legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)

        b = _label(res.bootstrap)
        order = list(s["label"])  # every measure keeps its place; the reference has no Delta
        xb = b["label"].map(order.index)
        ax[2].errorbar(
            xb,
            b["delta"],
            yerr=_yerr(b["delta"], b["ci_low"], b["ci_high"]),
            fmt="o",
            color=palette[3],
            capsize=4,
        )
        ax[2].axhline(0, color="black", lw=1, ls="--")
        ref = res.settings.get("reference", "bot")
        _mark_reference(ax[2], order, ref)
        ax[2].set(title=f"(c) paired Δρ = ρ({MEASURE_LABELS.get(ref, ref)}) − ρ(u), 95% CI", ylabel="Δρ")
        _measure_ticks(ax[2], order)

        h = _label(res.heldout)
        x = np.arange(len(h))
        # MAE is in V's units; divided by the mean V it reads as a fraction of a typical V.
        mean_v = float(res.settings.get("target_mean") or np.nan)
        scale = mean_v if np.isfinite(mean_v) and mean_v > 0 else 1.0
        mae_label = f"MAE ÷ mean V (mean V = {mean_v:.3g})" if scale != 1.0 else "MAE (units of V)"
        ax[3].bar(
            x - 0.2, h["mae_mean"] / scale, 0.4, yerr=h["mae_std"] / scale, capsize=3, color=palette[4], label=mae_label
        )
        ax[3].bar(
            x + 0.2,
            h["spearman_mean"],
            0.4,
            yerr=h["spearman_std"],
            capsize=3,
            color=palette[5],
            label="Spearman ρ(V̂, V)",
        )
        ax[3].axhline(0, color="grey", lw=0.8)
        ax[3].set(
            title=f"(d) held-out V̂ = b₀ + b₁u ({res.settings.get('k_folds', 'k')}-fold, mean ± sd)",
            ylabel="MAE ÷ mean V  /  ρ",
        )
        _measure_ticks(ax[3], h["label"])
        ax[3].legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
        for a in ax:
            a.title.set_fontsize(11)
    if path is not None:
        save_figure(fig, path)
    return fig


_NAMES = {
    "narrativeqa": "NarrativeQA",
    "qasper": "Qasper",
    "hotpotqa": "HotpotQA",
    "math500": "MATH500",
    "aime24": "AIME24",
    "olympiadbench": "OlympiadBench",
    "lipschitz=True": "Simulated: gradients follow the embedding (Lipschitz)",
    "lipschitz=False": "Simulated: gradients unrelated to the embedding",
    "grad_var": "gradient variance V(q)",
    "success_rate": "success rate",
    "success": "success rate",
}


def _human(name: str) -> str:
    """A title from an identifier: 'narrativeqa' -> 'NarrativeQA', 'lipschitz=True' -> a sentence."""
    return _NAMES.get(str(name), str(name))


def decomposition(result, path=None):
    """Our addition, not the paper's: the V = 0 decomposition (``gcpo_analysis.stats.decomposition``).

    ``result``: a GapStudyResult or its ``decomposition`` frame (columns ``DECOMPOSITION_COLUMNS``).
    (a) AUC of u for 1[V > 0] over all groups, with the AUC = 0.5 chance line; (b) Spearman
    rho(u, V) within the V > 0 groups; (c) the paired bootstrap Delta rho = rho(reference, V) -
    rho(u, V) within V > 0, with a zero line. Every point carries its 95% percentile bootstrap CI.
    """
    is_result = isinstance(result, GapStudyResult)
    d = result.decomposition if is_result else result
    if d is None or len(d) == 0:
        raise ValueError("decomposition: this result has no decomposition table (re-run gap_study)")
    needed = ["measure", "n_pos", "n_zero"] + [
        f"{k}{s}" for k in ("auc_pos", "rho_pos", "delta_rho_pos") for s in ("", "_ci_low", "_ci_high")
    ]
    missing = [c for c in needed if c not in d.columns]
    if missing:
        raise ValueError(f"decomposition: column(s) {missing} missing from the decomposition frame")
    d = _label(d)
    # the reference is the measure without a Delta (NaN by the contract); BoT when unknown
    no_delta = d.loc[d["delta_rho_pos"].isna(), "measure"]
    ref = result.settings.get("reference", "bot") if is_result else next(iter(no_delta), "bot")
    n_pos, n_zero = int(d["n_pos"].iloc[0]), int(d["n_zero"].iloc[0])
    palette = sns.color_palette("deep")
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4), layout="constrained")
    panels = [
        (
            "auc_pos",
            f"(a) AUC of u for 1[V > 0]\n({n_pos} groups with V > 0, {n_zero} with V = 0)",
            0.5,
            "AUC",
            "AUC = 0.5 (chance)",
        ),
        ("rho_pos", f"(b) Spearman ρ(u, V)\nwithin the {n_pos} groups with V > 0", 0.0, "ρ", None),
        (
            "delta_rho_pos",
            f"(c) paired Δρ = ρ({MEASURE_LABELS.get(ref, ref)}, V) − ρ(u, V)\nwithin V > 0",
            0.0,
            "Δρ",
            None,
        ),
    ]
    for a, (col, title, line, ylabel, line_label), color in zip(ax, panels, palette):
        ok = d[col].notna()
        x = np.flatnonzero(ok.to_numpy())
        y, lo, hi = d.loc[ok, col], d.loc[ok, col + "_ci_low"], d.loc[ok, col + "_ci_high"]
        a.errorbar(x, y, yerr=_yerr(y, lo, hi), fmt="o", color=color, capsize=4)
        a.axhline(line, color="grey", lw=1, ls="--", label=line_label)
        if line_label:
            a.legend(fontsize=8, loc="best")
        a.set(title=title, ylabel=ylabel)
        a.title.set_fontsize(10)
        _measure_ticks(a, d["label"])
    _mark_reference(ax[2], list(d["label"]), ref)
    name = _human(getattr(result, "name", "")) if is_result else ""
    fig.suptitle(
        f"{name + ': ' if name else ''}the V = 0 decomposition — our addition, not the paper's (95% bootstrap CIs)",
        fontsize=12,
    )
    if path is not None:
        save_figure(fig, path)
    return fig


def size_control(result, path=None):
    """Our addition, not the paper's: the gradient-size control (``gcpo_analysis.stats.size_control``).

    Three panels, one per statistic: (a) the rank partial rho(u, V | mean||g||^2), (b) rho(u,
    V / mean||g||^2), (c) rho(u, mean||g||^2); in each, the pooled groups and the V > 0 groups
    side by side ((c) also V = 0), every point with its 95% percentile bootstrap CI.
    ``result``: a GapStudyResult or its ``size_control`` frame.
    """
    is_result = isinstance(result, GapStudyResult)
    d = result.size_control if is_result else result
    if d is None or len(d) == 0:
        raise ValueError(
            "size_control: this result has no size_control table (the groups frame had no "
            "grad_norm2_mean, or it was saved before the table existed)"
        )
    missing = [c for c in ("subset", "statistic", "measure", "rho", "ci_low", "ci_high", "n") if c not in d.columns]
    if missing:
        raise ValueError(f"size_control: column(s) {missing} missing from the size_control frame")
    d = _label(d)
    labels = list(dict.fromkeys(d["label"]))
    subsets = [("all", "all groups"), ("v_pos", "V > 0"), ("v_zero", "V = 0")]
    palette = dict(zip([s for s, _ in subsets], sns.color_palette("deep")))
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4), layout="constrained", sharey=True)
    titles = {
        "partial": "(a) rank partial ρ(u, V | mean‖g‖²)",
        "ratio": "(b) ρ(u, V / mean‖g‖²)",
        "norm": "(c) ρ(u, mean‖g‖²)",
    }
    for a, (stat, title) in zip(ax, titles.items()):
        part = d[d["statistic"] == stat]
        present = [(s, lab) for s, lab in subsets if s in set(part["subset"])]
        width = 0.8 / max(len(present), 1)
        for k, (sub, lab) in enumerate(present):
            rows = part[part["subset"] == sub].set_index("label").reindex(labels)
            x = np.arange(len(labels)) + (k - (len(present) - 1) / 2) * width
            ok = rows["rho"].notna().to_numpy()
            y, lo, hi = (rows[c].to_numpy(float)[ok] for c in ("rho", "ci_low", "ci_high"))
            n = int(rows["n"].dropna().iloc[0])
            a.errorbar(
                x[ok], y, yerr=_yerr(y, lo, hi), fmt="o", color=palette[sub], capsize=3, label=f"{lab} (N = {n})"
            )
        a.axhline(0, color="grey", lw=1, ls="--")
        a.set(title=title, ylabel="ρ")
        a.title.set_fontsize(10)
        _measure_ticks(a, labels)
    handles = {lab: h for a in ax for h, lab in zip(*a.get_legend_handles_labels())}  # one legend for all panels
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=len(handles), fontsize=9)
    name = _human(getattr(result, "name", "")) if is_result else ""
    fig.suptitle(
        f"{name + ': ' if name else ''}gradient size, controlled — our addition, not the paper's (95% bootstrap CIs)",
        fontsize=12,
    )
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


STARS_NOTE = "* p < 0.05, ** p < 0.01, *** p < 0.001 (two-sided Spearman test, no multiple-comparison correction)"


def _stars(p: float) -> str:
    return "" if not np.isfinite(p) else "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


def correlation_heatmap(result, path=None, title: str | None = None):
    """Correlation table as a heatmap: rows = datasets/targets, columns = measures, cells
    annotated with rho and significance stars (``STARS_NOTE``, printed under the figure).

    ``result``: a GapStudyResult (rows: the target and, if present, the success rate), a dict
    {name: GapStudyResult}, or a tidy frame with columns row, measure, rho, p.
    """
    if isinstance(result, GapStudyResult):
        result = {result.name: result}
    if isinstance(result, dict):
        parts = []
        for name, res in result.items():
            tables = {f"{_human(name)}\nρ with {_human(res.settings.get('target', 'V'))}": res.spearman}
            if res.success is not None:
                tables[f"{_human(name)}\nρ with the success rate"] = res.success
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
    rows = list(dict.fromkeys(tidy["row"]))
    rho = tidy.pivot(index="row", columns="label", values="rho").loc[rows, order]
    p = tidy.pivot(index="row", columns="label", values="p").loc[rows, order]
    annot = rho.map(lambda v: f"{v:.2f}") + p.map(_stars)
    fig, ax = plt.subplots(figsize=(1.1 * len(order) + 4.5, 0.8 * len(rho) + 1.8), layout="constrained")
    sns.heatmap(
        rho, annot=annot, fmt="", cmap="vlag", vmin=-1, vmax=1, center=0, ax=ax, cbar_kws={"label": "Spearman ρ(u, ·)"}
    )
    ax.set(xlabel="", ylabel="", title=title or "Spearman ρ of each measure u with the target")
    ax.tick_params(axis="y", rotation=0)
    fig.text(0.0, 0.0, STARS_NOTE, ha="left", va="top", fontsize=8)
    if path is not None:
        save_figure(fig, path)
    return fig


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


def draw_each(figures: dict) -> dict[str, str]:
    """Draw each figure (name -> a callable, or None to skip) on its own: one that fails is named
    in a warning and skipped, so a figure never costs the others, the tables or the summary
    (issue 27). Returns {name: why} for the figures not drawn."""
    import warnings

    failed = {}
    for name, draw in figures.items():
        if draw is None:
            continue
        try:
            draw()
        except Exception as err:  # noqa: BLE001 - any plotting error: this figure only
            failed[name] = f"{type(err).__name__}: {err}"
            warnings.warn(f"figure {name!r} not drawn ({failed[name]}); the tables are unaffected", stacklevel=2)
        finally:
            plt.close("all")
    return failed
