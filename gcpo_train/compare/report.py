"""The report of a ``gcpo compare`` folder: the summary table (final held-out score per arm, Δ
against GRPO with a two-level paired bootstrap CI, Holm over the arms, each arm's ω range) and
the figures (held-out score against step, training reward, ω distribution).

Δ(arm) = mean over seeds s and queries q of d_{s,q} = score_arm(s, q) − score_none(s, q) at the
last step. Its CI resamples seeds and queries with replacement (both, independently; the same
query draw for every seed drawn), which no scipy routine does for a two-way table, so it is
written here: with seed counts c_s and query counts k_q of a resample,
Δ* = Σ_{s,q} c_s k_q d_{s,q} / (S·Q). The two-sided p-value is 2·min(P(Δ* ≤ 0), P(Δ* ≥ 0)),
Holm-adjusted over the arms (``stats.size_control.holm``, statsmodels' values).

The weight ω of a group is read back from its rollouts: Ã = ω·A for a group-level modulator, so
ω = Σ_i Ã_i A_i / Σ_i A_i² with A the plain GRPO advantages (groups whose rewards are all equal
have A = 0 and no ω). A TRL run's rollouts (``compare_trl``) carry the ω that GCPOTrainer applied
as the column ``weight``; there too a group whose rewards are all equal counts no ω. An arm whose
ω stays near 1 trains as GRPO does.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.frames import write_figure, write_text


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
    """ω of every group of a rollouts frame with unequal rewards (see the module docstring): its
    ``weight`` column where it has one (TRL runs), else read back from ``advantage``."""
    from gcpo_analysis.measures.advantages import grpo_advantages

    out = []
    for _, g in rollouts.groupby(["step", "query_id"], sort=False):
        A = grpo_advantages(g["reward"].to_numpy(float), eps)
        if not np.any(A != 0):
            continue
        if "weight" in g:
            out.append(float(g["weight"].iloc[0]))
        else:
            out.append(float(np.dot(g["advantage"].to_numpy(float), A) / np.dot(A, A)))
    return np.asarray(out)


def _arm_weights(out: Path, arm: str) -> np.ndarray:
    files = sorted(glob.glob(str(out / "runs" / arm / "seed_*" / "rollouts" / "step_*.parquet")))
    if not files:
        return np.array([])
    frames = []
    for f in files:
        omega = "weight" if "weight" in _columns(f) else "advantage"
        frames.append(omega_per_group(pd.read_parquet(f, columns=["step", "query_id", "reward", omega])))
    return np.concatenate(frames)


def _columns(path) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)


def summary_table(results: pd.DataFrame, arms, reference: str, weights: dict) -> pd.DataFrame:
    """One row per arm: final held-out mean ± sd over seeds, Δ vs reference with CI and Holm p."""
    from gcpo_analysis.stats.size_control import holm

    final = results[results["arm"] != "base"]
    last = final.groupby(["arm", "seed"])["step"].transform("max")
    final = final[final["step"] == last]
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
        }
        ref = final[final["arm"] == reference]
        if arm != reference and not ref.empty:
            a = f.pivot_table(index="seed", columns="query_id", values="score")
            b = ref.pivot_table(index="seed", columns="query_id", values="score")
            seeds, queries = a.index.intersection(b.index), a.columns.intersection(b.columns)
            if len(seeds) and len(queries):
                d = a.loc[seeds, queries].to_numpy() - b.loc[seeds, queries].to_numpy()
                row["delta"], row["delta_low"], row["delta_high"], row["p"] = paired_seed_query_bootstrap(d)
                row["paired_seeds"] = int(len(seeds))
        rows.append(row)
    table = pd.DataFrame(rows)
    if "p" in table and table["p"].notna().any():
        has = table["p"].notna()
        table.loc[has, "p_holm"] = holm(table.loc[has, "p"])
    return table


def _markdown(table: pd.DataFrame, base_mean: float | None, reference: str) -> str:
    lines = [
        "| arm | seeds | step | held-out (mean ± sd over seeds) | Δ vs "
        + reference
        + " [95% CI] | p (Holm) | ω p5–p95 |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        sd = "" if np.isnan(r["heldout_sd"]) else f" ± {r['heldout_sd']:.2f}"
        delta = "—" if pd.isna(r.get("delta")) else f"{r['delta']:+.2f} [{r['delta_low']:+.2f}, {r['delta_high']:+.2f}]"
        p = "—" if pd.isna(r.get("p_holm")) else f"{r['p_holm']:.3f}"
        omega = "—" if np.isnan(r["omega_p5"]) else f"{r['omega_p5']:.3f}–{r['omega_p95']:.3f}"
        lines.append(
            f"| {r['arm']} | {r['seeds']} | {r['step']} | {r['heldout_mean']:.2f}{sd} | {delta} | {p} | {omega} |"
        )
    if base_mean is not None:
        lines.append(f"| base policy | | 0 | {base_mean:.2f} | | | |")
    return "\n".join(lines) + "\n"


def write_report(out: Path, results: pd.DataFrame, arms, reference: str) -> dict:
    """summary.md, summary.csv and figures/ of the comparison folder ``out``."""
    out = Path(out)
    weights = {arm: _arm_weights(out, arm) for arm in arms}
    table = summary_table(results, arms, reference, weights)
    base = results[results["arm"] == "base"]
    base_mean = float(base.groupby("seed")["score"].mean().mean()) if len(base) else None
    md = _markdown(table, base_mean, reference)
    write_text(out / "summary.md", md)
    write_text(out / "summary.csv", table.to_csv(index=False))
    plot_report(out, results, arms, weights)
    return {"table": table, "markdown": md}


def plot_report(out: Path, results: pd.DataFrame, arms, weights: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gcpo_train.runfiles.runlog import read_log

    figs = out / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
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
        for log in (out / "runs" / arm / f"seed_{s}" for s in per.columns):
            rows = read_log(log / "log.jsonl") if (log / "log.jsonl").exists() else []
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
    fig.tight_layout()
    for ext in ("png", "svg"):
        write_figure(fig, figs / f"compare.{ext}", dpi=120)
    plt.close(fig)
