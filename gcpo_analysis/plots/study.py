"""The gap study's figures (paper Sec. 2 and App. D): Figure 1, the N + C decomposition, the
size control, the alpha ablation, and the correlation heatmap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from ..frames import write_figure
from ..stats.gap_result import MEASURE_LABELS, GapStudyResult
from .base import _errorbars, _human, _label, _mark_reference, _measure_ticks, _yerr, plt, save_figure


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


def _our_addition(fig, result, what: str, path):
    """Title a figure that the paper does not have as ours (named after the study's data set when
    ``result`` is a GapStudyResult), and write it when ``path`` is given."""
    name = _human(getattr(result, "name", "")) if result is not None else ""
    title = f"{what} — our addition, not the paper's (95% bootstrap CIs)"
    fig.suptitle(f"{name}: {title}" if name else title, fontsize=12)
    if path is not None:
        save_figure(fig, path)
    return fig


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
    return _our_addition(fig, result if is_result else None, "the V = 0 decomposition", path)


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
    return _our_addition(fig, result if is_result else None, "gradient size, controlled", path)


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


def rho_over_training(table: pd.DataFrame, phases: dict, path) -> None:
    """One panel per measure: ρ(u, V_train) per step window with its CI band, and the three
    phases' ρ with their CIs as squares at the phase's mean step (``gcpo study --from-training``;
    ``phases``: {phase: (mean step, {measure: (rho, lo, hi)})}). Writes <path>.png (120 dpi) and .svg."""
    measures = list(dict.fromkeys(table["measure"]))
    ncol = min(4, len(measures))
    nrow = -(-len(measures) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.0 * ncol, 2.4 * nrow), sharex=True, sharey=True, squeeze=False)
    for ax, m in zip(axes.flat, measures):
        t = table[table["measure"] == m]
        ax.plot(t["step_mid"], t["rho"], "-o", ms=3, color="C0", label="window")
        ax.fill_between(t["step_mid"], t["ci_low"], t["ci_high"], color="C0", alpha=0.2)
        for mid, sp in phases.values():
            if m in sp:
                rho, lo, hi = sp[m]
                ax.errorbar([mid], [rho], yerr=[[rho - lo], [hi - rho]], fmt="s", color="C3", ms=4, capsize=2)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(m, fontsize=9)
        ax.set_ylim(-1.05, 1.05)
    for ax in axes.flat[len(measures) :]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("training step")
    for ax in axes[:, 0]:
        ax.set_ylabel("Spearman ρ(u, V_train)")
    fig.suptitle(
        "ρ(u, V_train) over training: step windows (blue, 95% bootstrap band) and "
        "early/middle/late phases (red, 95% CI)",
        fontsize=9,
    )
    fig.tight_layout()
    for ext in ("png", "svg"):
        write_figure(fig, f"{path}.{ext}", dpi=120)
    plt.close(fig)
