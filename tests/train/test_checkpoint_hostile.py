"""Hostile input (issue "Trust"): no code execution, no silent overwrite, no silently wrong
number. Each test asserts the exact behaviour: the error text, the file left untouched. Model
answers (no hang, nothing executed) are in test_hostile_answers.py."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.cli import main
from gcpo_analysis.frames import FrameError, validate_rollouts, write_frame
from gcpo_analysis.measures import (
    barycentric_transport,
    barycentric_transport_batch,
    cosine_dispersion,
    gcpo_advantages,
    geometry_weight,
    grpo_advantages_batch,
    rd_weight,
    semantic_entropy,
)
from gcpo_analysis.stats import gap_study


# ----------------------------------------------------------------------------- checkpoints
class _Exploit:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _trained_run(tmp_path, steps=2, **kw):
    torch = pytest.importorskip("torch")
    from test_train_trainer import make

    make(tmp_path, "run", steps=steps, checkpoint_every=1, **kw).train()
    return torch, tmp_path / "run"


def test_a_crafted_optimizer_pt_is_refused_and_never_runs(tmp_path):
    from test_train_trainer import make

    from gcpo_train.checkpoint import UnreadableCheckpoint

    torch, run = _trained_run(tmp_path, steps=1)
    marker = tmp_path / "code-ran"
    bad = run / "checkpoints" / "step_000001" / "optimizer.pt"
    torch.save({"state": _Exploit(marker)}, bad)
    with pytest.raises(UnreadableCheckpoint, match="optimizer.pt"):
        make(tmp_path, "run", steps=2, checkpoint_every=1, resume=True).train()
    assert not marker.exists()
    torch.load(bad, weights_only=False)  # the unguarded load the old code did runs the payload
    assert marker.exists()


@pytest.mark.parametrize("damage", ["truncated trainable.pt", "corrupt state.json", "missing rng.json"])
def test_an_unreadable_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, damage):
    from test_train_trainer import make

    _, run = _trained_run(tmp_path, steps=2)
    latest = run / "checkpoints" / "step_000002"
    if damage.startswith("truncated"):
        data = (latest / "trainable.pt").read_bytes()
        (latest / "trainable.pt").write_bytes(data[: len(data) // 2])
    elif damage.startswith("corrupt"):
        (latest / "state.json").write_text('{"step": 2, "data_pos')
    else:
        (latest / "rng.json").unlink()
    with pytest.warns(UserWarning, match="skipping checkpoint step_000002"):
        tr = make(tmp_path, "run", steps=3, checkpoint_every=1, resume=True)
        tr.train()
    assert tr.resumed_from.endswith("step_000001") and tr.start_step == 2


def test_a_rerun_over_a_run_folder_needs_overwrite(tmp_path):
    pytest.importorskip("torch")
    from test_train_trainer import make

    run = tmp_path / "run"
    run.mkdir()
    (run / "log.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    with pytest.raises(ValueError, match="already holds a run .*--overwrite"):
        make(tmp_path, "run", steps=1).train()
    assert (run / "log.jsonl").read_text() == '{"step": 1, "loss": 0.5}\n'
    with pytest.raises(ValueError, match="log.jsonl with 1 step.* but no checkpoint"):
        make(tmp_path, "run", steps=1, resume=True).train()
    rows = make(tmp_path, "run", steps=1, overwrite=True).train()
    assert [r["step"] for r in rows] == [1]


def test_a_partial_last_log_line_is_dropped_with_a_warning(tmp_path):
    from gcpo_train.runlog import read_log

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    with pytest.warns(UserWarning, match="partial last line 3"):
        assert [r["step"] for r in read_log(log)] == [1, 2]
    log.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        read_log(log)


# ----------------------------------------------------------------------------- TrainConfig
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


# ----------------------------------------------------------------------------- data loss, OS errors
@pytest.fixture()
def rollouts_file(tmp_path):
    df = pd.DataFrame(
        {
            "query_id": np.repeat([0, 1, 2], 3),
            "rollout_id": np.tile([0, 1, 2], 3),
            "completion": list("abcabcabc"),
            "answer": list("abcaacbbb"),
            "reward": [0, 1, 2, 1, 1, 1, 0, 0, 2.0],
        }
    )
    path = tmp_path / "r.parquet"
    write_frame(df, path)
    return path


def test_score_refuses_to_write_over_its_input(rollouts_file, capsys):
    before = rollouts_file.read_bytes()
    assert main(["score", str(rollouts_file), "-o", str(rollouts_file), "--measures", "rd"]) == 2
    assert "is the input rollouts file" in capsys.readouterr().err
    assert rollouts_file.read_bytes() == before


@pytest.mark.parametrize("where", ["a folder", "under a file"])
def test_os_errors_are_one_line_naming_the_path_and_leave_no_litter(rollouts_file, tmp_path, capsys, where):
    if where == "a folder":
        out = tmp_path / "out.parquet"
        out.mkdir()
    else:
        out = rollouts_file / "out.parquet"
    assert main(["score", str(rollouts_file), "-o", str(out), "--measures", "rd"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err or str(out.parent) in err
    assert not list(tmp_path.rglob("*.tmp"))


# ----------------------------------------------------------------------------- wrong numbers
def test_alpha_base_must_be_finite_and_non_negative(rollouts_file, capsys):
    r = np.array([0.0, 1.0, 2.0])
    e = np.eye(3)
    for bad in (-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="alpha_base must be a finite number >= 0"):
            gcpo_advantages(r, e, geometry="cd", alpha_base=bad)
    assert (
        main(
            [
                "score",
                str(rollouts_file),
                "-o",
                str(rollouts_file.with_name("g.parquet")),
                "--measures",
                "rd",
                "--alpha-base",
                "-5",
            ]
        )
        == 2
    )
    assert "alpha_base" in capsys.readouterr().err
    assert not rollouts_file.with_name("g.parquet").exists()


def test_nan_is_refused_not_propagated():
    with pytest.raises(ValueError, match="NaN"):
        geometry_weight(float("nan"), 8)
    with pytest.raises(ValueError, match="NaN"):
        rd_weight(float("nan"), 8)
    with pytest.raises(ValueError, match="missing"):
        semantic_entropy([0.0, float("nan"), 1.0])
    e = np.random.default_rng(0).normal(size=(4, 5))
    with pytest.raises(ValueError, match="missing"):
        barycentric_transport(e, [0.0, np.nan, 1.0, 1.0])
    with pytest.raises(ValueError, match="missing"):
        barycentric_transport_batch(e[None], np.array([[0.0, np.nan, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="NaN or infinite reward at index \\(1, 0\\)"):
        grpo_advantages_batch([[0.0, 1.0], [np.inf, 1.0]])


def test_huge_and_tiny_embeddings_are_rescaled_not_refused():
    e = np.random.default_rng(1).normal(size=(6, 8))
    assert cosine_dispersion(e * 1e200) == pytest.approx(cosine_dispersion(e), rel=1e-12)
    assert cosine_dispersion(e * 1e-200) == pytest.approx(cosine_dispersion(e), rel=1e-12)
    labels = [0, 0, 1, 1, 2, 2]
    assert barycentric_transport(e * 1e200, labels) == pytest.approx(barycentric_transport(e, labels), rel=1e-9)
    with pytest.raises(ValueError, match="NaN or infinite"):
        cosine_dispersion(np.full((2, 3), np.inf))


def _frame(**cols):
    base = {
        "query_id": np.repeat([0, 1], 2),
        "rollout_id": np.tile([0, 1], 2),
        "completion": ["a"] * 4,
        "answer": ["a"] * 4,
        "reward": [0.0, 1.0, 1.0, 2.0],
    }
    base.update(cols)
    return pd.DataFrame(base)


@pytest.mark.parametrize(
    "cols, msg",
    [
        ({"query_id": [0, None, 1, 1]}, "'query_id' is null at row 1"),
        (
            {"query_id": pd.Series([1, "1", 2, 2], dtype=object)},
            "'query_id' mixes types: 1 \\(number\\) at row 0 and '1' \\(text\\) at row 1",
        ),
        ({"rollout_id": pd.Series([0, "0", 0, 1], dtype=object)}, "'rollout_id' mixes types"),
        (
            {"reward": pd.Series([0.0, "1.5", 1.0, 2.0], dtype=object)},
            "'reward' must be numeric, got '1.5' \\(str\\) at row 1",
        ),
        ({"reward": [True, False, True, True]}, "'reward' must be numeric, got True \\(bool\\) at row 0"),
    ],
)
def test_bad_ids_and_rewards_name_the_row(cols, msg):
    with pytest.raises(FrameError, match=msg):
        validate_rollouts(_frame(**cols))


def _groups(n=30, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.gamma(2.0, size=n)
    return pd.DataFrame(
        {
            "query_id": np.arange(n),
            "G": 8,
            "grad_var": v,
            "cd": v + rng.normal(size=n),
            "bot": v + rng.normal(size=n),
            "success_rate": rng.uniform(size=n),
        }
    )


def test_gap_study_refuses_what_would_shift_its_numbers():
    g = _groups()
    dup = pd.concat([g, g.iloc[:3]], ignore_index=True)
    with pytest.raises(ValueError, match="query_id 0 appears 2 times"):
        gap_study(dup, measures=["cd", "bot"], n_boot=50, trim=0)
    nul = g.astype({"query_id": object})
    nul.loc[4, "query_id"] = None
    with pytest.raises(ValueError, match="query_id is null at row 4"):
        gap_study(nul, measures=["cd", "bot"], n_boot=50, trim=0)
    with pytest.raises(ValueError, match="'grad_var' has no finite value"):
        gap_study(g.assign(grad_var=np.nan), measures=["cd", "bot"], n_boot=50, trim=0)
    with pytest.raises(ValueError, match="n_boot must be an integer >= 1"):
        gap_study(g, measures=["cd", "bot"], n_boot=0, trim=0)
    with pytest.raises(ValueError, match="no query matched"):
        gap_study(g.iloc[:0], measures=["cd", "bot"], n_boot=50, trim=0)


def test_an_all_nan_success_rate_skips_only_its_table():
    with pytest.warns(UserWarning, match="success-rate table .* is skipped"):
        res = gap_study(_groups().assign(success_rate=np.nan), measures=["cd", "bot"], n_boot=50, trim=0)
    assert res.success is None and len(res.spearman) == 2 and math.isfinite(res.spearman["rho"].iloc[0])


def test_save_total_limit_keeps_the_newest_checkpoints(tmp_path):
    pytest.importorskip("torch")
    from test_train_trainer import make

    make(tmp_path, "run", steps=3, checkpoint_every=1, save_total_limit=2).train()
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert kept == ["step_000002", "step_000003"]


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
    fake.init = lambda **kw: types.SimpleNamespace(finish=lambda: logged.append("finish"))
    fake.log = lambda row, step: logged.append((step, row))
    monkeypatch.setitem(sys.modules, "trackio", fake)
    from gcpo_train import reporting

    monkeypatch.setattr(reporting, "installed", lambda module: module == "trackio")
    pytest.importorskip("torch")
    from test_train_trainer import make

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
