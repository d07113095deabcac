"""Every numeric knob at its type's edges is refused at the boundary, naming the
key or flag, before anything is made: integers beyond int64 (seed 2^64), floats float32 cannot
hold (temperature 1e-45, a subnormal), integers too large for a float."""

import pytest

from gcpo_analysis.cli import main
from gcpo_analysis.knob import Knob, check_value
from gcpo_analysis.study import StudyConfig

FLOAT32_TINY, FLOAT32_MAX = 1.1754943508222875e-38, 3.4028234663852886e38  # numpy.finfo(float32)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("seed", 2**64, "seed must fit a 64-bit integer"),
        ("seed", 2**63, "seed must fit a 64-bit integer"),
        ("n_queries", 10**30, "n_queries must fit a 64-bit integer"),
        ("temperature", 1e-45, "temperature must be of a size float32 holds"),
        ("temperature", 5e-324, "temperature must be of a size float32 holds"),
        ("temperature", 1e39, "temperature must be of a size float32 holds"),
        ("temperature", 10**400, "temperature must be of a size float32 holds"),
        ("trim", 1e-40, "trim must be of a size float32 holds"),
    ],
)
def test_a_study_knob_at_its_types_edge_is_refused_naming_it(key, value, message):
    with pytest.raises(ValueError, match=message):
        StudyConfig(**{key: value})


def test_the_edges_themselves_pass():
    assert check_value("x", 2**63 - 1, Knob(0, "an int")) == 2**63 - 1
    assert check_value("x", -(2**63), Knob(0, "an int")) == -(2**63)
    for v in (0.0, FLOAT32_TINY, -FLOAT32_TINY, FLOAT32_MAX, 1e-30):
        assert check_value("x", v, Knob(0.5, "a float")) == v


def test_train_config_refuses_a_subnormal_temperature():
    pytest.importorskip("torch")
    from gcpo_train.config import TrainConfig

    with pytest.raises(ValueError, match="temperature must be of a size float32 holds"):
        TrainConfig(model="tiny:llama", temperature=1e-45)
    with pytest.raises(ValueError, match="seed must fit a 64-bit integer"):
        TrainConfig(model="tiny:llama", seed=2**64)


def test_the_study_cli_refuses_seed_2_64_before_making_its_folder(tmp_path, capsys):
    out = tmp_path / "S"
    assert main(["study", "--seed", str(2**64), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "seed must fit a 64-bit integer" in err and "Traceback" not in err
    assert not out.exists()  # no S/parts left behind


def test_the_study_cli_refuses_a_subnormal_temperature_naming_it(tmp_path, capsys):
    assert main(["study", "--temperature", "1e-45", "--output", str(tmp_path / "S")]) == 2
    assert "temperature must be of a size float32 holds" in capsys.readouterr().err
    assert not (tmp_path / "S").exists()


def test_a_reward_range_end_too_large_for_a_float_is_refused_by_name():
    """check_reward_range (configs, GCPOConfig) raised a bare OverflowError from math.isfinite on
    10**400, the twin of as_rewards' defect; both now share knob.finite_number."""
    from gcpo_analysis.knobs import check_reward_range

    with pytest.raises(ValueError, match="r_max must be a finite number, got 1000"):
        check_reward_range(0, 10**400)
