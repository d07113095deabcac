"""A comparison's protocol and its planned number of seeds.

* **Pairs that stay paired** (``check_sampling``, ``fastest_fp32_kernels``). The arms of a seed
  share every sampling seed, so they stay paired only while the same policy weights give the
  same samples. In bf16 sampling every linear layer, ``lm_head`` included, rounds to bf16, and
  weight differences of 1e-5 nats/token turn into different samples (66–75% identical at step 2
  on NarrativeQA spans, against 97–100% in fp32 on SIQA): each pair drifts toward two
  independent runs. ``gcpo compare`` therefore samples in fp32 by default, on the fastest fp32
  kernels (``fused`` for the Llama models it implements on a CPU, else ``onednn``; ``exact``
  on a GPU or with TRL); bf16 sampling is an explicit opt-in (``compare: bf16_sampling: true``,
  recorded in compare.json), and evaluation is never bf16 (``evaluation.evaluate``).
* **The planned number of seeds** (``plan``, ``write_plan``; ``gcpo compare --plan``). From a
  pilot or an earlier comparison: τ (the between-seed sd of the per-seed delta) and σ_q (the
  query noise) by ``stats.seeds.variance_components``; the sd of one seed's delta
  √(τ² + σ_q²/Q); the seeds a two-sided paired t test needs for 80% power at δ (δ =
  ``equivalence_margin`` × GRPO's held-out score, 10% by default: the paper's claimed gain), and
  the δ that a given number of seeds detects (``stats.seeds.power``, the noncentral t).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_train.compare.layout import COMPARISON_FILES

FUSED_MODELS = ("packaged", "tiny:llama")  # the Llama models sampling.fused implements (by name)


def check_sampling(base, bf16_sampling: bool) -> None:
    """Refuse bf16 sampling kernels unless opted in: they break the arms' pairing (module docstring)."""
    from gcpo_train.sampling.registry import sampler

    if sampler(base.sampling_kernels).bf16 and not bf16_sampling:
        raise ValueError(
            f"sampling_kernels {base.sampling_kernels!r} samples from a bf16 rounding of the policy, which "
            "unpairs the arms of a seed; gcpo compare samples in fp32 unless the config opts in with "
            "compare: bf16_sampling: true (evaluation stays fp32 either way). Drop sampling_kernels to get the "
            "fastest fp32 kernels, or set sampling_kernels: fused"
        )


def fastest_fp32_kernels(model, device, backend) -> str:
    """The sampling kernels gcpo compare uses when its config names none (module docstring)."""
    if backend == "trl":
        return "exact"  # TRL samples with its own generate
    import torch

    if device not in (None, "cpu") or (device is None and torch.cuda.is_available()):
        return "exact"
    if not torch.backends.mkldnn.is_available():
        warnings.warn("PyTorch has no oneDNN: gcpo compare samples with 'exact' (transformers generate)", stacklevel=2)
        return "exact"
    name = "packaged" if model is None else str(model)
    return "fused" if name in FUSED_MODELS else "onednn"


# ---------------------------------------------------------------------- planning the seeds
def _final_deltas(results: pd.DataFrame, arm: str, reference: str) -> tuple[np.ndarray | None, float]:
    """d (paired seeds x queries) of ``arm`` − ``reference`` at each run's last step, paired as the
    report pairs them (``evaluations.paired_deltas``: None under two paired seeds), and the
    reference's held-out mean."""
    from gcpo_train.compare.evaluations import final_scores, paired_deltas

    final = final_scores(results)
    ref = final[final["arm"] == reference]
    ref_mean = float(ref.pivot_table(index="seed", columns="query_id", values="score").mean(axis=1).mean())
    return paired_deltas(final[final["arm"] == arm], ref), ref_mean


def plan(
    results: pd.DataFrame,
    reference: str = "none",
    margin: float = 0.1,
    seeds: int | None = None,
    target: float = 0.8,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """One row per arm with ≥ 2 seeds paired with ``reference``: τ, σ_q, queries, the sd of a
    seed's delta, δ, the seeds needed for ``target`` power at δ and the δ detected by 3, 8, 16
    (and ``seeds``) seeds. ``results`` is checked as the report checks it
    (``evaluations.check_results``: a repeated row was averaged, a bool score read as 0/1)."""
    from gcpo_train.compare.evaluations import check_results

    return _plan(check_results(results, "comparison results"), reference, margin, seeds, target, alpha)


def plan_of(data, reference: str = "none", seeds: int | None = None, margin: float | None = None) -> pd.DataFrame:
    """``plan`` of a loaded comparison (``comparison_data.ComparisonData``) at the runs its summary
    reads: those that reached compare.json's steps and, where the folder has a runs/ folder, those
    marked finished (a folder holding only a results.parquet, a pilot's copy, has none to read)."""
    from gcpo_train.compare.report import finished_results

    finished = data.finished_pairs() if (data.folder / "runs").is_dir() else None
    margin = data.margin if margin is None else margin
    return _plan(finished_results(data.results, data.steps, finished), reference, margin, seeds)


def _plan(results, reference, margin, seeds, target=0.8, alpha=0.05) -> pd.DataFrame:
    """``plan`` of checked results."""
    from gcpo_analysis.stats.seeds import detectable_delta, planning_sd, power, seeds_for_power, variance_components

    rows = []
    for arm in [a for a in dict.fromkeys(results["arm"]) if a not in ("base", reference)]:
        d, ref_mean = _final_deltas(results, arm, reference)
        if d is None:
            continue
        vc = variance_components(d)
        sd = planning_sd(vc["tau"], vc["sigma_q"], vc["queries"])
        delta = margin * ref_mean
        if not (sd > 0 and delta > 0):  # no power to compute: refused, not planned as "2 seeds"
            raise ValueError(
                f"arm {arm!r} against {reference!r}: sd(D) = {sd:g} and δ = {delta:g} ({margin:g} of the reference's "
                f"held-out mean {ref_mean:g}); a plan needs a pilot whose per-seed deltas vary and a reference "
                f"scoring above 0"
            )
        row = {
            "arm": arm,
            "pilot_seeds": vc["seeds"],
            "queries": vc["queries"],
            "tau": vc["tau"],
            "sigma_q": vc["sigma_q"],
            "share_between": vc["share_between"],
            "sd_delta": sd,
            "reference_mean": ref_mean,
            "delta": delta,
            "power_at_pilot_seeds": power(delta, sd, vc["seeds"], alpha),
            "seeds_needed": seeds_for_power(delta, sd, target, alpha),
        }
        for n in sorted({3, 8, 16, *([seeds] if seeds else [])}):
            row[f"detectable_{n}"] = detectable_delta(sd, n, target, alpha)
        rows.append(row)
    return pd.DataFrame(rows)


PLANNED_ANALYSIS = """## The planned analysis (fixed before the confirmatory runs)

- Unit: the training seed. For each arm against `none`: D_s = mean over the held-out queries of
  score_arm(s, q) − score_none(s, q) at the last step.
- Primary: the paired t interval of mean D_s (95%, df = seeds − 1) and the exact sign-flip p
  (Holm over the arms); TOST at ±δ, δ = {margin:.0%} of GRPO's held-out score. Verdict: "better"
  (interval above 0), "worse" (below 0), "equivalent within ±δ" (TOST p < 0.05), else
  "inconclusive" (`gcpo_analysis.stats.seeds`).
- Secondary: the two-level bootstrap (seeds, then queries within a seed); the pooled bootstrap
  only for comparison with earlier readings.
- Beside each Δ: the effective treatment (mean ω, ω / mean_step(ω) p5–p95, share of clipped
  steps) and the coupling with `none` (share of identical completions per step).
- The arms: `none`, `bot_rd` and `bot_rd:shuffled` (the same ω values per step, permuted across
  the step's groups). The control contrast Δ(bot_rd − bot_rd:shuffled) gets the same seed-level
  statistics and δ (its own family, no Holm; `compare.report.control_table`) and is read only
  where `bot_rd` is "better" than `none`: if it then does not beat its shuffled twin, the
  measure's information is not what helps.
"""


# the first words of every plan write_plan writes: --overwrite replaces a file only when it is one
PLAN_TITLE = "# Planned seeds from "


def _is_plan(path: Path) -> bool:
    """Whether ``path`` starts as the plans ``plan_markdown`` writes."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(len(PLAN_TITLE)) == PLAN_TITLE
    except (OSError, UnicodeDecodeError):
        return False


def plan_markdown(table: pd.DataFrame, folder, margin: float, seeds: int | None = None) -> str:
    lines = [
        f"{PLAN_TITLE}`{folder}`",
        "",
        "τ: between-seed sd of the per-seed delta; σ_q: sd of a query's delta within a seed; sd(D) ="
        " √(τ² + σ_q²/Q); power of the two-sided paired t test (α = 0.05, statsmodels TTestPower).",
        "",
        "| arm | seeds estimated from | queries | τ | σ_q | share of var(D) between seeds | sd(D) | δ "
        f"({margin:.0%} of GRPO) | power at those seeds | seeds for 80% power | δ detected by 3 / 8 / 16 seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        lines.append(
            f"| {r['arm']} | {r['pilot_seeds']} | {r['queries']} | {r['tau']:.2f} | {r['sigma_q']:.2f} "
            f"| {r['share_between']:.0%} | {r['sd_delta']:.2f} | {r['delta']:.2f} | {r['power_at_pilot_seeds']:.2f} "
            f"| {r['seeds_needed']} | {r['detectable_3']:.1f} / {r['detectable_8']:.1f} / {r['detectable_16']:.1f} |"
        )
    if seeds:
        for _, r in table.iterrows():
            lines.append(f"\n{r['arm']}: {seeds} seeds detect δ = {r[f'detectable_{seeds}']:.2f} at 80% power.")
    return "\n".join(lines) + "\n\n" + PLANNED_ANALYSIS.format(margin=margin)


def write_plan(
    folder,
    margin: float = 0.1,
    seeds: int | None = None,
    reference: str = "none",
    overwrite: bool = False,
    name: str = "plan.md",
) -> str:
    """plan.md (or ``name``, a file name in ``folder``) of a comparison folder from ``plan``;
    returns its text. It plans from results.parquet (checked as the report checks it) at the runs
    the summary reads: those that reached compare.json's steps and, where the folder has a runs/
    folder, those marked finished (done.json, ``layout.finished_seeds``), each one left out named
    in a warning; a folder holding only a results.parquet (a pilot's, copied) has no done.json to
    read, and plans from every run in it. A plan is fixed before the runs it plans, so an existing
    file is kept unless ``overwrite``, which replaces only a plan (a file starting with
    ``PLAN_TITLE``); a finished comparison's own τ and the δ its seeds detect (the closing reading
    of what it can exclude) go to another ``name``, never one of the files the comparison writes
    (``COMPARISON_FILES``) or a hidden one. ``margin`` must be compare.json's, when it records one
    (the report reads δ there)."""
    from gcpo_analysis.frames import write_text
    from gcpo_train.compare.comparison_data import load_comparison
    from gcpo_train.compare.record import read_spec

    folder = Path(folder)
    if Path(name).name != name or not name.endswith(".md") or name.startswith("."):
        raise ValueError(f"plan file {name!r}: a file name ending in .md, not hidden, written inside {folder}")
    if name.lower() in COMPARISON_FILES:
        raise ValueError(
            f"plan file {name!r}: the comparison writes {folder / name} itself ({', '.join(COMPARISON_FILES)} are "
            "its own); name the plan otherwise, e.g. closing_plan.md"
        )
    path = folder / "results.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{folder} holds no results.parquet: run gcpo compare (or --report_only) first")
    target = folder / name
    if target.exists() and not overwrite:
        raise FileExistsError(
            f"{target} exists: a plan is fixed before the runs it plans; write this one to another file "
            "(--plan_file), move it away, or pass --overwrite to replace it"
        )
    if target.exists() and not _is_plan(target):
        raise FileExistsError(
            f"{target} is not a plan gcpo compare --plan wrote (it does not start with {PLAN_TITLE!r}); "
            "--overwrite replaces only such a plan: write this one to another file (--plan_file) or move it away"
        )
    spec = read_spec(folder)
    recorded = spec.get("equivalence_margin")
    if recorded is not None and float(recorded) != float(margin):
        raise ValueError(
            f"the equivalence margin asked for ({margin:g}) is not the one {folder / 'compare.json'} records "
            f"({recorded:g}), which its report uses; plan at the recorded one"
        )
    data = load_comparison(folder, rollouts=False)  # a bad run folder is named as itself, outside the try
    try:
        table = plan_of(data, reference, seeds, margin)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    if table.empty:
        raise ValueError(f"{path}: no arm has two or more seeds paired with {reference!r}; a plan needs a pilot")
    text = plan_markdown(table, folder, margin, seeds)
    write_text(target, text)
    return text
