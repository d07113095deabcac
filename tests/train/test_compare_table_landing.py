"""gcpo compare table on a comparison still landing: the finished arms are printed and the arms
and seeds not finished yet are named (it raised a traceback on an arm with no finished seed, and
called a fresh summary one "from before" a version)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.cli import main as gcpo
from gcpo_train.compare.table import table

ROOT = Path(__file__).resolve().parents[2]
CONFIRMATORY = ROOT / "figures" / "train_compare" / "nqa_fp32" / "confirmatory"


def _landing(folder: Path) -> Path:
    """The committed confirmatory summary as it stood with only none's seeds 0, 1 finished:
    bot_rd with no finished seed (NaN row), bot_rd:shuffled absent."""
    folder.mkdir()
    summary = pd.read_csv(CONFIRMATORY / "summary.csv")
    summary = summary[summary["arm"].isin(["none", "bot_rd"])].reset_index(drop=True)
    numbers = [c for c in summary.columns if c not in ("arm", "verdict")]
    summary.loc[summary["arm"] == "bot_rd", numbers] = np.nan
    summary.loc[summary["arm"] == "bot_rd", "verdict"] = np.nan
    summary.loc[summary["arm"] == "none", "seeds"] = 2
    summary.to_csv(folder / "summary.csv", index=False)
    spec = {"config": {}, "modulators": ["none", "bot_rd", "bot_rd:shuffled"], "seeds": [0, 1, 2], "steps": 60}
    (folder / "compare.json").write_text(json.dumps(spec))
    for seed in (0, 1):
        run = folder / "runs" / "none" / f"seed_{seed}"
        run.mkdir(parents=True)
        (run / "done.json").write_text(json.dumps({"arm": "none", "seed": seed, "steps": 60}))
    return folder


def test_a_comparison_still_landing_prints_what_finished_and_names_the_rest(tmp_path, capsys):
    folder = _landing(tmp_path / "cmp")
    lines = table(folder, "arm", "held-out F1").splitlines()
    assert lines[2].startswith("| none (GRPO) | 31.99 ± 5.82 | — | — |") and len(lines) == 5
    assert lines[-1] == (
        "Not finished yet (no done.json), so not in the table: none: seed(s) 2; bot_rd: seed(s) 0, 1, 2; "
        "bot_rd:shuffled: seed(s) 0, 1, 2."
    )
    assert gcpo(["compare", "table", str(folder), "--header", "arm"]) == 0
    assert "Not finished yet" in capsys.readouterr().out


def test_a_finished_comparisons_table_is_unchanged(tmp_path):
    lines = table(CONFIRMATORY, "arm", "held-out F1").splitlines()
    assert len(lines) == 5 and not any("Not finished" in line for line in lines)


def test_an_old_summary_is_named_without_a_version_guess(tmp_path):
    (tmp_path / "summary.csv").write_text("arm,heldout_mean\nnone,1.0\n")  # no seeds, sd, ω columns
    with pytest.raises(SystemExit, match="write the summary again with this gcpo") as err:
        table(tmp_path, "arm", "score")
    assert "before" not in str(err.value)


def test_a_summary_of_the_reference_arm_alone_prints(tmp_path):
    """A comparison whose only finished arm is none: its summary has no Δ columns yet (it was
    refused as a summary "from before" a version)."""
    summary = pd.read_csv(CONFIRMATORY / "summary.csv").iloc[:1]
    summary[
        [
            "arm",
            "seeds",
            "step",
            "heldout_mean",
            "heldout_sd",
            "omega_p5",
            "omega_p95",
            "omega_mean",
            "rel_omega_p5",
            "rel_omega_p95",
            "clipped_share",
        ]
    ].to_csv(tmp_path / "summary.csv", index=False)
    lines = table(tmp_path, "arm", "F1").splitlines()
    assert lines[2] == "| none (GRPO) | 31.99 ± 5.82 | — | — | 1.00–1.00 | 1.00–1.00 | 9% |"
