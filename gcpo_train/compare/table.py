"""``gcpo compare table FOLDER``: a comparison's headline table, as the README quotes it, from its
summary.csv:

    gcpo compare table figures/train_compare/nqa_fp32/confirmatory \
        --header "arm (trained, NarrativeQA spans, fp32)" --score "held-out F1"

One row per arm: mean ± sd over seeds, the seed-level paired t interval of Δ against none with its
df, the verdict at ±δ (δ written out), ω's 5th–95th percentile, and the effective treatment
(ω / its step's mean, 5th–95th percentile; the share of clipped steps). Rounded as
tests/integration/test_readme_compare_numbers.py checks them, so a table pasted from here passes
it; writing the numbers by hand is where they drift. On a comparison still landing, the arms and
seeds that have finished are printed and the missing ones named below the table (from
compare.json and the finished runs' done.json).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

LABELS = {"none": "none (GRPO)", "bot_rd": "bot_rd (GCPO)"}


def signed(x: float) -> str:
    """+1.23 / −1.23 (a true minus sign, as the README writes them)."""
    return f"{x:+.2f}".replace("-", "−")


def label(arm: str) -> str:
    if arm in LABELS:
        return LABELS[arm]
    return f"{arm} (control)" if arm.endswith(":shuffled") else arm


def rows(summary: pd.DataFrame) -> list[str]:
    out = []
    for r in summary.to_dict("records"):
        if not (r["seeds"] == r["seeds"] and r["seeds"] > 0):  # an arm with no finished run yet: named below
            continue
        if r["arm"] == "none" or not r["delta"] == r["delta"]:  # the reference, or an arm not paired with it yet
            delta = verdict = "—"
        else:
            delta = f"{signed(r['delta'])} [{signed(r['delta_low'])}, {signed(r['delta_high'])}] (df {int(r['df'])})"
            verdict = r["verdict"].replace("±δ", f"±{r['margin']:.2f}")
        out.append(
            f"| {label(r['arm'])} | {r['heldout_mean']:.2f} ± {r['heldout_sd']:.2f} | {delta} | {verdict} "
            f"| {_range(r['omega_p5'], r['omega_p95'])} | {_range(r['rel_omega_p5'], r['rel_omega_p95'])} "
            f"| {_share(r['clipped_share'])} |"
        )
    return out


def _range(low: float, high: float) -> str:
    return "—" if not (low == low and high == high) else f"{low:.2f}–{high:.2f}"


def _share(x: float) -> str:
    return "—" if not x == x else f"{100 * x:.0f}%"


def missing_runs(folder: Path) -> list[str]:
    """'<arm>: seeds [...]' for each arm of the folder's compare.json with seeds not finished yet
    (no done.json); [] for a finished comparison or a folder without compare.json."""
    from gcpo_train.compare.layout import finished_seeds
    from gcpo_train.compare.record import read_spec

    spec = read_spec(folder)
    out = []
    for arm in spec.get("modulators", []):
        done = set(finished_seeds(folder, arm))
        left = [s for s in spec.get("seeds", []) if s not in done]
        if left:
            out.append(f"{arm}: seed(s) {', '.join(map(str, left))}")
    return out


def table(folder: Path, header: str, score: str) -> str:
    path = folder / "summary.csv"
    if not path.is_file():
        raise SystemExit(f"{path}: no summary.csv (run gcpo compare, or --report_only, on the folder first)")
    summary = pd.read_csv(path)
    wanted = {"arm", "seeds", "heldout_mean", "heldout_sd", "omega_p5", "omega_p95"}
    missing = (wanted | {"rel_omega_p5", "rel_omega_p95", "clipped_share"}) - set(summary.columns)
    if missing:
        raise SystemExit(
            f"{path}: no column {sorted(missing)}; write the summary again with this gcpo "
            "(gcpo compare --config CONFIG --output FOLDER --report_only)"
        )
    head = (
        f"| {header} | {score}, mean ± sd over seeds | Δ vs none, seed-level 95% t CI (df) "
        "| verdict at ±δ (10% of GRPO) | ω, 5th–95th percentile | ω / step mean, 5th–95th | clipped steps |"
    )
    for column in ("delta", "delta_low", "delta_high", "df", "verdict", "margin"):  # none yet: the reference alone
        if column not in summary.columns:
            summary[column] = float("nan")
    lines = [head, "|---|---|---|---|---|---|---|", *rows(summary)]
    left = missing_runs(folder)
    if left:  # a comparison still landing: say what the table does not hold yet
        lines.append(f"\nNot finished yet (no done.json), so not in the table: {'; '.join(left)}.")
    return "\n".join(lines)
