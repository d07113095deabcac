"""The second stage's plan (figures/train_compare/nqa_fp32/stage2_plan.md) states numbers computed
from the committed confirmatory files: each is recomputed here, independently of the plan's
text, with gcpo's statistics and, for the boundaries, the module that the final reading uses."""

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "figures/train_compare/nqa_fp32"
RAW = (FOLDER / "stage2_plan.md").read_text(encoding="utf-8")
PLAN = " ".join(RAW.split())  # its lines joined
DELTA = 3.26


def _deltas() -> np.ndarray:
    r = pd.read_parquet(FOLDER / "confirmatory/results.parquet")
    final = r[r["step"] == 60].pivot_table(index=["seed", "query_id"], columns="arm", values="score")
    return (final["bot_rd"] - final["none"]).unstack("query_id").sort_index().to_numpy()


def test_the_margin_is_the_first_plans_number():
    first = (FOLDER / "plan.md").read_text(encoding="utf-8")
    assert "δ = 10% of GRPO's 32.59 = 3.26 F1" in first and f"**δ = {DELTA} F1**" in PLAN


def test_the_tost_sensitivity_row_and_the_first_look():
    from gcpo_analysis.stats.seeds import paired_t, tost
    from gcpo_analysis.stats.sequential import nominal_levels

    per_seed = _deltas().mean(axis=1)
    row = re.search(r"\| TOST p, 13 seeds \|(.*)\|", RAW).group(1).split("|")
    margins = [3.0, 3.1, 3.2, 3.26, 3.3, 3.4, 3.5]
    assert [float(x) for x in row] == [round(tost(per_seed, m), 4) for m in margins]
    two = nominal_levels([13 / 22, 1.0])
    one = nominal_levels([13 / 22, 1.0], sides=1)
    assert f"| 1 | 13 | {two[0]:.4f} ({100 * (1 - two[0]):.2f}% interval) | {one[0]:.4f} |" in PLAN.replace(
        " (a ", " ("
    )
    assert f"| 2 | 22 | {two[1]:.4f} ({100 * (1 - two[1]):.2f}% interval) | {one[1]:.4f} |" in PLAN.replace(
        " (a ", " ("
    )
    t = paired_t(per_seed, 1 - two[0])
    assert f"= {t['mean']:+.2f}, 98.92% interval [{t['low']:+.2f}, {t['high']:+.2f}]".replace("-", "−") in PLAN
    assert f"TOST p {tost(per_seed, DELTA):.4f} at ±3.26" in PLAN


def test_the_boundaries_and_the_power_of_22_seeds():
    from gcpo_analysis.stats.seeds import planning_sd, power, variance_components
    from gcpo_analysis.stats.sequential import boundaries, nominal_levels

    b2, b1 = boundaries([13 / 22, 1.0]), boundaries([13 / 22, 1.0], sides=1)
    assert f"are {b2[0]:.3f} and {b2[1]:.3f} (two-sided) and {b1[0]:.3f} and {b1[1]:.3f} (one-sided)" in PLAN
    vc = variance_components(_deltas())
    assert f"τ = {vc['tau']:.2f} F1 (σ_q = {vc['sigma_q']:.2f} over {vc['queries']} queries" in PLAN
    sd = planning_sd(vc["tau"], vc["sigma_q"], vc["queries"])
    level = float(nominal_levels([13 / 22, 1.0])[1])
    assert f"power {power(DELTA, sd, 22):.2f} at δ = 3.26 ({power(DELTA, sd, 22, alpha=level):.2f} at" in PLAN


def test_the_shape_of_the_first_stage():
    from scipy import stats

    per_seed = _deltas().mean(axis=1)
    assert f"median {np.median(per_seed):+.2f}".replace("-", "−") in PLAN
    assert f"Wilcoxon p {stats.wilcoxon(per_seed).pvalue:.2f}, {int((per_seed < 0).sum())} of 13 seeds negative" in PLAN


@pytest.mark.slow
def test_the_dose_spreads_from_the_committed_rollouts():
    """ω / step mean p5–p95 at α = 0.6, 5 and 10, from each group's ω read back from its
    advantages, RD from its rewards and the BoT factor as ω / ω_RD (ω = ω_BoT · ω_RD)."""
    from gcpo_analysis.measures.dispersion import reward_dispersion
    from gcpo_train.compare.treatment import omega_groups

    rows = []
    for path in sorted((FOLDER / "confirmatory/runs/bot_rd").glob("seed_*/rollouts/*.parquet")):
        frame = pd.read_parquet(path)
        omega = omega_groups(frame).set_index("query_id")["omega"]
        for q, g in frame.groupby("query_id"):
            if q in omega.index:
                rows.append((str(path), omega[q], reward_dispersion(g["reward"].to_numpy(float), 0.0, 2.0)))
    df = pd.DataFrame(rows, columns=["file", "omega", "rd"])
    assert f"({len(df):,} groups over 13 seeds" in PLAN
    a0 = 0.6 / math.log(8)
    u2 = (1 - df["omega"] / (1 + a0 * df["rd"])) / a0
    for alpha in (0.6, 5, 10):
        a = alpha / math.log(8)
        w = np.clip(1 - a * u2, 0, 1) * (1 + a * df["rd"])
        low, high = np.quantile(w / w.groupby(df["file"]).transform("mean"), [0.05, 0.95])
        assert f"{low:.2f}–{high:.2f} at α = {alpha}" in PLAN.replace("**", "")
        assert (w > 0).all()


def test_the_training_pages_reading_of_the_first_stage():
    """The training page's answer: the power the 13 seeds had at ±3.20, the TOST p at the two
    margins, the shape of the deltas, and the plan's first look, recomputed from the committed
    results (``compare.stages.reading``) and the closing plan's τ."""
    from gcpo_analysis.stats.seeds import planning_sd, power, variance_components
    from gcpo_train.compare.stages import reading

    page = " ".join((ROOT / "docs/results/training.md").read_text(encoding="utf-8").split())
    results = pd.read_parquet(FOLDER / "confirmatory/results.parquet")
    r = reading(results, "bot_rd", DELTA)
    sens = r["sensitivity"].set_index("margin")["p_tost"]
    sh = r["shape"]
    assert f"the TOST p is {sens[3.2]:.4f} at ±3.20 and {sens[DELTA]:.4f} at ±3.26" in page
    assert f"the median delta is {sh['median']:+.2f}".replace("-", "−") in page
    assert f"{sh['below_zero']} of 13 seeds are negative (Wilcoxon p {sh['wilcoxon_p']:.3f})" in page
    assert f"the mean without seed {sh['loo_low_without']} is {sh['loo_low']:+.2f}".replace("-", "−") in page
    vc = variance_components(_deltas())
    sd = planning_sd(vc["tau"], vc["sigma_q"], vc["queries"])
    assert f"they had power {power(3.2, sd, 13):.2f}" in page
    assert "98.92% interval [−3.51, +4.92], TOST p 0.0465 > 0.0108" in page and "0.59–1.48" in PLAN
    assert "(nominal levels 0.0108 and 0.0459)" in page and "| 1 | 13 | 0.0108" in PLAN and "| 2 | 22 | 0.0459" in PLAN
