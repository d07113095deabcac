"""The planned reading of one contrast of a comparison at a margin fixed as a number, in one or
two stages (``gcpo compare reading``).

A comparison's own report reads every arm at δ = share × the reference's mean, a margin that
moves with the data it judges. A plan that fixes δ in score units before its runs is read here
instead, from the comparison's ``results.parquet``:

* one look (``first_look`` None, or every seed in the first stage): the seed-level analysis of
  ``stats.seeds.seed_level`` at ±δ;
* two looks (seeds beyond the first ``first_look`` seed numbers): the group-sequential reading of
  ``stats.sequential.sequential_seed_level`` (α spending over the looks, the verdict at the final
  look's nominal levels) and the second stage alone, a replication;
* always, descriptive: the per-seed deltas D_s (a strip plot), their median, the Wilcoxon
  signed-rank p (``scipy.stats.wilcoxon``), the seeds below 0, the leave-one-seed-out range of
  the mean, and the verdict's sensitivity to δ (the TOST p and verdict at each δ of a grid).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_train.compare.evaluations import check_results, final_scores, paired_deltas

SENSITIVITY = (3.0, 3.1, 3.2, 3.3, 3.4, 3.5)
SPENDING_NAMES = {"obrien_fleming": "O'Brien–Fleming", "pocock": "Pocock"}


def contrast_deltas(results: pd.DataFrame, arm: str, reference: str = "none") -> pd.DataFrame:
    """d[s, q] = score_arm(s, q) − score_reference(s, q) at each arm-seed's last step, over the
    seeds both arms finished: a (seeds x queries) frame indexed by seed number, in seed order. A
    seed only one arm finished is left out with a warning naming it; an arm against itself is refused."""
    final = final_scores(check_results(results, "comparison results"))
    for name in (arm, reference):
        if name not in set(final["arm"]):
            raise ValueError(
                f"the comparison has no finished run of arm {name!r}; its arms: {sorted(set(final['arm']))}"
            )
    if arm == reference:  # Δ = 0 on every seed: the statistics failed on a spread of 0, naming no flag
        raise ValueError(f"--arm and --reference name the same arm {arm!r}; a contrast needs two")
    a, b = final[final["arm"] == arm], final[final["arm"] == reference]
    unpaired = sorted(set(a["seed"]) ^ set(b["seed"]))
    if unpaired:  # left out of the pairing, said aloud: a stage then holds the next paired seed instead
        import warnings

        named = ", ".join(f"{int(s)} ({arm if s in set(a['seed']) else reference} only)" for s in unpaired)
        warnings.warn(
            f"{arm!r} vs {reference!r}: seed(s) finished by one arm only are left out of the pairing: {named}; "
            "the stages of a two-look reading are the first paired seeds in seed order",
            stacklevel=2,
        )
    d = paired_deltas(a, b)  # checks that every paired seed scores the same queries
    if d is None:
        raise ValueError(
            f"{arm!r} and {reference!r} share fewer than two finished seeds; a seed-level reading needs two"
        )
    seeds = sorted(set(a["seed"]) & set(b["seed"]))
    queries = sorted(set(a["query_id"]))
    return pd.DataFrame(d, index=pd.Index(seeds, name="seed"), columns=queries)


def shape_of_deltas(per_seed: pd.Series) -> dict:
    """Median, Wilcoxon signed-rank p (two-sided; zero deltas dropped, scipy's default), the
    number below 0, and the leave-one-seed-out range of the mean with the seeds that set it."""
    from scipy import stats

    d = per_seed.to_numpy(dtype=np.float64)
    loo = np.array([np.delete(d, i).mean() for i in range(d.size)])
    seeds = [int(s) for s in per_seed.index]
    nonzero = d[d != 0]
    return {
        "seeds": int(d.size),
        "mean": float(d.mean()),
        "median": float(np.median(d)),
        "below_zero": int((d < 0).sum()),
        "wilcoxon_p": float(stats.wilcoxon(nonzero).pvalue) if nonzero.size else float("nan"),
        "loo_low": float(loo.min()),
        "loo_low_without": seeds[int(loo.argmin())],
        "loo_high": float(loo.max()),
        "loo_high_without": seeds[int(loo.argmax())],
    }


def margin_sensitivity(per_seed: pd.Series, margins=SENSITIVITY, level: float = 0.05) -> pd.DataFrame:
    """The TOST p and the verdict for each δ in ``margins`` (the TOST read at the one-sided
    ``level``, the 95% t interval for "better"/"worse"): which δ would have changed the verdict."""
    from gcpo_analysis.stats.seeds import NoSpreadError, paired_t, tost, verdict

    d = per_seed.to_numpy(dtype=np.float64)
    margins = [float(m) for m in margins]
    try:
        t = paired_t(d)
    except NoSpreadError:  # no TOST at any δ; the reading's own statistics have warned once
        return pd.DataFrame({"margin": margins, "p_tost": float("nan"), "verdict": "inconclusive"})
    rows = []
    for m in margins:
        p = tost(d, m)
        rows.append({"margin": m, "p_tost": p, "verdict": verdict(t["low"], t["high"], p, level)})
    return pd.DataFrame(rows)


def with_reference_from(results: pd.DataFrame, other: pd.DataFrame, reference: str) -> pd.DataFrame:
    """``results`` with the reference arm's rows taken from another comparison's ``other`` (a dose
    arm trained in a folder of its own, read against an arm of the main comparison; the caller
    checks that the two cards differ in their arms and seeds only). Rows of ``reference`` in
    ``results`` are dropped, so that every arm-seed is read from one folder."""
    other = check_results(other, "the reference folder's results")
    if reference not in set(other["arm"]):
        raise ValueError(f"the reference folder has no run of arm {reference!r}; its arms: {sorted(set(other['arm']))}")
    mine = check_results(results, "comparison results")
    return pd.concat([mine[mine["arm"] != reference], other[other["arm"] == reference]], ignore_index=True)


def reading(
    results: pd.DataFrame,
    arm: str,
    margin: float,
    reference: str = "none",
    first_look: int | None = None,
    planned: int | None = None,
    margins=SENSITIVITY,
) -> dict:
    """The planned reading of ``arm`` − ``reference`` at ±``margin`` (score units): a dict with
    the per-seed deltas, the one- or two-look statistics, the shape and the δ sensitivity."""
    from gcpo_analysis.stats.seeds import seed_level
    from gcpo_analysis.stats.sequential import nominal_levels, sequential_seed_level

    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not np.isfinite(margin) or margin <= 0:
        raise ValueError(f"--margin must be a positive number in score units, got {margin!r}")
    check_looks(first_look, planned)
    d = contrast_deltas(results, arm, reference)
    per_seed = d.mean(axis=1)
    out: dict = {"arm": arm, "reference": reference, "margin": float(margin), "per_seed": per_seed}
    out["shape"] = shape_of_deltas(per_seed)
    if first_look is not None and per_seed.size < first_look:  # before the plan's first look: said, not silent
        import warnings

        out["note"] = (
            f"Only {per_seed.size} paired seeds of the first look's {first_look}: read as one look at the plain "
            "level, before the plan's first look."
        )
        warnings.warn(f"{arm!r} vs {reference!r}: {out['note']}", stacklevel=2)
    two_looks = first_look is not None and per_seed.size > first_look
    if two_looks:
        assert first_look is not None
        planned = planned if planned is not None else int(per_seed.size)
        out["sequential"] = sequential_seed_level(per_seed.to_numpy(), first_look, planned, float(margin))
        level = float(nominal_levels([first_look / planned, per_seed.size / planned], sides=1)[-1])
    else:
        out["seed_level"] = seed_level(d.to_numpy(), float(margin), label=f"{arm} vs {reference}")
        level = 0.05
    out["sensitivity"] = margin_sensitivity(per_seed, sorted({*margins, float(margin)}), level)
    return out


def check_looks(first_look: int | None, planned: int | None) -> None:
    """``--first_look`` and ``--planned`` as a plan can have them, or a ValueError naming the flag:
    each an integer >= 2, the first look below the planned seeds, and ``--planned`` only with
    ``--first_look`` (alone it was ignored without a word)."""
    from numbers import Integral

    if first_look is None:
        if planned is not None:
            raise ValueError(f"--planned {planned} needs --first_look: the planned seeds matter only to two looks")
        return
    for flag, value in (("--first_look", first_look), ("--planned", planned)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, Integral) or value < 2):
            raise ValueError(f"{flag} must be an integer >= 2, got {value!r}")
    if planned is not None and not first_look < planned:
        raise ValueError(f"--first_look {first_look} must be below --planned {planned}: a second look needs more seeds")


def reading_markdown(r: dict) -> str:
    """The reading as Markdown: the verdict first, then the statistics and the shape."""
    arm, ref, margin = r["arm"], r["reference"], r["margin"]
    lines = [f"## Δ({arm} − {ref}) at ±{margin:g}\n"]
    if "reference_folder" in r:
        lines.append(
            f"`{ref}` is read from `{r['reference_folder']}`, a comparison whose card differs from this "
            "one's in its arms and seeds only.\n"
        )
    if "note" in r:
        lines.append(f"{r['note']}\n")
    if "sequential" in r:
        seq = r["sequential"]
        lines += [
            f"Two looks, {SPENDING_NAMES[seq['spending']]}-type α spending (α = {seq['alpha']:g}), "
            f"{seq['planned']} seeds planned.\n",
            "| look | seeds | Δ | interval | level (two-sided / one-sided) | t p | TOST p | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for k, look in enumerate(seq["looks"], start=1):
            lines.append(
                f"| {k} | {look['seeds']} | {_s(look['delta'])} | [{_s(look['low'])}, {_s(look['high'])}] "
                f"({100 * (1 - look['level_two_sided']):.2f}%) | {look['level_two_sided']:.4f} / "
                f"{look['level_one_sided']:.4f} | {_p(look['p_t'], 3)} | {_p(look['p_tost'])} | {look['verdict']} |"
            )
        alone = seq["stage2_alone"]
        if alone is not None:
            lines.append(
                f"\nThe second stage alone ({alone['seeds']} seeds, 95% t interval, a replication): "
                f"Δ = {_s(alone['delta'])} [{_s(alone['low'])}, {_s(alone['high'])}], TOST p "
                f"{_p(alone['p_tost'])}: {alone['verdict']}."
            )
    else:
        s = r["seed_level"]
        lines.append(
            f"One look, {r['shape']['seeds']} seeds: Δ = {_s(s['delta'])} [{_s(s['delta_low'])}, "
            f"{_s(s['delta_high'])}] (95% t, df {s['df']}), sign-flip p {_p(s['p'], 3)}, two-level bootstrap "
            f"[{_s(s['boot2_low'])}, {_s(s['boot2_high'])}], TOST p {_p(s['p_tost'])}: **{s['verdict']}**."
        )
    sh = r["shape"]
    lines += [
        f"\nPer-seed deltas: median {_s(sh['median'])}, {sh['below_zero']} of {sh['seeds']} below 0, Wilcoxon "
        f"p {_p(sh['wilcoxon_p'], 3)}; the mean without one seed ranges {_s(sh['loo_low'])} (without seed "
        f"{sh['loo_low_without']}) to {_s(sh['loo_high'])} (without seed {sh['loo_high_without']}).\n",
        "| seed | " + " | ".join(str(s) for s in r["per_seed"].index) + " |",
        "|---|" + "---|" * len(r["per_seed"]),
        "| D_s | " + " | ".join(f"{_s(v)}" for v in r["per_seed"]) + " |",
        "\nThe verdict's sensitivity to δ (descriptive; the plan's δ decides):\n",
        "| δ | " + " | ".join(f"{m:g}" for m in r["sensitivity"]["margin"]) + " |",
        "|---|" + "---|" * len(r["sensitivity"]),
        "| TOST p | " + " | ".join(_p(p) for p in r["sensitivity"]["p_tost"]) + " |",
        "| verdict | " + " | ".join(r["sensitivity"]["verdict"]) + " |",
    ]
    return "\n".join(lines) + "\n"


def _s(value: float) -> str:
    """A signed number with two decimals and a true minus sign; "—" where undefined (no spread)."""
    return "—" if np.isnan(value) else f"{value:+.2f}".replace("-", "−")


def _p(value: float, digits: int = 4) -> str:
    """A p-value to ``digits`` decimals; "—" where undefined (no spread, no nonzero delta)."""
    return "—" if np.isnan(value) else f"{value:.{digits}f}"


def plot_deltas(r: dict, path: Path) -> None:
    """A strip plot of the per-seed deltas (the second stage's seeds marked) with their mean, median and 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    per_seed = r["per_seed"]
    stage = ["stage 1"] * per_seed.size
    if "sequential" in r:
        n1 = r["sequential"]["looks"][0]["seeds"]
        stage = ["stage 1" if i < n1 else "stage 2" for i in range(per_seed.size)]
    frame = pd.DataFrame({"delta": per_seed.to_numpy(), "seed": per_seed.index, "stage": stage, "x": ""})
    fig, ax = plt.subplots(figsize=(4, 4))
    sns.stripplot(data=frame, x="x", y="delta", hue="stage", size=7, jitter=0.15, ax=ax)
    ax.axhline(0, color="0.4", lw=0.8)
    ax.axhline(per_seed.mean(), color="C3", lw=1.2, label=f"mean {per_seed.mean():+.2f}")
    ax.axhline(per_seed.median(), color="C2", lw=1.2, ls="--", label=f"median {per_seed.median():+.2f}")
    for m in (-r["margin"], r["margin"]):
        ax.axhline(m, color="0.6", lw=0.8, ls=":")
    ax.set(xlabel="", ylabel=f"D_s = {r['arm']} − {r['reference']} (held-out score)")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    from gcpo_analysis.frames import write_figure

    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".png", ".svg"):
        write_figure(fig, path.with_suffix(suffix), dpi=150)
    plt.close(fig)
