"""Every knob declared once and validated at the boundary.

CLI-level checks, one per class of defect, each of which the old code accepted: a string for a
boolean, a weight that can turn negative, a token cap of 0 or below, a log interval of 0, an
infinite reward range, a misspelt split or judge, a YAML key given twice, a flag that a mode
ignores. Then the layer itself: each shared knob is declared once and every config takes it from
there, so the configs cannot drift apart.
"""

import ast
import dataclasses
import json
import typing
from pathlib import Path

import pytest

from gcpo_analysis import knobs
from gcpo_analysis.cli import main
from gcpo_analysis.knobs import SHARED, check_value, knobs_of
from gcpo_analysis.study.config import StudyConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "rollouts_small.jsonl"


def _train_error(tmp_path, capsys, *flags, yaml_text=None) -> str:
    """The one-line error of `gcpo train` with these flags (it must fail before any model loads)."""
    args = ["train", "--output_dir", str(tmp_path / "run"), "--model", "tiny:llama", *flags]
    if yaml_text is not None:
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(yaml_text)
        args += ["--config", str(cfg)]
    assert main(args) == 2
    assert not (tmp_path / "run").exists()  # refused before the run folder (or a model) was made
    return capsys.readouterr().err


# ---------------------------------------------------------------------------------- the classes
def test_a_string_is_not_a_boolean(tmp_path, capsys):
    err = _train_error(tmp_path, capsys, yaml_text='share_prompt: "false"\n')
    assert "share_prompt must be true or false, got 'false' (str)" in err
    pytest.importorskip("trl")
    from gcpo_train.trl import GCPOConfig

    with pytest.raises(ValueError, match="share_prompt must be true or false"):
        GCPOConfig(output_dir=str(tmp_path / "o"), use_cpu=True, report_to=[], share_prompt="false")


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("--q_hawkeye_alpha", "1.5", "q_hawkeye_alpha must be a finite number in [0, 1], got 1.5"),
        ("--r2vpo_lambda", "-1", "r2vpo_lambda must be a finite number >= 0, got -1.0"),
        ("--max_prompt_tokens", "0", "max_prompt_tokens must be >= 1, got 0"),
        ("--max_prompt_tokens", "-3", "max_prompt_tokens must be >= 1, got -3"),
        ("--log_every", "0", "log_every must be >= 1, got 0"),
        ("--max_context_tokens", "0", "max_context_tokens must be >= 1, got 0"),
        ("--eval_max_new_tokens", "0", "eval_max_new_tokens must be >= 1, got 0"),
        ("--empo_low", "0.9", "empo_low (0.9) must be <= empo_high (0.5)"),
        ("--r_max", ".inf", "r_max must be a finite number, got inf"),
    ],
)
def test_a_value_out_of_range_is_refused_naming_the_knob(tmp_path, capsys, flag, value, message):
    assert message in _train_error(tmp_path, capsys, flag, value)


def test_null_is_no_prompt_cap(tmp_path):
    from gcpo_train.config import load_config

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"max_prompt_tokens: null\noutput_dir: {tmp_path / 'run'}\n")
    assert load_config(cfg).max_prompt_tokens is None
    assert "null = no cap" in next(
        f.metadata["help"] for f in dataclasses.fields(load_config(cfg)) if f.name == "max_prompt_tokens"
    )


def test_q_hawkeye_alpha_above_one_is_refused_by_modulate_too():
    import numpy as np

    from gcpo_analysis.measures.modulators import GroupFeatures, modulate

    g = GroupFeatures(rewards=np.array([0.0, 2.0, 2.0, 2.0]))
    with pytest.raises(ValueError, match=r"q_alpha must be a finite number in \[0, 1\]"):
        modulate("q_hawkeye", g, q_alpha=1.5)
    advantages, info = modulate("q_hawkeye", g, q_alpha=1.0)  # the largest allowed: weight >= 0
    assert info["w_q_hawkeye"] >= 0


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_gcpo_score_refuses_an_infinite_reward_range(tmp_path, capsys, value):
    out = tmp_path / "g.parquet"
    assert main(["score", str(EXAMPLE), "-o", str(out), "--measures", "rd", f"--r-max={value}"]) == 2
    err = capsys.readouterr().err
    assert "--r-max: r_max must be a finite number" in err and not out.exists()


def test_gcpo_score_refuses_a_threshold_outside_0_1(tmp_path, capsys):
    args = ["score", str(EXAMPLE), "-o", str(tmp_path / "g.parquet"), "--measures", "se", "--nli-threshold", "2"]
    assert main(args) == 2
    assert "--nli-threshold: nli_threshold must be a finite number in [0, 1], got 2.0" in capsys.readouterr().err


def test_a_misspelt_split_or_judge_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "packaged", "--split", "tset"])
    assert exit_.value.code == 2 and "invalid choice: 'tset'" in capsys.readouterr().err
    err = _train_error(tmp_path, capsys, "--eval_split", "tset")
    assert "eval_split must be one of train, validation, dev, test, got 'tset' (did you mean test?)" in err
    assert "'nli:' needs a model name" in _train_error(tmp_path, capsys, "--judge", "'nli:'")
    with pytest.raises(ValueError, match="unknown judge 'embeding'"):
        StudyConfig(judge="embeding")


def test_a_yaml_key_given_twice_is_refused(tmp_path, capsys):
    err = _train_error(tmp_path, capsys, yaml_text="steps: 3\nlearning_rate: 1.0e-4\nsteps: 30\n")
    assert "cfg.yaml: line 3, column 1 not valid YAML (duplicate key 'steps' (first at line 1)" in err


def test_a_flag_the_mode_ignores_is_refused_naming_the_mode(tmp_path, capsys):
    rollouts = str(EXAMPLE)
    assert main(["study", "--from-rollouts", rollouts, "--group-size", "16", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--from-rollouts" in err and "does not read --group-size" in err and not (tmp_path / "o").exists()
    assert main(["study", "--from-training", str(tmp_path), "--model", "m", "--temperature", "0.5"]) == 2
    assert "--from-training does not read --model, --temperature: drop them" in capsys.readouterr().err


def test_study_config_is_validated_when_made():
    for bad, message in (
        (dict(n_boot=0), "n_boot must be >= 1"),
        (dict(k_folds=1), "k_folds must be >= 2"),
        (dict(group_size=1), "group_size must be >= 2"),
        (dict(trim=-1), "trim must be a finite number >= 0"),
        (dict(measures="bot,sse"), r"unknown measure\(s\) \['sse'\]"),
        (dict(params="some"), "params must be one of all, lora"),
        (dict(temperature=float("inf")), "temperature must be a finite number >= 1e-30"),
    ):
        with pytest.raises(ValueError, match=message):
            StudyConfig(**bad)


def test_gcpo_config_reads_with_trl_s_argument_parser(tmp_path):
    pytest.importorskip("trl")
    from transformers import HfArgumentParser

    from gcpo_train.trl import GCPOConfig

    parser = HfArgumentParser(GCPOConfig)
    base = ["--output_dir", str(tmp_path / "o"), "--use_cpu", "true", "--report_to", "none"]
    (args,) = parser.parse_args_into_dataclasses(base + ["--nli_threshold", "0.5", "--modulator", "cd"])
    assert (args.nli_threshold, args.modulator) == (0.5, "cd")
    with pytest.raises(ValueError, match="q_hawkeye_alpha must be a finite number in"):
        parser.parse_args_into_dataclasses(base + ["--q_hawkeye_alpha", "2"])
    with pytest.raises(ValueError, match="modulator 'eg_spo' cannot run inside TRL"):
        parser.parse_args_into_dataclasses(base + ["--modulator", "eg_spo"])
    from trl import TrlParser

    config = tmp_path / "gcpo.yaml"
    config.write_text("nli_threshold: 0.4\nmodulator: cd\n")
    (args,) = TrlParser((GCPOConfig,)).parse_args_and_config(args=["--config", str(config), *base])
    assert (args.nli_threshold, args.modulator) == (0.4, "cd")
    config.write_text("q_hawkeye_alpha: 3\n")
    with pytest.raises(ValueError, match="q_hawkeye_alpha must be a finite number in"):
        TrlParser((GCPOConfig,)).parse_args_and_config(args=["--config", str(config), *base])


# ---------------------------------------------------------------------------------- the layer
def _configs():
    pytest.importorskip("torch")
    from gcpo_train.config import TrainConfig
    from gcpo_train.modulation import ModulationSettings

    out = [TrainConfig, StudyConfig, ModulationSettings]
    try:
        from gcpo_train.trl import GCPOConfig
    except ImportError:
        return out
    return [*out, GCPOConfig]


def test_every_field_carries_its_help_and_its_declaration():
    for cls in _configs():
        ours = [f for f in dataclasses.fields(cls) if f.name in knobs_of(cls)]
        assert ours and all(f.metadata["help"] for f in ours), cls
        if cls.__name__ != "GCPOConfig":  # TRL's own fields are TRL's
            assert len(ours) == len(dataclasses.fields(cls)), cls


def test_a_shared_knob_has_one_range_in_every_config():
    seen: dict = {}
    for cls in _configs():
        for name, spec in knobs_of(cls).items():
            if name in SHARED:
                rules = {k: getattr(spec, k) for k in ("ge", "gt", "le", "lt", "choices")}
                assert rules == {k: getattr(SHARED[name], k) for k in rules}, (cls.__name__, name)
                seen.setdefault(name, set()).add(cls.__name__)
    assert {"TrainConfig", "StudyConfig", "ModulationSettings"} <= seen["nli_threshold"]


def _sources(root: Path = ROOT) -> dict[str, ast.Module]:
    return {
        str(p.relative_to(root)): ast.parse(p.read_text(), str(p))
        for pkg in ("gcpo_analysis", "gcpo_train")
        for p in sorted((root / pkg).rglob("*.py"))
    }


def _is_knob_call(node) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Knob"


def knob_declarations(sources: dict[str, ast.Module]) -> dict[str, list[str]]:
    """name -> where a ``Knob(...)`` is declared for it: a dict entry ``"name": Knob(...)`` or a
    parameter's ``("name", Knob(...))`` (``measures.params.MODULATOR_PARAMS``)."""
    found: dict[str, list[str]] = {}
    for where, tree in sources.items():
        for node in ast.walk(tree):
            pairs = []
            if isinstance(node, ast.Dict):
                pairs = list(zip(node.keys, node.values))
            elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
                pairs = [(node.elts[0], node.elts[1])]
            for key, value in pairs:
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and _is_knob_call(value):
                    found.setdefault(key.value, []).append(f"{where}:{key.lineno}")
    return found


def field_declarations(sources: dict[str, ast.Module]) -> dict[str, list[str]]:
    """name -> every class body that declares a field of that name (``name: type = ...``)."""
    found: dict[str, list[str]] = {}
    for where, tree in sources.items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    found.setdefault(stmt.target.id, []).append(f"{where}:{cls.name}")
    return found


def test_each_knob_is_declared_once_in_the_source():
    """A knob's declaration (default, range, help) is written once: in knobs.SHARED or
    measures.params, or as the one config's own ``knob(...)`` field."""
    declared = knob_declarations(_sources())
    fields = {name: [] for name in SHARED}
    for where, tree in _sources().items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and getattr(stmt.target, "id", None) in SHARED
                    and isinstance(stmt.value, ast.Call)
                    and getattr(stmt.value.func, "id", None) in ("knob", "field")
                ):
                    fields[stmt.target.id].append(f"{where}:{cls.name}")
    for name in SHARED:
        assert len(declared.get(name, [])) == 1, (name, declared.get(name))
        assert fields[name] == [], f"{name} is declared again outside knobs.SHARED: {fields[name]}"


def _modulation_knobs() -> list[str]:
    pytest.importorskip("torch")
    from gcpo_train.modulation import ModulationSettings

    return [f.name for f in dataclasses.fields(ModulationSettings)]


def test_a_modulation_knob_is_declared_in_one_place():
    """Each field of ModulationSettings (the modulator, its tools, its knobs) is declared as a field
    in one class only; TrainConfig, GCPOConfig and StudyConfig inherit it. So its annotation cannot
    differ between configs (use_full_completion was ``bool | None`` in one and ``bool`` in another)."""
    names = _modulation_knobs()
    assert {"modulator", "judge", "q_hawkeye_alpha", "use_full_completion", "empo_high"} <= set(names)
    declared = field_declarations(_sources())
    twice = {name: declared[name] for name in names if len(declared.get(name, [])) != 1}
    assert twice == {}


def test_the_one_place_check_catches_a_knob_declared_twice(tmp_path):
    """The checker on a made-up tree: a config that re-lists a modulation field is reported."""
    (tmp_path / "gcpo_analysis").mkdir()
    (tmp_path / "gcpo_train").mkdir()
    (tmp_path / "gcpo_train" / "modulation.py").write_text(
        "class ModulationSettings:\n    judge: str = shared('judge')\n    eps: float = shared('eps')\n"
    )
    (tmp_path / "gcpo_train" / "config.py").write_text(
        "class TrainConfig(ModulationSettings):\n    steps: int = knob(1, 'h')\n    judge: str = shared('judge')\n"
    )
    declared = field_declarations(_sources(tmp_path))
    assert declared["judge"] == ["gcpo_train/config.py:TrainConfig", "gcpo_train/modulation.py:ModulationSettings"]
    assert declared["eps"] == ["gcpo_train/modulation.py:ModulationSettings"]


def test_every_configs_modulation_fields_are_the_settings_own():
    """TrainConfig has every modulation field, GCPOConfig the group-weight ones, StudyConfig the
    measurement tools: inherited, so the same Field objects (default, help, range)."""
    from gcpo_analysis.knobs import MeasurementTools

    names = _modulation_knobs()
    from gcpo_train.config import TrainConfig
    from gcpo_train.modulation import GroupWeightSettings, ModulationSettings

    def fields(cls):
        return {f.name: f for f in dataclasses.fields(cls)}

    assert all(fields(TrainConfig)[n] is fields(ModulationSettings)[n] for n in names)
    assert all(fields(StudyConfig)[n] is fields(MeasurementTools)[n] for n in fields(MeasurementTools))
    assert "modulator" not in fields(StudyConfig)
    try:
        from gcpo_train.trl import GCPOConfig
    except ImportError:
        return
    group = fields(GroupWeightSettings)
    assert all(fields(GCPOConfig)[n] is group[n] for n in group)
    assert {"eps", "eg_spo_alpha", "r2vpo_lambda", "empo_low", "empo_high"}.isdisjoint(fields(GCPOConfig))


def test_a_modulator_parameter_is_one_declaration():
    """Each parameter of measures.params.MODULATOR_PARAMS is a float field of ModulationSettings
    of its declared name, with its declared Knob, and modulator_params() passes it under the
    modulator's keyword; nothing else lists the pairs."""
    pytest.importorskip("torch")
    from gcpo_analysis.measures.params import MODULATOR_PARAMS, PARAM_KNOBS
    from gcpo_train.modulation import ModulationSettings, modulator_params

    specs = knobs_of(ModulationSettings)
    hints = typing.get_type_hints(ModulationSettings)
    for name, spec in MODULATOR_PARAMS.values():
        assert specs[name] == spec and hints[name] is float, name
    values = {name: 0.1 * (k + 1) for k, (name, _) in enumerate(MODULATOR_PARAMS.values())}
    settings = ModulationSettings(**values, modulator_params={"q_alpha": 0.05})
    expected = {kwarg: values[name] for kwarg, name in PARAM_KNOBS.items()} | {"q_alpha": 0.05}
    assert modulator_params(settings) == expected
    assert expected["eg_alpha"] == values["eg_spo_alpha"] == 0.2  # a hand-checked pair


def test_check_value_reads_yaml_1_1_scientific_notation_but_not_other_strings():
    spec = SHARED["alpha_base"]
    assert check_value("alpha_base", "1e-1", spec, float) == 0.1
    for bad in ("0.6", True, [0.6]):
        with pytest.raises(ValueError, match="alpha_base must be a number"):
            check_value("alpha_base", bad, spec, float)
    assert json.loads(json.dumps(knobs.SPLITS)) == list(knobs.SPLITS)


def test_a_flag_backend_trl_ignores_is_refused_and_a_config_value_warned(tmp_path, capsys):
    pytest.importorskip("trl")
    from gcpo_train.config import TrainConfig
    from gcpo_train.trl.backend import TRL_IGNORES, refuse_unsupported

    err = _train_error(tmp_path, capsys, "--backend", "trl", "--micro_batch_size", "4")
    assert "--backend trl does not read --micro_batch_size" in err
    cfg = TrainConfig(backend="trl", micro_batch_size=4, output_dir=str(tmp_path / "o"))
    with pytest.warns(UserWarning, match="--backend trl ignores micro_batch_size"):
        refuse_unsupported(cfg)
    assert set(TRL_IGNORES) <= {f.name for f in dataclasses.fields(TrainConfig)}
