"""scripts/compute_estimate.py: hand-worked numbers for two arms, and the committed table (which
docs/guides/compare.md includes) is the script's output for the committed configs."""

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "compute_estimate.py"))


def _estimate(bench, arm):
    from gcpo_train.compare.settings import load_compare_config

    cfg, settings = load_compare_config(ROOT / "configs" / "compare" / f"{bench}.yaml")
    return SCRIPT["arm_hours"](cfg, settings, arm)


def test_narrativeqa_grpo_by_hand():
    # Q = 4, G = 16, P = 256 + 80, C = 64; (6 + 2 reference) N T at 0.35 x 989 TFLOP/s, 64 decode
    # steps of 20 ms; 4 evaluations of 63 batches x 64 steps x 20 ms
    T = 4 * 16 * (256 + 80 + 64)
    step = 8 * 1.54e9 * T / (0.35 * 989e12) + 64 * 0.020
    hours = (2000 * step + 4 * 63 * 64 * 0.020) / 3600
    e = _estimate("narrativeqa", "none")
    assert e["tokens"] == T == 25_600
    assert e["h"] == pytest.approx(hours) and hours == pytest.approx(1.3069, abs=1e-4)


def test_math_bot_rd_adds_its_embeddings_and_worst_case_nli_pairs():
    # 64 full completions embedded (cut at 512 tokens) and 4 x 16 x 15 / 2 = 480 NLI pairs of 512 tokens
    flops = 2 * 22.7e6 * 64 * 512 + 2 * 355e6 * 480 * 512
    extra = 2000 * flops / (0.35 * 989e12) / 3600
    assert _estimate("math500", "bot_rd")["h"] - _estimate("math500", "none")["h"] == pytest.approx(extra)


def test_committed_table_is_the_scripts_output():
    text = (ROOT / "configs" / "compare" / "compute_estimate.md").read_text()
    assert text == SCRIPT["table"]()
    assert '--8<-- "configs/compare/compute_estimate.md"' in (ROOT / "docs" / "guides" / "compare.md").read_text()
