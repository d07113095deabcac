"""The tables of a study folder on what V is made of (V = N + C), the size controls,
the confirmatory contrast, and every headline table again without the trim
(``stats.vparts``; the covariates from ``study.covariates``). Written by ``run_study`` and by
``gcpo study --restat``; deterministic given the seed, so a re-run reproduces them byte for byte."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd

from ..frames import write_table, write_text
from ..stats.vparts import CONFIRMATORY, CONFIRMATORY_TARGETS, CONTROL_SETS, v_structure

NOTES = {
    "v_parts": "What V is made of (our addition). V = N + C with N = (1/G)(1 - 1/G) sum_i A_i^2 "
    "||g_i||^2 (V if the per-rollout gradients were orthogonal) and C = -(1/G^2) sum_(i != j) A_i A_j g_i.g_j "
    "(the geometry, the only part nearby answers -> nearby gradients can move). share_C_over_V_*: "
    "quantiles of C / V over the V > 0 groups, V = N + C from the Gram; rho(V, x): Spearman of V with N "
    "(grad_var_norm), C (grad_var_cross), s = mean||g||^2 (grad_norm2_mean), the mean completion length "
    "(n_tokens_mean) and the share of completions at the token cap (cap_share). 95% percentile "
    "bootstrap CIs over groups. frame: trimmed (the study's trim) or untrimmed.",
    "v_parts_measures": "Per measure u (exploratory): Spearman rho(u, V), rho(u, N), rho(u, C) and the rank "
    "partial rho(u, C | N); p from the t-test (df = n - 2 - controls), p_holm = Holm over the measures of one "
    "(frame, subset, statistic). 95% percentile bootstrap CIs over groups.",
    "size_controls": "Size controls (exploratory): rank partial rho(u, V | controls) for the control sets "
    + ", ".join(f"{k} = {'+'.join(v)}" for k, v in CONTROL_SETS.items())
    + ". p from the t-test (df = n - 2 - |controls|), p_holm = Holm over the measures of one (frame, subset, "
    "controls). 95% percentile bootstrap CIs over groups.",
    "confirmatory": "The confirmatory contrast, fixed in advance (gcpo_analysis.stats.vparts.CONFIRMATORY): "
    "within V > 0, delta = rho(BoT, t) - rho(u, t) for u in ("
    + ", ".join(u for _, u in CONFIRMATORY)
    + ") and t in ("
    + ", ".join(CONFIRMATORY_TARGETS)
    + "); p = two-sided bootstrap p, p_holm = Holm over these rows of one frame. Everything else in the "
    "study is exploratory.",
    "trim": "The trim as a share of all groups and of the V > 0 groups (V = 0 groups are never the largest, "
    "so a trim removes V > 0 groups only); removed_v_over_median_v_pos = largest V / median V over V > 0.",
}


def write_v_tables(
    tables: Path,
    groups: pd.DataFrame,
    measures: list[str],
    trim,
    n_boot: int,
    seed: int,
    level: float = 0.95,
) -> dict:
    """``stats.vparts.v_structure`` on ``groups`` (with its covariate columns), written as
    tables/<name>.csv and .md (with the notes above); returns the trim note as a dict."""
    if "grad_var" not in groups.columns:  # rollouts without gradients (--from-rollouts, --target success_rate)
        reason = "the groups have no gradient variance (grad_var), so there is no V to take apart"
        warnings.warn(f"the V tables (v_parts, size_controls, confirmatory, trim) are skipped: {reason}", stacklevel=2)
        return {"skipped": reason}
    tables.mkdir(parents=True, exist_ok=True)
    measures = [m for m in measures if m in groups.columns]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = v_structure(groups, measures, trim, n_boot=n_boot, seed=seed, level=level)
    for name, table in out.items():
        write_table(table, tables / f"{name}.csv")
        write_text(tables / f"{name}.md", NOTES[name] + "\n\n" + table.to_markdown(index=False, floatfmt=".3f") + "\n")
    return out["trim"].iloc[0].to_dict()
