"""Hostile configurations (issues "Trust" and 20): TrainConfig and GCPOConfig refuse what they
cannot honour with a message naming the field (types, ranges, unknown keys, YAML aliases and
syntax errors, report_to backends). Each test asserts the exact error."""

import math
import time

import pytest

from gcpo_train.config import TrainConfig, load_config


def _cli(argv, capsys):
    """(exit code, the command's error lines): library warnings on stderr are not error lines."""
    from gcpo_analysis.cli import main

    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    return rc, "\n".join(x for x in err.splitlines() if "Warning" not in x and not x.startswith("  "))


def test_train_config_reads_scientific_notation_and_refuses_wrong_types(tmp_path):
    from gcpo_train.config import TrainConfig, load_config

    yml = tmp_path / "c.yaml"
    yml.write_text("learning_rate: 1e-4\nbeta: 2e-3\n")  # YAML 1.1 reads both as strings
    cfg = load_config(yml, {"weight_decay": "1E-2"})
    assert (cfg.learning_rate, cfg.beta, cfg.weight_decay) == (1e-4, 2e-3, 1e-2)
    for kw, msg in [
        ({"steps": "3"}, "steps must be an integer"),
        ({"use_lora": "no"}, "use_lora must be true or false"),
        ({"group_size": 2.5}, "group_size must be an integer"),
        ({"beta": -0.1}, "beta must be"),
        ({"eps": 0}, "eps must be"),
        ({"top_p": 0}, "top_p must be"),
        ({"top_p": 1.2}, "top_p must be"),
        ({"train_frac": 1.0}, "train_frac must be"),
        ({"dtype": "fp8"}, "dtype must be one of"),
        ({"alpha_base": -5}, "alpha_base must be"),
        ({"alpha_base": float("nan")}, "alpha_base must be"),
        ({"learning_rate": "fast"}, "learning_rate must be a number"),
    ]:
        with pytest.raises(ValueError, match=msg):
            TrainConfig(**kw)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        TrainConfig(output_dir=str(tmp_path / "afile"))


def test_train_cli_flag_in_scientific_notation(tmp_path):
    pytest.importorskip("torch")
    import argparse

    from gcpo_train.cli import add_train_parser, config_from_args

    parser = argparse.ArgumentParser()
    add_train_parser(parser.add_subparsers())
    args = parser.parse_args(["train", "--learning_rate", "1e-4", "--output_dir", str(tmp_path / "o")])
    assert config_from_args(args).learning_rate == 1e-4


def test_report_to_refuses_a_backend_that_is_not_installed_and_logs_to_one_that_is(tmp_path, monkeypatch):
    import sys
    import types

    from gcpo_train.config import TrainConfig

    with pytest.raises(ValueError, match="report_to: unknown backend 'comet'"):
        TrainConfig(report_to=["comet"])
    import importlib.machinery
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ValueError, match="'wandb' is not installed"):
            TrainConfig(report_to=["wandb"])
    logged = []
    fake = types.ModuleType("trackio")
    fake.__spec__ = importlib.machinery.ModuleSpec("trackio", None)
    fake.init = lambda **kw: types.SimpleNamespace(  # trackio's Run, as Accelerate's TrackioTracker uses it
        log=lambda row, step: logged.append((step, row)), finish=lambda: logged.append("finish")
    )
    monkeypatch.setitem(sys.modules, "trackio", fake)
    from gcpo_train import reporting

    monkeypatch.setattr(reporting, "installed", lambda module: module == "trackio")
    pytest.importorskip("torch")
    from helpers.loop_setup import make

    make(tmp_path, "run", steps=2, report_to=["trackio"]).train()
    steps = [entry[0] for entry in logged if entry != "finish"]
    assert steps == [1, 2] and "loss" in logged[0][1] and logged[-1] == "finish"


def test_report_to_lists_each_backend_once_even_after_replace(monkeypatch):
    import dataclasses

    from gcpo_train import reporting
    from gcpo_train.config import TrainConfig

    monkeypatch.setattr(reporting, "installed", lambda module: True)
    cfg = TrainConfig(tensorboard=True, report_to=["tensorboard", "wandb"])
    assert cfg.report_to == ["tensorboard", "wandb"]
    assert dataclasses.replace(cfg, steps=3).report_to == ["tensorboard", "wandb"]


def test_save_total_limit_below_one_is_refused():
    for bad in (-1, 0):
        with pytest.raises(ValueError, match="save_total_limit must be >= 1"):
            TrainConfig(save_total_limit=bad)


def test_unknown_modulator_params_key_is_refused_with_the_accepted_keys():
    with pytest.raises(ValueError, match=r"unknown key 'q_alfa'.*accepted keys: .*q_alpha"):
        TrainConfig(modulator_params={"q_alfa": 50})


@pytest.mark.parametrize("field,value", [("r_max", math.inf), ("use_full_completion", "no"), ("alpha_base", "0.6")])
def test_gcpo_config_validates_like_train_config(tmp_path, field, value):
    pytest.importorskip("trl")
    from gcpo_train.trl import GCPOConfig

    with pytest.raises(ValueError, match=field):
        GCPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **{field: value})


def test_a_yaml_alias_bomb_is_refused_within_2_seconds(tmp_path):
    lines = ["modulator_params:", "  a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for k, name in enumerate("bcdefgh"):
        prev = "abcdefgh"[k]
        lines.append(f"  {name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="alias"):
        load_config(path).config_hash()
    assert time.perf_counter() - t0 < 2


def test_a_yaml_syntax_error_is_one_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("steps: 3\nlora_target_modules: [q_proj, v_proj\nbeta: 0.1\n")
    rc, err = _cli(["train", "--config", str(path)], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "bad.yaml" in err and "line" in err


def test_report_to_none_as_a_string_is_accepted():
    assert TrainConfig(report_to="none").report_to == []


def test_unknown_modulator_params_are_refused_under_trl(tmp_path):
    pytest.importorskip("trl")
    from gcpo_train.trl import GCPOConfig

    with pytest.raises(ValueError, match="q_alfa.*accepted keys"):
        GCPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], modulator_params={"q_alfa": 50})


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--set", "steps=nan"], "--set steps=nan: steps must be an integer, got 'nan'"),
        (["--set", "beta=0.1", "steps=[1]"], "--set steps=[1]: steps must be an integer, got [1]"),
        (["--steps", "nan"], "--steps: steps must be an integer, got 'nan'"),
        (["--config", "{file}"], "{file}: steps must be an integer, got [1] (list)"),
    ],
    ids=["set-nan", "set-list", "flag", "file"],
)
def test_a_bad_value_names_the_flag_or_the_file_that_gave_it(tmp_path, capsys, argv, named):
    """`--set steps=nan` and a config file's `steps: [1]` were refused as "steps must be an
    integer", naming neither --set nor the file."""
    path = tmp_path / "c.yaml"
    path.write_text("steps: [1]\n")
    argv = [a.format(file=path) for a in argv]
    rc, err = _cli(["train", "--output_dir", str(tmp_path / "out"), *argv], capsys)
    assert rc == 2 and named.format(file=path) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


@pytest.mark.parametrize(
    ("argv", "text", "named"),
    [
        (["--set", "modulator_params={q_alfa: 5}"], "", "--set modulator_params={q_alfa: 5}: modulator_params"),
        (["--config", "{file}"], "modulator_params: {q_alfa: 5}\n", "{file}: modulator_params: unknown key 'q_alfa'"),
        (["--set", "report_to=[wandbx]"], "", "--set report_to=[wandbx]: "),
        (["--config", "{file}"], "report_to: [wandbx]\n", "{file}: "),
    ],
    ids=["set-params", "file-params", "set-report", "file-report"],
)
def test_a_bad_modulator_params_or_report_to_names_where_it_was_given(tmp_path, capsys, argv, text, named):
    """Their checks are functions of their own (check_modulator_params, check_report_to), which
    ran only when the config was built, naming neither --set nor the file."""
    path = tmp_path / "c.yaml"
    path.write_text(text or "steps: 1\n")
    argv = [a.replace("{file}", str(path)) for a in argv]
    rc, err = _cli(["train", "--output_dir", str(tmp_path / "out"), *argv], capsys)
    assert rc == 2 and named.replace("{file}", str(path)) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_a_bad_value_in_a_comparison_config_names_the_file(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("steps: [1]\ncompare:\n  seeds: [0]\n")
    rc, err = _cli(["compare", "--config", str(path), "--output", str(tmp_path / "out")], capsys)
    assert rc == 2 and f"{path}: steps must be an integer, got [1] (list)" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]
