"""Adding a measure or a modulator is one file: a toy of each, registered by
importing its file in the test, reaches `gcpo score`'s frame, the study's tables, the CLI's help
and choices, and the training configs, with no other edit."""

import importlib
import sys

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.measures.modulators import MODULATORS, GroupFeatures, modulate
from gcpo_analysis.measures.registry import MEASURE_REGISTRY, register_measure

EXAMPLE = "examples/rollouts_small.jsonl"


@pytest.fixture
def toy_measure():
    sys.modules.pop("helpers.toy_measure", None)
    importlib.import_module("helpers.toy_measure")
    yield "toy_range"
    MEASURE_REGISTRY.pop("toy_range")


@pytest.fixture
def toy_modulator():
    sys.modules.pop("helpers.toy_modulator", None)
    importlib.import_module("helpers.toy_modulator")
    yield "toy_half"
    MODULATORS.pop("toy_half")


def test_a_toy_measure_reaches_the_score_frame_the_cli_and_the_tables(toy_measure, tmp_path, capsys):
    from gcpo_analysis.cli import build_parser, main
    from gcpo_analysis.frames import read_frame
    from gcpo_analysis.stats.gap import gap_study

    out = tmp_path / "groups.parquet"
    assert main(["score", EXAMPLE, "-o", str(out), "--measures", "toy_range,rd", "--r-max", "2"]) == 0
    groups = read_frame(out, kind="groups")
    rewards = pd.read_json(EXAMPLE, lines=True).groupby("query_id", sort=False)["reward"]
    expected = ((rewards.max() - rewards.min()) / 2.0).to_numpy()
    np.testing.assert_allclose(groups["toy_range"].to_numpy(), expected)
    assert list(groups.columns).index("toy_range") > list(groups.columns).index("rd")  # after the built-ins

    score_help = build_parser()._subparsers._group_actions[0].choices["score"].format_help()
    assert "toy_range" in score_help
    assert main(["score", EXAMPLE, "-o", str(tmp_path / "x.parquet"), "--measures", "toy_rang"]) != 0
    assert "toy_range" in capsys.readouterr().err  # the refusal lists it among the choices

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"query_id": range(60), "toy_range": rng.uniform(size=60), "bot": rng.uniform(size=60)})
    frame["grad_var"] = frame["toy_range"] + 0.1 * rng.uniform(size=60)
    result = gap_study(frame, ["toy_range", "bot"], n_boot=50, k_folds=3)
    assert "Range" in result.table4().columns and "BoT" in result.table4().columns


def test_a_toy_modulator_reaches_modulate_the_configs_and_the_trl_bridge(toy_modulator):
    g = GroupFeatures(rewards=np.array([0.0, 2.0, 1.0]))
    adv, info = modulate("toy_half", g)
    grpo, _ = modulate("none", g)
    np.testing.assert_allclose(adv, 0.5 * np.asarray(grpo))
    assert info == {"w_toy_half": 0.5}
    pytest.importorskip("torch")
    from gcpo_train.config import TrainConfig

    assert TrainConfig(modulator="toy_half").modulator == "toy_half"
    pytest.importorskip("trl")
    from gcpo_train.trl import check_trl_modulator, trl_modulators

    check_trl_modulator("toy_half")
    assert "toy_half" in trl_modulators()


def test_a_per_rollout_modulator_is_refused_under_trl_with_its_own_reason():
    from gcpo_analysis.measures.modulators import register_modulator

    with pytest.raises(ValueError, match="say why"):
        register_modulator("toy_gate", source="toy", per_rollout=True)

    @register_modulator("toy_gate", source="toy", per_rollout=True, no_weight="it gates each rollout by a coin")
    def toy_gate(g, *, eps, **_):
        return np.zeros(len(g.rewards)), {}

    try:
        pytest.importorskip("trl")
        from gcpo_train.trl import check_trl_modulator

        with pytest.raises(ValueError, match="toy_gate.*cannot run inside TRL.*gates each rollout by a coin"):
            check_trl_modulator("toy_gate")
    finally:
        MODULATORS.pop("toy_gate")


def test_a_name_registered_twice_is_refused():
    with pytest.raises(ValueError, match="registered already"):
        register_measure("cd")(lambda groups, r_min, r_max: np.zeros(len(groups)))
    assert MEASURE_REGISTRY["cd"].source == "GCPO"


def test_the_guide_s_examples_run_as_written():
    import re
    from pathlib import Path

    from gcpo_analysis.frames import read_frame
    from gcpo_analysis.measures.score import score_groups

    guide = Path(__file__).resolve().parents[3] / "docs" / "guides" / "extending.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), re.S)
    try:
        exec(blocks[0], {})
        exec(blocks[1], {})
        from helpers.embedders import HashEmbedder

        groups = score_groups(read_frame(EXAMPLE), ["spread", "bot"], embedder=HashEmbedder(), judge="lexical")
        assert groups["spread"].between(0, 1).all() and "bot" in groups.columns
        g = GroupFeatures(rewards=np.array([0.0, 2.0, 1.0]), clusters=np.array([0, 0, 1]))
        advantages, info = modulate("agree", g)
        assert info == {"w_agree": pytest.approx(1 - 0.6 / 3)}
        np.testing.assert_allclose(advantages, np.asarray(modulate("none", g)[0]) * (1 - 0.6 / 3))
    finally:
        MEASURE_REGISTRY.pop("spread", None)
        MODULATORS.pop("agree", None)
