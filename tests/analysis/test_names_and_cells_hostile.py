"""Names are identifiers (registries, compare arms), a measure may not take a frame
column's name, and impossible cells or parameters are refused wherever they enter (a negative
token_entropy, a success share of 2, q_alpha 2 in the modulator function itself)."""

import re

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.datasets import DATASET_REGISTRY, Example, register_dataset
from gcpo_analysis.frames import FrameError, validate_groups, validate_rollouts
from gcpo_analysis.measures.modulators import MODULATORS, GroupFeatures, q_hawkeye_weight, register_modulator
from gcpo_analysis.measures.registry import MEASURE_REGISTRY, register_measure
from gcpo_analysis.registry import Registry, check_name

BAD_NAMES = ["../../escaped", "a/b", "a\\b", "..", "x.y", "", "1abc", "has space"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_that_is_not_an_identifier_is_refused_by_every_registry(name):
    def fn(*a, **k):
        return 1.0, {}

    with pytest.raises(ValueError, match="must be an identifier"):
        register_modulator(name, source="probe")(fn)
    with pytest.raises(ValueError, match="must be an identifier"):
        register_measure(name)(fn)
    with pytest.raises(ValueError, match="must be an identifier"):
        register_dataset(name, task="qa_f1", source="probe", example=Example({}, ("a",), "a", 2.0))(fn)
    for registry in (MODULATORS, MEASURE_REGISTRY, DATASET_REGISTRY):
        with pytest.raises(ValueError, match="must be an identifier"):
            registry[name] = object()  # direct assignment keeps the rule
        with pytest.raises(ValueError, match="must be an identifier"):
            registry.update({name: object()})
        with pytest.raises(ValueError, match="must be an identifier"):
            registry.lookup(name)  # a path is refused as a path, not as a typo
        assert name not in registry


def test_check_name_passes_identifiers():
    assert check_name("modulator", "bot_rd") == "bot_rd"
    reg: Registry[int] = Registry("widget")
    reg.add("ok_1", 1)
    assert reg.lookup("ok_1") == 1


def test_compare_refuses_an_arm_that_is_a_path(tmp_path):
    pytest.importorskip("torch")
    from gcpo_train.compare.run import Comparison, run_config
    from gcpo_train.config import TrainConfig

    base = TrainConfig(model="tiny:llama", output_dir=str(tmp_path / "unused"))
    with pytest.raises(ValueError, match="must be an identifier"):
        run_config(base, "../../escaped", 0, tmp_path / "cmp", 0, None, 0)
    with pytest.raises(ValueError, match="must be an identifier"):
        Comparison(base, tmp_path / "cmp", ["none", "../../escaped"], [0])
    with pytest.raises(ValueError, match="must be an identifier"):
        Comparison(base, tmp_path / "cmp", ["none", "../../escaped:shuffled"], [0])
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "cmp").exists()


def test_compare_takes_the_shuffled_control_arm(tmp_path):
    """The identifier rule once refused every '<modulator>:shuffled' arm, the shuffled-weights control."""
    pytest.importorskip("torch")
    from gcpo_train.compare.run import Comparison, run_config
    from gcpo_train.config import TrainConfig

    base = TrainConfig(model="tiny:llama", output_dir=str(tmp_path / "unused"))
    Comparison(base, tmp_path / "cmp", ["none", "bot_rd", "bot_rd:shuffled"], [0, 1])
    cfg = run_config(base, "bot_rd:shuffled", 1, tmp_path / "cmp", 0, None, 0)
    assert cfg.modulator == "bot_rd:shuffled" and cfg.output_dir == str(
        tmp_path / "cmp" / "runs" / "bot_rd-shuffled" / "seed_1"
    )  # no ':' in a path (a Windows checkout refuses one)
    with pytest.raises(ValueError, match=r"did you mean bot_rd:shuffled\?"):
        Comparison(base, tmp_path / "cmp", ["none", "BOT_RD:shuffled"], [0])


@pytest.mark.parametrize(
    "name", ["query_id", "mean_reward", "G", "n_clusters", "success_rate", "grad_var", "reward", "w_rd", "w_new"]
)
def test_a_measure_may_not_take_a_frame_column_name(name):
    with pytest.raises(ValueError, match="refused"):
        register_measure(name, rewards=True)(lambda groups, r_min, r_max: np.zeros(len(groups)))
    assert name not in MEASURE_REGISTRY


def test_a_measure_weight_column_may_not_overwrite_another_column():
    values = lambda groups, r_min, r_max: np.zeros(len(groups))  # noqa: E731
    weight = lambda u, G, a: 1.0  # noqa: E731
    for column in ("w_rd", "mean_reward", "rd"):
        with pytest.raises(ValueError, match="weight column"):
            register_measure("probe_measure", rewards=True, weight=weight, weight_column=column)(values)
        assert "probe_measure" not in MEASURE_REGISTRY
    register_measure("probe_measure", rewards=True, weight=weight)(values)  # w_probe_measure is free
    try:
        assert MEASURE_REGISTRY["probe_measure"].weight_column == "w_probe_measure"
    finally:
        MEASURE_REGISTRY.pop("probe_measure")


@pytest.mark.parametrize("column", BAD_NAMES)
def test_a_measure_weight_column_that_is_not_an_identifier_is_refused(column):
    """weight_column="../x" was registered (and "" silently became w_probe_measure): the
    measure's name was checked, its column not."""
    weight = lambda u, G, a: 1.0  # noqa: E731
    with pytest.raises(ValueError, match=r"a weight column name must be an identifier.*got " + re.escape(repr(column))):
        register_measure("probe_measure", rewards=True, weight=weight, weight_column=column)(
            lambda groups, r_min, r_max: np.zeros(len(groups))
        )
    assert "probe_measure" not in MEASURE_REGISTRY


def _rollouts(**cols):
    df = pd.DataFrame(
        {
            "query_id": ["q", "q", "q"],
            "rollout_id": [0, 1, 2],
            "completion": ["a", "b", "c"],
            "answer": ["a", "b", "c"],
            "reward": [0.0, 1.0, 2.0],
        }
    )
    return df.assign(**cols)


@pytest.mark.parametrize(
    "col, values", [("token_entropy", [0.5, -0.25, 1.0]), ("ratio_var", [0.0, 0.1, -1e-3]), ("n_tokens", [3, -1, 2])]
)
def test_an_impossible_negative_cell_is_refused_naming_column_and_row(col, values):
    with pytest.raises(FrameError, match=rf"column '{col}' must be a number >= 0 .* at row {int(np.argmin(values))}"):
        validate_rollouts(_rollouts(**{col: values}))
    validate_rollouts(_rollouts(**{col: [abs(v) for v in values]}))  # the same column, possible, passes


def test_a_negative_token_entropy_is_refused_by_gcpo_score(tmp_path, capsys):
    from gcpo_analysis.cli import main

    path = tmp_path / "r.jsonl"
    _rollouts(token_entropy=[0.5, -0.25, 1.0]).to_json(path, orient="records", lines=True)
    assert main(["score", str(path), "--measures", "token_entropy", "-o", str(tmp_path / "g.parquet")]) == 2
    assert "token_entropy" in capsys.readouterr().err and not (tmp_path / "g.parquet").exists()


@pytest.mark.parametrize("success", [[True, False, 2], [1.0, 0.5, 0.0], [True, None, False], ["yes", True, False]])
def test_a_success_that_is_not_a_boolean_is_refused(success):
    with pytest.raises(FrameError, match=r"column 'success' must be a boolean"):
        validate_rollouts(_rollouts(success=pd.Series(success, dtype=object)))


def test_a_success_rate_outside_zero_one_is_refused():
    groups = pd.DataFrame({"query_id": ["a", "b"], "G": [4, 4], "success_rate": [0.5, 2.0]})
    with pytest.raises(FrameError, match=r"column 'success_rate' must be a share in \[0, 1\], got 2.0 at row 1"):
        validate_groups(groups)
    validate_groups(groups.assign(success_rate=[0.5, 1.0]))


def test_gap_study_refuses_a_success_rate_of_two():
    from gcpo_analysis.stats.gap import gap_study

    rng = np.random.default_rng(0)
    groups = pd.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(20)],
            "G": 4,
            "rd": rng.random(20),
            "grad_var": rng.random(20),
            "success_rate": np.r_[rng.random(19), 2.0],
        }
    )
    with pytest.raises(ValueError, match=r"'success_rate' must hold shares in \[0, 1\], got 2.0 at row 19"):
        gap_study(groups, measures=["rd"], reference="rd", n_boot=50)
    with pytest.raises(ValueError, match=r"'success_rate' must hold shares"):
        gap_study(groups, measures=["rd"], reference="rd", target="success_rate", n_boot=50)


def test_q_hawkeye_refuses_q_alpha_above_one_however_it_is_called():
    g = GroupFeatures(rewards=np.array([0.0, 2.0, 0.0, 2.0]))  # Var = Var_max: omega = 1 - q_alpha
    assert q_hawkeye_weight(g, q_alpha=1.0)[0] == 0.0
    calls = [
        lambda: q_hawkeye_weight(g, q_alpha=2),
        lambda: MODULATORS["q_hawkeye"].group_weight(g, q_alpha=2, alpha=0.6, r_min=0.0, r_max=2.0),
        lambda: MODULATORS["q_hawkeye"](g, q_alpha=2),
        lambda: q_hawkeye_weight(g, q_alpha=-0.5),
        lambda: q_hawkeye_weight(g, q_alpha=float("nan")),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"q_alpha must be a finite number in \[0, 1\]"):
            call()


def test_the_other_modulator_parameters_are_checked_in_their_functions():
    g = GroupFeatures(
        rewards=np.array([0.0, 2.0, 1.0]),
        token_entropy=np.array([0.5, 1.0, 1.5]),
        ratio_var=np.array([0.1, 0.2, 0.3]),
        clusters=np.array([0, 0, 1]),
    )
    with pytest.raises(ValueError, match="r2vpo_lambda"):
        MODULATORS["r2vpo"](g, r2vpo_lambda=-1.0)
    with pytest.raises(ValueError, match="eg_alpha"):
        MODULATORS["eg_spo"](g, eg_alpha=float("inf"))
    with pytest.raises(ValueError, match="empo_low"):
        MODULATORS["empo"](g, empo_low=0.8, empo_high=0.2)
