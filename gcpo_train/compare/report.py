"""The report of a ``gcpo compare`` folder: the summary table (final held-out score per arm, Δ
against GRPO with the seed-level statistics, each arm's ω and effective treatment, the coupling of
each arm with GRPO) and the figures (held-out score against step, training reward, ω, coupling).

**Primary analysis: the seed is the unit** (``gcpo_analysis.stats.seeds``). With
d_{s,q} = score_arm(s, q) − score_none(s, q) at the last step and D_s = mean_q d_{s,q}, Δ(arm) =
mean_s D_s with its paired t interval (df = S − 1), the exact sign-flip p (Holm-adjusted over the
arms, ``stats.size_control.holm``), the two-level bootstrap interval (seeds, then queries within
each drawn seed), the TOST p at ±δ and a verdict ("better", "worse", "equivalent within ±δ",
"inconclusive"). δ = ``equivalence_margin`` × GRPO's held-out mean (compare.json; 10% when not
given, the paper's claimed relative gain).

**Secondary, labelled "pooled"**: the earlier interval, which resamples seeds and queries
independently (the same query draw for every seed drawn): with seed counts c_s and query counts
k_q, Δ* = Σ_{s,q} c_s k_q d_{s,q} / (S·Q). With 3 seeds it has only 10 seed multisets and covers
about 82% at nominal 95% (a simulation at 3 seeds); kept only so older readings can be compared.

**The shuffled control** (``control_table``): for every arm X whose twin ``X:shuffled`` is in the
comparison, Δ(X − X:shuffled) with the same seed-level statistics and the same δ, one contrast
per modulator (no Holm across them). It is read only where X beats GRPO: X better than none but
not better than X:shuffled means the measure's information about the group is not what helps.

ω and the effective treatment (within-step relative weights, clipped steps) and the coupling are
read back from the rollouts and logs (``gcpo_train.compare.treatment``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.frames import write_figure, write_table, write_text
from gcpo_train.compare.evaluations import check_results, final_scores, paired_deltas
from gcpo_train.compare.layout import arm_seed_folder


def paired_seed_query_bootstrap(d, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0):
    """(mean, ci_low, ci_high, p) of d (S seeds x Q queries), resampling seeds and queries."""
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or d.size == 0 or not np.isfinite(d).all():
        raise ValueError(f"d must be a finite (seeds, queries) array, got shape {d.shape}")
    S, Q = d.shape
    rng = np.random.default_rng(seed)
    cs = rng.multinomial(S, np.full(S, 1.0 / S), size=n_resamples).astype(float)  # seed counts per resample
    kq = rng.multinomial(Q, np.full(Q, 1.0 / Q), size=n_resamples).astype(float)
    means = np.einsum("bs,sq,bq->b", cs, d, kq) / (S * Q)
    a = (1.0 - confidence) / 2
    low, high = np.quantile(means, [a, 1 - a])
    p = min(1.0, 2 * min(np.mean(means <= 0), np.mean(means >= 0)))
    return float(d.mean()), float(low), float(high), float(p)


def omega_per_group(rollouts: pd.DataFrame, eps: float = 1e-6) -> np.ndarray:
    """ω of every group of a rollouts frame with unequal rewards (``treatment.omega_groups``)."""
    from gcpo_train.compare.treatment import omega_groups

    return omega_groups(rollouts, eps)["omega"].to_numpy(float)


def summary_table(
    results: pd.DataFrame,
    arms,
    reference: str,
    weights: dict,
    margin: float = 0.1,
    treatments: dict | None = None,
) -> pd.DataFrame:
    """One row per arm: final held-out mean ± sd over seeds, Δ vs reference with the seed-level
    statistics (``stats.seeds.seed_level``; δ = ``margin`` × the reference's held-out mean), the
    pooled bootstrap as a secondary interval, ω's range and the effective treatment
    (``treatments[arm]``, ``treatment.effective_treatment``). ``results`` is checked first
    (``evaluations.check_results``); Δ is — for every arm, with a warning, while the reference
    gives no δ (``reference_margin``)."""
    final = final_scores(check_results(results, "comparison results"))
    return _summary(final, arms, reference, weights, margin, treatments)


def _summary(final: pd.DataFrame, arms, reference: str, weights: dict, margin: float, treatments: dict | None):
    """``summary_table`` of checked final scores (``final_scores`` of checked results)."""
    from gcpo_analysis.stats.seeds import seed_level
    from gcpo_analysis.stats.size_control import holm

    delta_margin, why = reference_margin(final, reference, margin)
    if why is not None and (final["arm"] != reference).any():
        warnings.warn(no_delta(f"Δ vs {reference} is — for every arm", why, reference, margin), stacklevel=2)
    rows = []
    for arm in arms:
        f = final[final["arm"] == arm]
        if f.empty:
            continue
        per_seed = f.groupby("seed")["score"].mean()
        w = weights.get(arm, np.array([]))
        row = {
            "arm": arm,
            "seeds": int(per_seed.size),
            "step": int(f["step"].max()),
            "heldout_mean": float(per_seed.mean()),
            "heldout_sd": float(per_seed.std(ddof=1)) if per_seed.size > 1 else float("nan"),
            "omega_p5": float(np.quantile(w, 0.05)) if w.size else float("nan"),
            "omega_p95": float(np.quantile(w, 0.95)) if w.size else float("nan"),
            **(treatments or {}).get(arm, {}),
        }
        d = paired_deltas(f, final[final["arm"] == reference]) if arm != reference and why is None else None
        if d is not None:
            row.update(seed_level(d, delta_margin, label=f"{arm} vs {reference}"))
            _, row["pooled_low"], row["pooled_high"], row["pooled_p"] = paired_seed_query_bootstrap(d)
            row["paired_seeds"] = int(d.shape[0])
        rows.append(row)
    table = pd.DataFrame(rows)
    if "p" in table and table["p"].notna().any():
        has = table["p"].notna()
        table.loc[has, "p_holm"] = holm(table.loc[has, "p"])
    return table


def reference_margin(final: pd.DataFrame, reference: str, margin: float) -> tuple[float, str | None]:
    """(δ, None), δ = ``margin`` × the reference's held-out mean (over its seeds, at their last
    step, in ``final``), or (NaN, why there is none): the reference has no finished run yet, or
    a held-out mean not above 0 (no relative margin to read a verdict at). gcpo compare writes the
    report after every run, before the reference may have finished one: Δ then shows — with the
    reason, where seed_level's "δ must be a positive number, got nan" stopped the comparison."""
    ref = final[final["arm"] == reference]
    if ref.empty:
        return float("nan"), f"the reference {reference!r} has no finished run in the summary yet"
    mean = float(ref.groupby("seed")["score"].mean().mean())
    if not mean > 0:
        return float("nan"), f"the reference {reference!r} has a held-out mean of {mean:g}"
    return margin * mean, None


def no_delta(what: str, why: str, reference: str, margin: float) -> str:
    """The warnings, and summary.md's line, of a report whose reference gives no δ (``reference_margin``)."""
    return (
        f"{what}: {why}; the verdicts are read at ±δ, δ = {margin:g} × {reference}'s held-out mean, which must be "
        "above 0"
    )


def control_table(results: pd.DataFrame, arms, reference: str, margin: float = 0.1) -> pd.DataFrame:
    """One row per arm X with a permuted twin in ``arms``: Δ(X − X:shuffled) or Δ(X − X:deranged) with the
    seed-level statistics (``stats.seeds.seed_level``) at δ = ``margin`` × the reference's
    held-out mean, as in ``summary_table``; no row, with a warning, while the reference gives no δ
    (``reference_margin``)."""
    return _control(final_scores(check_results(results, "comparison results")), arms, reference, margin)


def _control(final: pd.DataFrame, arms, reference: str, margin: float) -> pd.DataFrame:
    """``control_table`` of checked final scores: one row per arm and permuted twin in ``arms``
    (``X:shuffled``, then ``X:deranged``)."""
    from gcpo_analysis.measures.shuffled import CONTROLS
    from gcpo_analysis.stats.seeds import seed_level

    delta_margin, why = reference_margin(final, reference, margin)
    present = set(final["arm"])
    pairs = [(arm, arm + suffix) for arm in arms for suffix in CONTROLS if arm + suffix in arms]
    if why is not None:
        if any(arm in present and twin in present for arm, twin in pairs):
            what = "the permuted control (Δ of an arm against its :shuffled or :deranged twin) is left out"
            warnings.warn(no_delta(what, why, reference, margin), stacklevel=2)
        return pd.DataFrame()
    rows = []
    for arm, twin in pairs:
        d = paired_deltas(final[final["arm"] == arm], final[final["arm"] == twin])
        if d is not None:
            stats = seed_level(d, delta_margin, label=f"{arm} vs {twin}")
            rows.append({"arm": arm, "control": twin, "paired_seeds": int(d.shape[0]), **stats})
    return pd.DataFrame(rows)


def _control_markdown(control: pd.DataFrame) -> str:
    lines = [
        (
            "\nShuffled control: Δ(arm − arm:shuffled), the same seed-level statistics and δ (one contrast per"
            " modulator, no Holm across them).\n"
            if control["control"].str.endswith(":shuffled").all()
            else "\nPermuted controls: Δ(arm − arm:shuffled) and Δ(arm − arm:deranged), the same seed-level statistics"
            " and δ (one contrast per control, no Holm across them).\n"
        ),
        "| arm | control | seeds | Δ [95% t CI, df] | sign-flip p | two-level bootstrap 95% | TOST p (±δ) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in control.iterrows():
        lines.append(
            f"| {r['arm']} | {r['control']} | {r['paired_seeds']} "
            f"| {r['delta']:+.2f} {_ci(r, 'delta_low', 'delta_high')}, df {int(r['df'])} | {r['p']:.3f} "
            f"| {_ci(r, 'boot2_low', 'boot2_high')} | {_num(r['p_tost'], '.3f')} (±{r['margin']:.2f}) "
            f"| {r['verdict']} |"
        )
    return "\n".join(lines) + "\n"


def _ci(r, low: str, high: str) -> str:
    return "—" if pd.isna(r.get(low)) else f"[{r[low]:+.2f}, {r[high]:+.2f}]"


def _num(value, fmt: str) -> str:
    return "—" if value is None or pd.isna(value) else format(value, fmt)


def _markdown(
    table: pd.DataFrame, base_mean: float | None, reference: str, couplings: dict | None = None, note: str = ""
) -> str:
    lines = [
        "| arm | seeds | step | held-out (mean ± sd over seeds) | Δ vs "
        + reference
        + " [95% t CI, df] | sign-flip p (Holm) | two-level bootstrap 95% | TOST p (±δ) | verdict "
        "| mean ω | ω / step mean, p5–p95 | clipped steps | ω p5–p95 | pooled bootstrap 95% (secondary) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        sd = "" if pd.isna(r["heldout_sd"]) else f" ± {r['heldout_sd']:.2f}"
        if pd.isna(r.get("delta")):
            delta = "—"
        else:
            delta = f"{r['delta']:+.2f} {_ci(r, 'delta_low', 'delta_high')}, df {int(r['df'])}"
        p = "—" if pd.isna(r.get("p")) else f"{r['p']:.3f} ({r['p_holm']:.3f})"
        tost = "—" if pd.isna(r.get("p_tost")) else f"{r['p_tost']:.3f} (±{r['margin']:.2f})"
        verdict = r.get("verdict") if isinstance(r.get("verdict"), str) else "—"
        omega = "—" if pd.isna(r["omega_p5"]) else f"{r['omega_p5']:.3f}–{r['omega_p95']:.3f}"
        rel = "—" if pd.isna(r.get("rel_omega_p5")) else f"{r['rel_omega_p5']:.3f}–{r['rel_omega_p95']:.3f}"
        clipped = _num(r.get("clipped_share"), ".0%")
        lines.append(
            f"| {r['arm']} | {r['seeds']} | {r['step']} | {r['heldout_mean']:.2f}{sd} | {delta} | {p} "
            f"| {_ci(r, 'boot2_low', 'boot2_high')} | {tost} | {verdict} | {_num(r.get('omega_mean'), '.3f')} "
            f"| {rel} | {clipped} | {omega} | {_ci(r, 'pooled_low', 'pooled_high')} |"
        )
    if base_mean is not None:
        lines.append(f"| base policy | | 0 | {base_mean:.2f} | | | | | | | | | | |")
    lines.append(
        f"\nΔ is over the seeds both the arm and {reference} finished (df = those seeds − 1); "
        "— until two seeds are paired, since a seed-level interval needs two."
    )
    if note:
        lines.append(f"\n{note}.")
    text = "\n".join(lines) + "\n"
    if couplings:
        text += (
            "\nCoupling: share of identical completions (same step, query, rollout) with "
            + reference
            + ", mean over seeds.\n\n| arm | step 1 | step 2 | last step | first step < 90% | first step < 50% |\n"
            "|---|---|---|---|---|---|\n"
        )
        from gcpo_train.compare.treatment import first_below

        for arm, curve in couplings.items():
            at = dict(zip(curve["step"], curve["identical"]))
            last = curve["identical"].iloc[-1] if len(curve) else None
            below = [first_below(curve, level) for level in (0.9, 0.5)]
            text += (
                f"| {arm} | {_num(at.get(1), '.0%')} | {_num(at.get(2), '.0%')} | {_num(last, '.0%')} "
                f"| {'never' if below[0] is None else below[0]} | {'never' if below[1] is None else below[1]} |\n"
            )
    return text


def finished_results(
    results: pd.DataFrame, steps: int | None, finished: set[tuple[str, int]] | None = None
) -> pd.DataFrame:
    """``results`` without the trained arm-seeds whose last evaluation is before step ``steps``
    (runs still training, evaluated along the way): Δ pairs each seed's runs at the comparison's
    last step, never one run's step 20 with another's step 60. With ``finished`` (the (arm, seed)
    runs with a done.json, ``layout.finished_seeds``), also without a run evaluated but not marked
    finished (stopped between its last evaluation and done.json), so Δ and the effective treatment,
    which reads the finished runs, describe the same runs. Each one left out is named in a
    warning; the figures still draw them. ``steps`` None and no ``finished``: every arm-seed is kept."""
    if results.empty or (steps is None and finished is None):
        return results
    trained = results["arm"] != "base"
    last = results[trained].groupby(["arm", "seed"])["step"].max()
    early = last[last < steps] if steps is not None else last.iloc[:0]
    unmarked = last[[key not in finished for key in last.index]] if finished is not None else last.iloc[:0]
    unmarked = unmarked[~unmarked.index.isin(early.index)]
    if early.empty and unmarked.empty:
        return results

    def named(rows: pd.Series) -> str:
        cells = rows.reset_index().itertuples(index=False)
        return ", ".join(f"{arm} seed {seed} (step {step})" for arm, seed, step in cells)

    reasons = []
    if not early.empty:
        reasons.append(f"until they reach step {steps}: {named(early)}")
    if not unmarked.empty:
        reasons.append(f"until their run folder has a done.json: {named(unmarked)}")
    warnings.warn(
        f"left out of the summary {'; '.join(reasons)}; their evaluations so far are in results.parquet and "
        "the figures",
        stacklevel=2,
    )
    keys = pd.MultiIndex.from_frame(results[["arm", "seed"]])
    dropped = early.index.append(unmarked.index)
    return results[~(trained.to_numpy() & keys.isin(dropped))]


def write_report(out: Path, results: pd.DataFrame, arms, reference: str, figures: bool = True) -> dict:
    """summary.md, summary.csv, control.csv, coupling.csv and (``figures``) figures/ of the
    comparison folder ``out`` (``report_of`` its ``load_comparison``). ``results`` is the frame of
    ``out/results.parquet``, refused by that name when it is not one (``evaluations.check_results``)."""
    from gcpo_train.compare.comparison_data import load_comparison

    return report_of(load_comparison(out, results, arms), reference, figures)


def report_of(data, reference: str, figures: bool = True) -> dict:
    """The report of a loaded comparison (``comparison_data.ComparisonData``), written into its
    folder: summary.md, summary.csv, control.csv, coupling.csv and (``figures``) figures/. A table
    the comparison has none of now (no shuffled twin paired, no coupling) is removed: an earlier
    report's would otherwise stand beside a summary.md that no longer has it."""
    from gcpo_train.compare.treatment import coupling_of, omega_of, treatment_of

    out, arms, source = data.folder, data.arms, data.folder / "results.parquet"
    runs = {arm: {seed: data.rollouts[arm, seed] for seed in data.finished[arm]} for arm in arms}
    omegas = {arm: omega_of(runs[arm], data.eps) for arm in arms}
    weights = {arm: omegas[arm]["omega"].to_numpy(float) for arm in arms}
    norms = {arm: [n for seed in data.finished[arm] for n in data.grad_norms.get((arm, seed), [])] for arm in arms}
    treatments = {arm: treatment_of(omegas[arm], norms[arm], data.max_grad_norm) for arm in arms}
    final = finished_results(data.results, data.steps, data.finished_pairs())
    last = final_scores(final)
    try:
        table = _summary(last, arms, reference, weights, data.margin, treatments)
        control = _control(last, arms, reference, data.margin)
    except ValueError as err:  # paired_deltas names a run missing a query: of this file
        raise ValueError(f"{source}: {err}") from None
    couplings = {arm: coupling_of(runs[arm], runs[reference]) for arm in arms if arm != reference and reference in runs}
    couplings = {arm: c for arm, c in couplings.items() if len(c)}
    base = data.results[data.results["arm"] == "base"]
    base_mean = float(base.groupby("seed")["score"].mean().mean()) if len(base) else None
    why = reference_margin(last, reference, data.margin)[1]
    note = ""
    if why and len(table) and (table["arm"] != reference).any():  # the warnings' reason, in the summary
        what = f"Δ vs {reference} (and against a shuffled twin) is — for every arm"
        note = no_delta(what, why, reference, data.margin)
    md = _markdown(table, base_mean, reference, couplings, note)
    if len(control):
        md += _control_markdown(control)
        write_table(control, out / "control.csv")
    else:
        (out / "control.csv").unlink(missing_ok=True)
    # the tables at frames.TABLE_FLOAT_FORMAT (10 significant digits): a float's last digits (ω's
    # quantiles) change with the CPU's summation order, and a committed report must regenerate on
    # another machine up to a last-digit rounding (tests/helpers/tables.py)
    write_text(out / "summary.md", md)
    write_table(table, out / "summary.csv")
    if couplings:
        frame = pd.concat([c.assign(arm=arm) for arm, c in couplings.items()], ignore_index=True)
        write_table(frame[["arm", "step", "identical", "seeds"]], out / "coupling.csv")
    else:
        (out / "coupling.csv").unlink(missing_ok=True)
    if figures:
        plot_report(out, data.results, arms, weights, couplings)
    return {"table": table, "control": control, "markdown": md}


def plot_report(out: Path, results: pd.DataFrame, arms, weights: dict, couplings: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gcpo_train.runfiles.runlog import read_log

    figs = out / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    base = results[results["arm"] == "base"].groupby("seed")["score"].mean()
    for arm in arms:
        per = results[results["arm"] == arm].groupby(["seed", "step"])["score"].mean().unstack("seed")
        if per.empty:
            continue
        for s in per.columns:  # the base policy is every arm's step 0
            if s in base.index:
                per.loc[0, s] = base[s]
        per = per.sort_index()
        (line,) = axes[0].plot(per.index, per.mean(axis=1), marker="o", label=arm)
        axes[0].fill_between(per.index, per.min(axis=1), per.max(axis=1), color=line.get_color(), alpha=0.2)
        for log in (arm_seed_folder(out, arm, s) for s in per.columns):
            rows = read_log(log / "log.jsonl") if (log / "log.jsonl").exists() else []
            broken = next((x for x in rows if "reward_mean" not in x), None)  # read_log refuses a row without step
            if broken is not None:
                raise ValueError(f"{log / 'log.jsonl'}: a row without 'reward_mean': {str(broken)[:120]}")
            if rows:
                r = pd.Series([x["reward_mean"] for x in rows], index=[x["step"] for x in rows])
                axes[1].plot(r.index, r.rolling(10, min_periods=1).mean(), color=line.get_color(), alpha=0.7)
    axes[0].set(xlabel="step", ylabel="held-out score (greedy)", title="held-out score (band: seeds' range)")
    axes[0].legend()
    axes[1].set(xlabel="step", ylabel="training reward (10-step mean)", title="training reward, one line per seed")
    data = [weights[a] for a in arms if weights.get(a) is not None and weights[a].size]
    if data:
        axes[2].boxplot(data, tick_labels=[a for a in arms if weights.get(a) is not None and weights[a].size])
    axes[2].set(ylabel="ω per group", title="group weight ω over the run")
    for arm, curve in (couplings or {}).items():
        axes[3].plot(curve["step"], 100 * curve["identical"], marker=".", label=arm)
    axes[3].axhline(90, color="grey", lw=0.5)
    axes[3].axhline(50, color="grey", lw=0.5)
    axes[3].set(xlabel="step", ylabel="% identical completions", ylim=(0, 101), title="coupling with the reference")
    if couplings:
        axes[3].legend()
    fig.tight_layout()
    for ext in ("png", "svg"):
        write_figure(fig, figs / f"compare.{ext}", dpi=120)
    plt.close(fig)
