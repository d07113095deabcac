"""``gcpo train --backend trl --modulator q_hawkeye --q_hawkeye_alpha 0.3`` weighs with 0.3.

Before the fix, ``trl.modulation_settings`` set q_hawkeye_alpha = alpha_base, so the TRL path
ran with 0.6 whatever the flag said. The config is built as the command builds
it (the CLI's parser, ``config_from_args``, ``build_trl_trainer`` on a tiny random model), and
the weights are checked against Q-Hawkeye's formula worked by hand.
"""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from gcpo_analysis.cli import build_parser  # noqa: E402
from gcpo_analysis.measures.judges import make_judge  # noqa: E402
from gcpo_train.cli import config_from_args  # noqa: E402
from gcpo_train.trl import GCPOConfig, modulation_settings  # noqa: E402
from gcpo_train.trl.backend import build_trl_trainer, gcpo_config_from  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
G = 4
# rewards in [0, 2]; Var_max(4) = 2 * 2 / 16 * 2^2 = 1
REWARDS = np.array([0.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 2.0, 2.0])
TEXTS = [f"the answer is {k}" for k in range(len(REWARDS))]


def _hand_weights(alpha: float) -> list[float]:
    out = []
    for k in range(len(REWARDS) // G):
        r = REWARDS[k * G : (k + 1) * G]
        mean = sum(r) / G
        var = sum((x - mean) ** 2 for x in r) / G  # population variance
        out.append(1.0 - alpha * var / 1.0)  # Var_max = floor(G/2) ceil(G/2) / G^2 (r_max - r_min)^2 = 1
    return out


def _cli_config(tmp_path, *flags):
    argv = [
        "train",
        "--config",
        str(ROOT / "configs" / "cpu_smoke.yaml"),
        "--backend",
        "trl",
        "--model",
        "tiny:llama",
        "--modulator",
        "q_hawkeye",
        "--group_size",
        str(G),
        "--queries_per_step",
        "3",
        "--n_train",
        "4",
        "--judge",
        "lexical",
        "--output_dir",
        str(tmp_path / "run"),
        *flags,
    ]
    return config_from_args(build_parser().parse_args(argv))


def test_hand_worked_weights():
    # group 1: r = (0,2,2,2), mean 1.5, var = (2.25 + 3 * 0.25) / 4 = 0.75; group 2 equal: 0; group 3: var 1
    assert _hand_weights(0.3) == pytest.approx([1 - 0.3 * 0.75, 1.0, 1 - 0.3])


@pytest.mark.trl
def test_q_hawkeye_alpha_reaches_the_trl_weights(tmp_path):
    cfg = _cli_config(tmp_path, "--q_hawkeye_alpha", "0.3")
    assert cfg.q_hawkeye_alpha == 0.3 and cfg.alpha_base == 0.6
    trainer = build_trl_trainer(cfg, judge=make_judge("lexical"))  # as gcpo train --backend trl builds it
    weights, rows = trainer._group_weights_of_batch(TEXTS, REWARDS, G)
    assert not np.allclose(weights, _hand_weights(0.6))  # what the TRL path used to run with
    np.testing.assert_allclose(weights, _hand_weights(0.3), rtol=0, atol=1e-12)
    np.testing.assert_allclose([row["w_q_hawkeye"] for row in rows], weights, rtol=0, atol=0)
    args = gcpo_config_from(cfg)
    assert args.q_hawkeye_alpha == 0.3 and modulation_settings(args).q_hawkeye_alpha == 0.3


def test_without_the_flag_the_default_alpha(tmp_path):
    args = gcpo_config_from(_cli_config(tmp_path))
    assert args.q_hawkeye_alpha == 0.6
    trainer_free = modulation_settings(args)
    assert trainer_free.q_hawkeye_alpha == 0.6 and trainer_free.alpha_base == 0.6


def test_modulator_params_q_alpha_still_wins(tmp_path):
    from gcpo_train.modulation import GroupModulator
    from gcpo_train.trl import group_weights

    args = GCPOConfig(
        output_dir=str(tmp_path / "o"),
        modulator="q_hawkeye",
        q_hawkeye_alpha=0.3,
        modulator_params={"q_alpha": 0.1},
        use_cpu=True,
        report_to=[],
    )
    gm = GroupModulator(args.modulation_settings())
    weights, _ = group_weights(TEXTS, REWARDS, G, group_modulator=gm, modulator="q_hawkeye")
    np.testing.assert_allclose(weights, _hand_weights(0.1), rtol=0, atol=1e-12)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), "0.3", True])
def test_gcpo_config_refuses_a_bad_q_hawkeye_alpha(tmp_path, bad):
    with pytest.raises(ValueError, match="q_hawkeye_alpha"):
        GCPOConfig(output_dir=str(tmp_path / "o"), q_hawkeye_alpha=bad, use_cpu=True, report_to=[])


def test_train_config_refuses_a_negative_q_hawkeye_alpha(tmp_path):
    with pytest.raises(ValueError, match="q_hawkeye_alpha"):
        _cli_config(tmp_path, "--q_hawkeye_alpha", "-0.3")
