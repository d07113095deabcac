"""Print a comparison's headline table, as the README quotes it, from its summary.csv.

    python scripts/compare_table.py figures/train_compare/nqa_fp32/confirmatory \
        --header "arm (trained, NarrativeQA spans, fp32)" --score "held-out F1"

One row per arm: mean ± sd over seeds, the seed-level paired t interval of Δ against none with its
df, the verdict at ±δ (δ written out), ω's 5th–95th percentile, and the effective treatment
(ω / its step's mean, 5th–95th percentile; the share of clipped steps). Rounded as
tests/integration/test_readme_compare_numbers.py checks them, so a table pasted from here passes
it; writing the numbers by hand is where they drift.
"""

from __future__ import annotations

import argparse
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
    for s in summary.itertuples():
        if s.arm == "none":
            delta = verdict = "—"
        else:
            delta = f"{signed(s.delta)} [{signed(s.delta_low)}, {signed(s.delta_high)}] (df {int(s.df)})"
            verdict = s.verdict.replace("±δ", f"±{s.margin:.2f}")
        out.append(
            f"| {label(s.arm)} | {s.heldout_mean:.2f} ± {s.heldout_sd:.2f} | {delta} | {verdict} "
            f"| {s.omega_p5:.2f}–{s.omega_p95:.2f} | {s.rel_omega_p5:.2f}–{s.rel_omega_p95:.2f} "
            f"| {100 * s.clipped_share:.0f}% |"
        )
    return out


def table(folder: Path, header: str, score: str) -> str:
    path = folder / "summary.csv"
    if not path.is_file():
        raise SystemExit(f"{path}: no summary.csv (run gcpo compare, or --report_only, on the folder first)")
    summary = pd.read_csv(path)
    missing = {"arm", "heldout_mean", "delta", "verdict", "rel_omega_p5", "clipped_share"} - set(summary.columns)
    if missing:
        raise SystemExit(f"{path}: no column {sorted(missing)} (a summary from before issue 35?)")
    head = (
        f"| {header} | {score}, mean ± sd over seeds | Δ vs none, seed-level 95% t CI (df) "
        "| verdict at ±δ (10% of GRPO) | ω, 5th–95th percentile | ω / step mean, 5th–95th | clipped steps |"
    )
    return "\n".join([head, "|---|---|---|---|---|---|---|", *rows(summary)])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a comparison folder (its summary.csv)")
    p.add_argument("--header", required=True, help="the first header cell, which names the table in the README")
    p.add_argument("--score", default="held-out score", help="what the score column holds (e.g. held-out F1)")
    a = p.parse_args(argv)
    print(table(a.folder, a.header, a.score))


if __name__ == "__main__":
    main()
