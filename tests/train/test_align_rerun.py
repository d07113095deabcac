"""``gcpo align`` reruns and concurrent processes: a command killed during its statistics is
completed by its rerun (it said "nothing to do" and left tables without the snapshot), and two
processes on one snapshot (``--reverse``) both exit 0 (the second failed on the gradient file the
first deleted when it finished the snapshot)."""

import json

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from helpers.alignment_sizes import small_alignment_sizes  # noqa: E402
from helpers.loop_setup import loop_config, word_reward  # noqa: E402

pytestmark = pytest.mark.slow  # samples a tiny model's groups


@pytest.fixture(autouse=True)
def _small_sizes(monkeypatch):
    small_alignment_sizes(monkeypatch)


@pytest.fixture()
def align_args(tmp_path, monkeypatch):
    import yaml
    from test_align import _tiny_data

    from gcpo_train.align import gradients

    _tiny_data(tmp_path / "data")
    cfg = loop_config(tmp_path, data_path=str(tmp_path / "data"), beta=0.0, group_size=4)
    cfg.pop("output_dir")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    real = gradients.group_gradient
    monkeypatch.setattr(gradients, "group_gradient", lambda *a, **kw: real(*a, **{**kw, "reward_fn": word_reward}))
    args = ["align", "--config", str(tmp_path / "c.yaml"), "--snapshot", "s0", "--n_pool", "5"]
    return [*args, "--output", str(tmp_path / "study"), "--no-progress"]


def test_a_rerun_completes_the_statistics_of_a_command_killed_during_them(tmp_path, align_args, monkeypatch):
    from gcpo_analysis.cli import main as cli
    from gcpo_analysis.study import alignment

    real = alignment.restat
    monkeypatch.setattr(alignment, "restat", lambda *a, **kw: 1 / 0)  # killed while writing the tables
    with pytest.raises(ZeroDivisionError):
        cli(["--traceback", *align_args])
    out = tmp_path / "study"
    assert alignment.snapshot_paths(out, "s0")["card"].exists() and not (out / "summary.parquet").exists()
    monkeypatch.setattr(alignment, "restat", real)
    assert cli(align_args) == 0  # before: "nothing to do", and no tables
    assert set(pd.read_parquet(out / "summary.parquet")["snapshot"]) == {"s0"}
    before = (out / "summary.parquet").stat().st_mtime_ns
    assert cli(align_args) == 0  # now current: nothing to do
    assert (out / "summary.parquet").stat().st_mtime_ns == before


def test_two_processes_on_one_snapshot_both_exit_0(tmp_path, align_args, monkeypatch, capsys):
    from gcpo_analysis.cli import main as cli
    from gcpo_analysis.study.alignment import snapshot_paths
    from gcpo_train.align import gradients
    from gcpo_train.align import run as align_run

    inner = gradients.group_gradient
    codes = []

    def other_process_finishes_meanwhile(*a, **kw):
        if not codes:  # while this process samples its first group, the --reverse one does every group
            codes.append(None)
            codes.append(cli([*align_args, "--reverse"]))
        return inner(*a, **kw)

    monkeypatch.setattr(gradients, "group_gradient", other_process_finishes_meanwhile)
    assert cli(align_args) == 0, capsys.readouterr().err  # before: exit 2, gradients.npy not found
    assert codes == [None, 0]
    out = tmp_path / "study"
    card = json.loads(snapshot_paths(out, "s0")["card"].read_text())
    assert card["n_pool_done"] == 5 and not (out / "work" / "s0" / "gradients.npy").exists()
    # both reach the end together: the second finds the snapshot finished under the lock
    cfg = align_run.AlignConfig(config=align_args[2], snapshot="s0", output=str(out), n_pool=5, progress=False)
    align_run.finish_snapshot(cfg, None, out / "work" / "s0", 1, list(range(5)))  # before: FileNotFoundError
