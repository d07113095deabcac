"""Hostile input, `gcpo align`: a refused command leaves nothing behind (a card left by
a refused snapshot refused every corrected rerun as "other settings"), the refusal names its flag
or config key, and a rerun of a finished snapshot leaves it as it is. Each test failed before its
fix: a bad --checkpoint read "missing/config.json is unreadable", --n_pool 7 of 6 queries left a
card, --n_pool 2 died in KeyError 'batch_size', a rerun of a finished snapshot wrote a Gram of
zeros over it, and changed settings were named by no field."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from helpers.alignment_sizes import small_alignment_sizes  # noqa: E402
from helpers.loop_setup import loop_config, word_reward  # noqa: E402


@pytest.fixture(autouse=True)
def _small_sizes(monkeypatch):
    small_alignment_sizes(monkeypatch)


def _cli(argv, capsys) -> tuple[int, str]:
    from helpers.cli_error import cli_outcome

    return cli_outcome(argv, capsys)


@pytest.fixture
def config(tmp_path):
    import yaml
    from test_align import _tiny_data

    _tiny_data(tmp_path / "data")
    cfg = loop_config(tmp_path, data_path=str(tmp_path / "data"), beta=0.0, group_size=4)
    cfg.pop("output_dir")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return str(tmp_path / "c.yaml")


def _args(config, out, *more):
    return [
        "align",
        "--config",
        config,
        "--snapshot",
        "s0",
        "--n_pool",
        "5",
        "--output",
        str(out),
        "--no-progress",
        *more,
    ]


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda p: None, "no such checkpoint folder"),
        (lambda p: p.write_text("x"), "a file, not a checkpoint folder"),
        (lambda p: p.mkdir(), "is not a checkpoint folder (it lacks config.json, trainable.pt)"),
    ],
)
def test_a_path_that_is_no_checkpoint_is_refused_by_the_flag_and_writes_nothing(tmp_path, capsys, config, make, named):
    make(tmp_path / "ckpt")
    out = tmp_path / "study"
    rc, err = _cli(_args(config, out, "--checkpoint", str(tmp_path / "ckpt")), capsys)
    assert rc == 2 and f"--checkpoint {tmp_path / 'ckpt'}" in err and named in err
    assert not out.exists()


def test_a_checkpoint_of_another_policy_is_refused_naming_the_fields(tmp_path, capsys, config):
    import json

    from gcpo_train.config import load_config

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    saved = load_config(config).to_dict()
    saved.update(lora_r=saved["lora_r"] * 2, model="another/model")
    (ckpt / "config.json").write_text(json.dumps(saved))
    (ckpt / "trainable.pt").write_bytes(b"never read")
    out = tmp_path / "study"
    rc, err = _cli(_args(config, out, "--checkpoint", str(ckpt)), capsys)
    assert rc == 2 and "trained on another policy than --config's" in err
    assert "lora_r" in err and "'another/model' there" in err
    assert not out.exists()


def test_a_pool_beyond_the_queries_leaves_no_card(tmp_path, capsys, config):
    out = tmp_path / "study"
    rc, err = _cli(["align", "--config", config, "--snapshot", "s0", "--n_pool", "7", "--output", str(out)], capsys)
    assert rc == 2 and "n_pool + n_ref = 7 is more than the 6 training queries" in err
    assert not out.exists()


def test_a_pool_too_small_for_the_smallest_batch_is_refused(tmp_path, capsys, config):
    rc, err = _cli(_args(config, tmp_path / "study", "--n_pool", "4"), capsys)
    assert rc == 2 and "--n_pool: n_pool must be >= 5, got 4" in err
    assert not (tmp_path / "study").exists()


def test_the_pool_minimum_is_the_smallest_batch_and_one_more():
    from gcpo_analysis.study.alignment import BATCH_SIZES
    from gcpo_train.align.run import MIN_POOL

    assert MIN_POOL == min(BATCH_SIZES) + 1


def test_an_output_that_is_a_file_or_holds_other_files_is_refused(tmp_path, capsys, config):
    (tmp_path / "file").write_text("mine")
    rc, err = _cli(_args(config, tmp_path / "file"), capsys)
    assert rc == 2 and "--output" in err and "is a file, not a study folder" in err
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "card.json").write_text("mine")
    rc, err = _cli(_args(config, tmp_path / "mine"), capsys)
    assert rc == 2 and "holds files and no update-alignment study (card.json)" in err
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["card.json"]


def test_the_snapshot_flag_is_listed_once():
    from gcpo_analysis.cli import build_parser

    text = build_parser()._subparsers._group_actions[0].choices["align"].format_help()
    assert "--snapshot SNAPSHOT, --snapshot" not in text and "--n_pool N_POOL, --n-pool N_POOL" in text


def test_a_finished_snapshot_is_kept_and_other_settings_are_named(tmp_path, capsys, config, monkeypatch):
    from gcpo_analysis.study.alignment import snapshot_paths
    from gcpo_train.align import gradients

    real = gradients.group_gradient
    monkeypatch.setattr(gradients, "group_gradient", lambda *a, **kw: real(*a, **{**kw, "reward_fn": word_reward}))
    out = tmp_path / "study"
    assert _cli(_args(config, out), capsys)[0] == 0
    gram = snapshot_paths(out, "s0")["gram"]
    K = np.load(gram)
    assert np.diag(K).max() > 0
    # the same command again (its config by another path): the Gram stays; it was replaced by zeros
    monkeypatch.chdir(tmp_path)
    assert _cli(_args("./c.yaml", out), capsys)[0] == 0
    np.testing.assert_array_equal(np.load(gram), K)
    rc, err = _cli(_args(config, out, "--seed", "1"), capsys)
    assert rc == 2 and "other settings" in err and "--seed 0 in the snapshot, 1 now" in err
    (tmp_path / "c2.yaml").write_text(
        (tmp_path / "c.yaml").read_text().replace("max_new_tokens: 6", "max_new_tokens: 5")
    )
    rc, err = _cli(_args(str(tmp_path / "c2.yaml"), out), capsys)
    assert rc == 2 and "c2.yaml: max_new_tokens 6 in the snapshot, 5 now" in err


def test_a_snapshot_finished_early_with_its_gradients_kept_goes_on_to_the_full_pool(
    tmp_path, capsys, config, monkeypatch
):
    """--finish-now with --keep-gradients: the same command later computes the rest of the pool
    and writes the snapshot again from every group (a finished snapshot whose gradients are gone
    is left alone, above)."""
    from gcpo_analysis.study.alignment import snapshot_paths
    from gcpo_train.align import gradients

    real, calls = gradients.group_gradient, []

    def stop_at_the_sixth(*a, **kw):
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("interrupted")
        return real(*a, **{**kw, "reward_fn": word_reward})

    monkeypatch.setattr(gradients, "group_gradient", stop_at_the_sixth)
    out = tmp_path / "study"
    args = [a if a != "5" else "6" for a in _args(config, out, "--keep-gradients")]  # --n_pool 6
    assert _cli(args, capsys)[0] != 0
    assert _cli([*args, "--finish-now"], capsys)[0] == 0
    assert np.load(snapshot_paths(out, "s0")["gram"]).shape == (5, 5)
    assert _cli(args, capsys)[0] == 0
    K = np.load(snapshot_paths(out, "s0")["gram"])
    assert K.shape == (6, 6) and np.diag(K)[:5].max() > 0
