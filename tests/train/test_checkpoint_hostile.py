"""Hostile checkpoints and run folders (issue "Trust"): a crafted pickle never runs, an
unreadable latest checkpoint falls back to the previous one, a rerun needs --overwrite, a
partial log line is dropped with a warning, save_total_limit keeps the newest. Each test asserts
the exact behaviour: the error text, the file left untouched. The other hostile tests live beside the
tests of the module they attack (tests/**/test_*_hostile.py)."""

import pytest


def _trained_run(tmp_path, steps=2, **kw):
    torch = pytest.importorskip("torch")
    from helpers.loop_setup import make

    make(tmp_path, "run", steps=steps, checkpoint_every=1, **kw).train()
    return torch, tmp_path / "run"


def test_a_crafted_optimizer_pt_is_refused_and_never_runs(tmp_path):
    from helpers.loop_setup import Exploit, make

    from gcpo_train.runfiles.checkpoint import UnreadableCheckpoint

    torch, run = _trained_run(tmp_path, steps=1)
    marker = tmp_path / "code-ran"
    bad = run / "checkpoints" / "step_000001" / "optimizer.pt"
    torch.save({"state": Exploit(marker)}, bad)
    with pytest.raises(UnreadableCheckpoint, match="optimizer.pt"):
        make(tmp_path, "run", steps=2, checkpoint_every=1, resume=True).train()
    assert not marker.exists()
    torch.load(bad, weights_only=False)  # the unguarded load the old code did runs the payload
    assert marker.exists()


@pytest.mark.parametrize("damage", ["truncated trainable.pt", "corrupt state.json", "missing rng.json"])
def test_an_unreadable_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, damage):
    from helpers.loop_setup import make

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
    from helpers.loop_setup import make

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
    from gcpo_train.runfiles.runlog import read_log

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    with pytest.warns(UserWarning, match="partial last line 3"):
        assert [r["step"] for r in read_log(log)] == [1, 2]
    log.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        read_log(log)


@pytest.mark.parametrize("step", ["true", "1.5", '"1"', "null"])
def test_a_logged_step_that_is_not_an_integer_is_named(tmp_path, step):
    """JSON true passed as step 1 (bool is an int in Python)."""
    from gcpo_train.runfiles.runlog import read_log

    log = tmp_path / "log.jsonl"
    log.write_text(f'{{"step": 1}}\n{{"step": {step}}}\n{{"step": 3}}\n')
    with pytest.raises(ValueError, match="line 2 has no integer 'step'"):
        read_log(log)


# ----------------------------------------------------------------------------- checkpoints kept
def test_save_total_limit_keeps_the_newest_checkpoints(tmp_path):
    pytest.importorskip("torch")
    from helpers.loop_setup import make

    make(tmp_path, "run", steps=3, checkpoint_every=1, save_total_limit=2).train()
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert kept == ["step_000002", "step_000003"]
