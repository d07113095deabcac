"""gcpo plot-train's inputs named in its errors: a logged value that is
not a number is named by its key and step (it was drawn as a category, or failed in matplotlib
naming nothing), and the figures never go into a checkpoint or a run's pruned folders. Each test
failed on the code before its fix (e498d2b)."""

import json

import pytest

pytest.importorskip("matplotlib")

from helpers.cli_error import cli_error  # noqa: E402

from gcpo_analysis.cli import main  # noqa: E402


def _log(folder, *rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.parametrize(
    ("key", "value"),
    [("reward_mean", "x"), ("kl", [1, 2]), ("w_rd", {"a": 1}), ("time_step", True)],
)
def test_a_logged_value_that_is_not_a_number_is_named(tmp_path, capsys, key, value):
    run = _log(tmp_path / "run", {"step": 1, "reward_mean": 0.5}, {"step": 2, "reward_mean": 0.5, key: value})
    rc, line = cli_error(["plot-train", str(run)], capsys)
    assert rc == 2 and f"row 2 (step 2) has {key} = {value!r}, not a number" in line and "log.jsonl" in line
    assert not (run / "plots").exists()


def test_a_missing_value_is_a_gap_not_an_error(tmp_path, capsys):
    run = _log(tmp_path / "run", {"step": 1, "kl": None, "loss": 0.5}, {"step": 2, "kl": 0.1})
    assert main(["plot-train", str(run)]) == 0
    assert (run / "plots" / "training.png").exists() and (run / "plots" / "training.svg").exists()


@pytest.mark.parametrize("where", ["checkpoints/step_000001/curves", "checkpoints/curves.png", "rollouts/curves"])
def test_plot_train_never_writes_into_a_checkpoint_or_pruned_folder(tmp_path, capsys, where):
    run = _log(tmp_path / "run", {"step": 1, "reward_mean": 0.5})
    ckpt = run / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    for name in ("state.json", "trainable.pt"):
        (ckpt / name).write_text("{}")
    (run / "rollouts").mkdir()
    before = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    rc, line = cli_error(["plot-train", str(run), "-o", str(run / where)], capsys)
    assert rc == 2 and "-o" in line and ("checkpoint" in line or "prunes" in line)
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == before


@pytest.mark.parametrize(
    "value",
    [1e308, -1e308, float("inf"), float("-inf"), 10**40, 10**400],
    ids=["1e308", "-1e308", "inf", "-inf", "10^40", "10^400"],
)
def test_a_logged_value_beyond_float32_is_named(tmp_path, capsys, value):
    # 1e308 beside -1e308 died in matplotlib ("arange: cannot compute length"); inf was drawn off the axis
    run = _log(tmp_path / "run", {"step": 1, "kl": -value}, {"step": 2, "kl": value})
    rc, line = cli_error(["plot-train", str(run)], capsys)
    assert rc == 2 and f"row 1 (step 1) has kl = {-value!r}, not a finite number" in line and "log.jsonl" in line
    assert not (run / "plots").exists()


def test_a_nan_is_a_gap_not_an_error(tmp_path, capsys):
    run = _log(tmp_path / "run", {"step": 1, "kl": float("nan")}, {"step": 2, "kl": 0.1})
    assert main(["plot-train", str(run)]) == 0


@pytest.mark.parametrize(
    ("steps", "named"),
    [
        ([1, 10**23], "row 2 has step = 100000000000000000000000, beyond a 64-bit integer"),
        ([1, 2, 1], "rows 1 and 3 have the same step = 1"),
    ],
)
def test_a_step_beyond_int64_or_logged_twice_is_named(tmp_path, capsys, steps, named):
    run = _log(tmp_path / "run", *({"step": s, "reward_mean": 0.5} for s in steps))
    rc, line = cli_error(["plot-train", str(run)], capsys)
    assert rc == 2 and named in line and "log.jsonl" in line
    assert not (run / "plots").exists()
