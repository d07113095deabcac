"""The sentences of docs/results/studies.md that carry a study's numbers, generated at build time
from its committed tables (every number on the site comes from a committed file).

A written page asks for one with a marker ``<!-- gcpo-study:KIND:RUN -->`` (KIND one of
``SENTENCES``, RUN a folder of figures/); ``render`` (called by docs/hooks.py) replaces it. Each
sentence reads the tables as they are, so a study that gains its Grams (cpu_large, once
``scripts/recompute_grams.py`` and ``gcpo study --restat`` have run) gets its V = N + C numbers
without an edit. tests/integration/test_studies_page_numbers.py checks the markers and the
sentences against the tables. The numbers are rounded once here: ρ and Δρ to 2 decimals, shares
in % to 1 decimal.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
LABELS = {
    "token_entropy": "token entropy",
    "se": "SE",
    "se_lw": "SE-LW",
    "kle": "KLE",
    "cd": "CD",
    "bot": "BoT",
    "rd": "RD",
}
MARKER = re.compile(r"<!-- gcpo-study:(\w+):([\w.]+) -->")


def _tables_dir(run: str) -> Path:
    """figures/<run>/tables; ``run.sub`` is a training study's table folder tables/<sub>."""
    folder, _, sub = run.partition(".")
    return ROOT / "figures" / folder / "tables" / sub.replace(".", "/")


def shown(run: str) -> str:
    """A run as the page names it: its folder, or a training study's table folder."""
    folder, _, sub = run.partition(".")
    return f"{folder}/tables/{sub.replace('.', '/')}" if sub else folder


@cache
def table(run: str, name: str) -> pd.DataFrame:
    """figures/<run>/tables/<name>.csv (read once per build)."""
    return pd.read_csv(_tables_dir(run) / f"{name}.csv")


def num(x: float, d: int = 2) -> str:
    """x to d decimals with a typographic minus (−0.00 is written 0.00)."""
    s = f"{x:.{d}f}"
    return s.lstrip("-") if float(s) == 0 else s.replace("-", "−")


def pct(x: float, d: int = 1) -> str:
    return num(100 * x, d) + "%"


def sci(x: float) -> str:
    """x in e-notation to 2 significant digits, without a padded exponent: 8.0e-5."""
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{x:.1e}").replace("e+", "e")


def tri(est: float, lo: float, hi: float, fmt=num) -> str:
    """'est [lo, hi]'."""
    return f"{fmt(est)} [{fmt(lo)}, {fmt(hi)}]"


def spans0(lo: float, hi: float) -> bool:
    return lo <= 0 <= hi


# --------------------------------------------------------------------------- V = N + C
def _v_parts(run: str, frame: str = "trimmed") -> pd.DataFrame:
    t = table(run, "v_parts")
    return t[(t.frame == frame) & (t.subset == "v_pos")].set_index("statistic")


def v_parts(run: str) -> str:
    """The share C/V and ρ(V, N) within V > 0, or that the run has no Grams."""
    t = _v_parts(run)
    if "share_C_over_V_median" not in t.index:
        return (
            f"`{shown(run)}` has no Gram matrices yet (`scripts/recompute_grams.py FOLDER` rebuilds them from the "
            "committed rollouts, then `gcpo study --restat FOLDER`), so its C/V is not reported"
        )
    share, q05, q95 = (t.loc[f"share_C_over_V_{k}"] for k in ("median", "q05", "q95"))
    rho = t.loc["rho(V, grad_var_norm)"]
    return (
        f"`{shown(run)}`: median C/V **{tri(share.estimate, share.ci_low, share.ci_high, pct)}** (5–95%: "
        f"{pct(q05.estimate)} to {pct(q95.estimate)}; {int(share.n)} groups), ρ(V, N) = "
        f"**{tri(rho.estimate, rho.ci_low, rho.ci_high, lambda x: num(x, 3))}**"
    )


def c_given_n(run: str) -> str:
    """The partial ρ(u, C | N) of the uncertainty measures within V > 0 (and RD's)."""
    t = table(run, "v_parts_measures")
    t = t[(t.frame == "trimmed") & (t.subset == "v_pos") & (t.statistic == "rho(u, C | N)")]
    if t.empty:
        return f"`{shown(run)}`: no C without Gram matrices"
    t = t.set_index("measure")
    unc = t.drop(index="rd", errors="ignore")
    lo, hi = unc.estimate.idxmin(), unc.estimate.idxmax()
    n_span = sum(spans0(r.ci_low, r.ci_high) for r in unc.itertuples())
    out = (
        f"`{shown(run)}`: partial ρ(u, C | N) from {num(unc.estimate[lo])} ({LABELS[lo]}) to {num(unc.estimate[hi])} "
        f"({LABELS[hi]}), {n_span} of {len(unc)} CIs spanning 0, smallest Holm p {num(unc.p_holm.min())}"
    )
    clear = [r for r in unc.itertuples() if not spans0(r.ci_low, r.ci_high)]
    if clear:
        named = (f"{LABELS[r.Index]} {tri(r.estimate, r.ci_low, r.ci_high)}, Holm p {num(r.p_holm)}" for r in clear)
        out += f" (clear of 0: {', '.join(named)})"
    if "rd" in t.index:
        r = t.loc["rd"]
        out += f"; RD {tri(r.estimate, r.ci_low, r.ci_high)} (Holm p {num(r.p_holm)})"
    return out


def n_tracks_v(run: str) -> str:
    """How far ρ(u, N) is from ρ(u, V) within V > 0, over the measures."""
    t = table(run, "v_parts_measures")
    t = t[(t.frame == "trimmed") & (t.subset == "v_pos")]
    p = t.pivot(index="measure", columns="statistic", values="estimate")
    if "rho(u, N)" not in p.columns:
        return f"`{shown(run)}`: no N without Gram matrices"
    gap = (p["rho(u, N)"] - p["rho(u, V)"]).abs().max()
    return f"`{shown(run)}`: |ρ(u, N) − ρ(u, V)| ≤ {num(gap, 3)} for every measure"


def rests_on(run: str) -> str:
    """Which size control a study's reading rests on: N where its Grams give it, else s."""
    if "rho(V, grad_var_norm)" in _v_parts(run).index:
        return f"at `{shown(run)}` on N"
    return f"at `{shown(run)}`, until its Grams are rebuilt, on s"


# --------------------------------------------------------------------------- the contrast
def confirmatory(run: str) -> str:
    """Δρ(BoT − SE) and Δρ(BoT − token entropy) within V > 0, on V and on C, trimmed (Holm p)
    and untrimmed."""
    c = table(run, "confirmatory")
    parts = []
    for target, name in (("grad_var", "V"), ("grad_var_cross", "C")):
        rows = c[c.target == target]
        if rows.empty:
            continue
        cells = []
        for contrast, label in (("bot - se", "BoT − SE"), ("bot - token_entropy", "BoT − token entropy")):
            tr = rows[(rows.frame == "trimmed") & (rows.contrast == contrast)].iloc[0]
            un = rows[(rows.frame == "untrimmed") & (rows.contrast == contrast)]
            cell = f"Δρ({label}) {tri(tr.estimate, tr.ci_low, tr.ci_high)}, Holm p {num(tr.p_holm)}"
            if not un.empty:
                u = un.iloc[0]
                cell += f" (untrimmed {tri(u.estimate, u.ci_low, u.ci_high)}, Holm p {num(u.p_holm)})"
            cells.append(cell)
        n = int(rows[rows.frame == "trimmed"].n.iloc[0])
        parts.append(f"on {name} ({n} groups): " + "; ".join(cells))
    return f"`{shown(run)}`, " + "; ".join(parts)


# --------------------------------------------------------------------------- size and trim
def size_controls(run: str) -> str:
    """ρ(V, s / N / length / cap) within V > 0, and the uncertainty measures' partial
    ρ(u, V | controls) per control set, trimmed and untrimmed."""
    v = _v_parts(run)
    rhos = [
        f"ρ(V, {label}) {tri(v.loc[s].estimate, v.loc[s].ci_low, v.loc[s].ci_high)}"
        for s, label in (
            ("rho(V, grad_var_norm)", "N"),
            ("rho(V, grad_norm2_mean)", "s"),
            ("rho(V, n_tokens_mean)", "length"),
            ("rho(V, cap_share)", "cap share"),
        )
        if s in v.index
    ]
    t = table(run, "size_controls")
    t = t[(t.subset == "v_pos") & (t.measure != "rd")]
    sets = []
    for controls in dict.fromkeys(t.controls):
        cells = []
        for frame in ("trimmed", "untrimmed"):
            part = t[(t.controls == controls) & (t.frame == frame)]
            if part.empty:
                continue
            n_ex = sum(not spans0(r.ci_low, r.ci_high) for r in part.itertuples())
            cells.append(
                f"{num(part.estimate.min())} to {num(part.estimate.max())} ({n_ex} of {len(part)} CIs exclude 0)"
            )
        sets.append(f"| {controls} | " + " | ".join(cells) + " |")
    head = (
        f"| controls ({shown(run)}, V > 0) | partial ρ(u, V ∣ controls) of the uncertainty measures | untrimmed |\n"
        "|---|---|---|\n"
    )
    return f"`{shown(run)}` within V > 0: " + ", ".join(rhos) + ".\n\n" + head + "\n".join(sets) + "\n"


def trim(run: str) -> str:
    t = table(run, "trim").iloc[0]
    return (
        f"`{shown(run)}`: the {pct(t.trim, 0)} trim removes {int(t.n_removed)} of {int(t.n_groups)} groups, "
        f"{int(t.n_v_pos_removed)} of the {int(t.n_v_pos)} with V > 0 ({pct(t.share_of_v_pos, 0)}), the largest at "
        f"{num(t.removed_v_over_median_v_pos, 1)}× the median V > 0"
    )


# --------------------------------------------------------------------------- the Lipschitz check
def _has(run: str, name: str) -> bool:
    return (_tables_dir(run) / f"{name}.csv").exists()


def _no_grams(run: str) -> str:
    return f"`{shown(run)}`: no Gram matrices yet, so no Lipschitz check"


def lipschitz(run: str, name: str = "lipschitz") -> str:
    """The check's main numbers: mean within-group ρ(d_g, d_e), its share of positive groups,
    the pooled ρ, gradient directions only, and the cluster comparison."""
    if not _has(run, name):
        return _no_grams(run)
    t = table(run, name).set_index("statistic")

    def ci(k: str) -> str:
        return tri(t.loc[k, "estimate"], t.loc[k, "ci_low"], t.loc[k, "ci_high"])

    cl = t.loc["cluster_ratio"]
    return (
        f"`{shown(run)}`{' (exact-token groups)' if name != 'lipschitz' else ''}: mean within-group ρ(d_g, d_e) "
        f"**{ci('mean_rho')}** over {int(t.loc['mean_rho', 'n_groups'])} groups (median "
        f"{num(t.loc['median_rho', 'estimate'])}, positive in {pct(t.loc['frac_rho_positive', 'estimate'], 0)}); "
        f"pooled over pairs, both distances over their group mean, {ci('pooled_rho')}; gradient directions "
        f"only (1 − cos(g_i, g_j)) {ci('mean_rho_direction')}; different- / same-cluster d_g {ci('cluster_ratio')}, "
        f"AUC {ci('cluster_auc')} ({int(cl.n_groups)} groups with both kinds of pair, {int(cl.n_excluded)} left out)"
    )


def lipschitz_exact(run: str) -> str:
    """The check on the groups whose rebuilt Grams matched the sampled tokens, if there are any."""
    if not (ROOT / "figures" / run.partition(".")[0] / "grams.parquet").exists():
        return _no_grams(run)
    if not _has(run, "lipschitz_exact_tokens"):
        return f"`{shown(run)}`: its Grams come from the run itself, so no exact-tokens subset"
    return lipschitz(run, "lipschitz_exact_tokens")


def confounds(run: str) -> str:
    """How much of the mean within-group ρ is word overlap, length gap or gradient size."""
    if not _has(run, "lipschitz_confounds"):
        return _no_grams(run)
    t = table(run, "lipschitz_confounds").set_index("statistic")

    def ci(k: str) -> str:
        return tri(t.loc[k, "mean"], t.loc[k, "ci_low"], t.loc[k, "ci_high"])

    return (
        f"`{shown(run)}`: ρ(d_g, d_e) {ci('rho_g_e')}; rank partial given the word-overlap (Jaccard) distance "
        f"**{ci('partial_given_jaccard')}**, given the length gap {ci('partial_given_length')} "
        f"({int(t.loc['partial_given_length', 'n_groups'])} groups with unequal lengths), given "
        f"‖g_i‖² + ‖g_j‖² {ci('partial_given_norms')}"
    )


def bound(run: str) -> str:
    """App. C's inequality: the group-scaled and raw ratio's quantiles and the pairs above the
    median L, this study and the simulator's planted rows."""
    if not _has(run, "lipschitz_bound"):
        return _no_grams(run)
    t = table(run, "lipschitz_bound").set_index(["source", "ratio", "statistic"])

    def v(src: str, ratio: str, k: str) -> float:
        return float(t.loc[(src, ratio, k), "estimate"])

    share = t.loc[("this study", "ratio", "share_pairs_break_at_median_L")]
    planted, other = "simulated, planted Lipschitz", "simulated, not Lipschitz"
    brk = "share_pairs_break_at_median_L"
    return (
        f"`{shown(run)}`: group-scaled ratio median {num(v('this study', 'ratio', 'ratio_q50'))} (10–90%: "
        f"{num(v('this study', 'ratio', 'ratio_q10'))}–{num(v('this study', 'ratio', 'ratio_q90'))}), a group's "
        f"own L median {num(v('this study', 'ratio', 'L_group_q50'))}, pairs above that median L "
        f"{tri(share.estimate, share.ci_low, share.ci_high, pct)}; the simulator: planted Lipschitz "
        f"{pct(v(planted, 'ratio', brk))} against not Lipschitz {pct(v(other, 'ratio', brk))} group-scaled, "
        f"{pct(v(planted, 'ratio_raw', brk))} against {pct(v(other, 'ratio_raw', brk))} raw"
    )


def gram_recompute(run: str) -> str:
    """What scripts/recompute_grams.py matched, when the Grams were rebuilt after the run."""
    path = _tables_dir(run) / "gram_recompute_summary.json"
    if not (ROOT / "figures" / run.partition(".")[0] / "grams.parquet").exists():
        return _no_grams(run)
    if not path.exists():
        return f"`{shown(run)}`: its Grams come from the run itself"
    s = json.loads(path.read_text())
    return (
        f"`{shown(run)}`: rebuilt tokens matched the sampled ones in {s['rollouts_matching']} of {s['rollouts']} "
        "rollouts "
        f"(|Δ log-prob| ≤ {sci(s['max_logprob_abs_diff_matching'])} nats where they match), every rollout of "
        f"{s['groups_all_matching']} of {s['queries']} groups; mean‖g‖² against the run's groups frame: median "
        f"relative difference {sci(s['grad_norm2_mean_rel_diff_median'])}, "
        f"largest {pct(s['grad_norm2_mean_rel_diff_max'], 0)}"
    )


# --------------------------------------------------------------------------- the training run
def n_analysed(run: str) -> str:
    """The N of every table of a --from-training folder (its tables/n_analysed.csv)."""
    t = table(run, "n_analysed").set_index("table")
    phases = [p for p in t.index if p != "pooled"]
    per = sorted({(int(t.loc[p, "n_analysed"]), int(t.loc[p, "n_groups"])) for p in phases})
    per_text = " or ".join(f"{a} of {b}" for a, b in per)
    return (
        f"`{shown(run)}`: the trim leaves {int(t.loc['pooled', 'n_analysed'])} of {int(t.loc['pooled', 'n_groups'])} "
        f"groups pooled and {per_text} per phase"
    )


def rho_within(run: str, names: str = "token_entropy,bot,rd") -> str:
    """ρ(u, V) within V > 0 (trimmed) of a few measures, from v_parts_measures."""
    t = table(run, "v_parts_measures")
    t = t[(t.frame == "trimmed") & (t.subset == "v_pos") & (t.statistic == "rho(u, V)")].set_index("measure")
    cells = [
        f"{LABELS[m]} {tri(t.loc[m, 'estimate'], t.loc[m, 'ci_low'], t.loc[m, 'ci_high'])}" for m in names.split(",")
    ]
    return f"`{shown(run)}` ({int(t.n.iloc[0])} groups): " + ", ".join(cells)


def decomposition_pg(run: str) -> str:
    """A training run's V = 0 split with V_pg (tables/decomposition_pg.csv)."""
    d = table(run, "decomposition_pg").set_index("measure")
    unc = d.drop(index="rd", errors="ignore")
    deltas = unc.dropna(subset=["delta_rho_pos_ci_low"])
    n_in = sum(spans0(r.delta_rho_pos_ci_low, r.delta_rho_pos_ci_high) for r in deltas.itertuples())
    rhos = ", ".join(f"{LABELS[m]} {tri(r.rho_pos, r.rho_pos_ci_low, r.rho_pos_ci_high)}" for m, r in d.iterrows())
    return (
        f"`{shown(run)}`: {int(d.n_zero.iloc[0])} groups with all-zero advantages (V_pg = 0), "
        f"{int(d.n_pos.iloc[0])} with "
        f"V_pg > 0; AUC for 1[V_pg > 0] {num(unc.auc_pos.min())}–{num(unc.auc_pos.max())} (uncertainty "
        f"measures); within V_pg > 0, ρ(u, V_train): {rhos}; paired Δρ(BoT − u): {n_in} of {len(deltas)} CIs "
        "contain 0"
    )


def size_partial(run: str) -> str:
    """The gap study's pooled partial ρ(u, V | s) of the uncertainty measures (size_control.csv)."""
    t = table(run, "size_control")
    t = t[(t.subset == "all") & (t.statistic == "partial")].set_index("measure")
    unc = t.drop(index="rd", errors="ignore")
    n_span = sum(spans0(r.ci_low, r.ci_high) for r in unc.itertuples())
    out = (
        f"`{shown(run)}` ({int(unc.n.iloc[0])} groups): partial ρ(u, V | s) {num(unc.rho.min())} to "
        f"{num(unc.rho.max())}, "
        f"{n_span} of {len(unc)} CIs containing 0"
    )
    if "rd" in t.index:
        out += f"; RD {num(t.loc['rd', 'rho'])}"
    return out


def train_setup(run: str) -> str:
    """A training run's settings from its committed run/run.json."""
    r = json.loads((ROOT / "figures" / run / "run" / "run.json").read_text())
    c = r["config"]
    lora = f"LoRA r = {c['lora_r']}, " if c.get("use_lora") else ""
    resumed = f"; resumed at step {r['start_step']}" if r.get("resumed_from") else ""
    return (
        f"`{shown(run)}`: {lora}{c['dataset']}, G = {c['group_size']}, {c['queries_per_step']} prompts a step, "
        f"{c['steps']} steps ({c['steps'] * c['queries_per_step']} groups), modulator `{c['modulator']}`, "
        f"β = {c['beta']}, T = {c['temperature']}, ≤ {c['max_new_tokens']} tokens{resumed}"
    )


SENTENCES = {
    "v_parts": v_parts,
    "c_given_n": c_given_n,
    "n_tracks_v": n_tracks_v,
    "confirmatory": confirmatory,
    "size_controls": size_controls,
    "trim": trim,
    "rests_on": rests_on,
    "lipschitz": lipschitz,
    "lipschitz_exact": lipschitz_exact,
    "confounds": confounds,
    "bound": bound,
    "gram_recompute": gram_recompute,
    "n_analysed": n_analysed,
    "rho_within": rho_within,
    "decomposition_pg": decomposition_pg,
    "size_partial": size_partial,
    "train_setup": train_setup,
}


def render(markdown: str) -> str:
    """Replace every ``<!-- gcpo-study:KIND:RUN -->`` of a page with its sentence; an unknown
    KIND or a run without the table fails the build, naming the marker."""

    def one(m: re.Match) -> str:
        kind, run = m.groups()
        if kind not in SENTENCES:
            raise ValueError(f"{m.group(0)}: unknown kind {kind!r} (one of {sorted(SENTENCES)})")
        return SENTENCES[kind](run)

    return MARKER.sub(one, markdown)
