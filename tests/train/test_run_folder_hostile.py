"""Hostile input for run folders and checkpoints: nothing deleted that gcpo did
not write, one run per folder, no NaN checkpoint resumed or exported. One test per probe, each
with its input and the outcome class (refused with a message matching X; a correct number; a
file left byte for byte). Every probe here failed on the code before the issue (a57d336). The
round's configuration probes are in test_config_hostile.py, its `gcpo score` probe in
tests/analysis/test_cli_hostile.py."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from helpers.loop_setup import make  # noqa: E402

from gcpo_train.config import TrainConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, steps=2, **kw):
    make(tmp_path, "run", steps=steps, checkpoint_every=1, **kw).train()
    return tmp_path / "run"


def _snapshot(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".gcpo")
    }


def _cli(argv, capsys):
    """(exit code, the command's error lines): library warnings on stderr are not error lines."""
    from gcpo_analysis.cli import main

    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    return rc, "\n".join(x for x in err.splitlines() if "Warning" not in x and not x.startswith("  "))


# ----------------------------------------------------------------------------- 1. nothing deleted
@pytest.mark.parametrize("target", ["data file", "state.json"])
def test_eval_output_over_its_input_is_refused_and_the_file_kept(tmp_path, capsys, target):
    run = _run(tmp_path, steps=1)
    ckpt = run / "checkpoints" / "step_000001"
    data = tmp_path / "nqa.jsonl"
    data.write_text(
        json.dumps(
            {"id": "d0", "question": "who is the king ?", "passage": "the king had a son .", "answer": ["the king"]}
        )
        + "\n"
    )
    victim = data if target == "data file" else ckpt / "state.json"
    before = victim.read_bytes()
    rc, err = _cli(
        [
            "eval",
            str(ckpt),
            "--data_path",
            str(data),
            "--split",
            "train",
            "--n",
            "1",
            "--output",
            str(victim),
            "--no-progress",
        ],
        capsys,
    )
    assert rc == 2 and "--output" in err and len(err.splitlines()) == 1
    assert victim.read_bytes() == before


def test_overwrite_refuses_a_file_gcpo_did_not_write_and_deletes_nothing(tmp_path):
    run = _run(tmp_path, steps=1)
    mine = run / "rollouts" / "my_collected_data.jsonl"
    mine.write_text('{"x": 1}\n')
    before = _snapshot(run)
    with pytest.raises(ValueError, match=r"rollouts/my_collected_data.jsonl.*nothing was deleted"):
        make(tmp_path, "run", steps=1, overwrite=True).train()
    assert _snapshot(run) == before


def test_overwrite_still_replaces_gcpos_own_files(tmp_path):
    run = _run(tmp_path, steps=2)
    (run / "notes.txt").write_text("mine")  # beside the run's entries: never touched
    make(tmp_path, "run", steps=1, overwrite=True).train()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000001"]
    assert [json.loads(x)["step"] for x in (run / "log.jsonl").read_text().splitlines()] == [1]
    assert (run / "notes.txt").read_text() == "mine" and not (run / ".gcpo-replaced").exists()


def test_export_into_its_own_checkpoint_is_refused(tmp_path, capsys):
    run = _run(tmp_path, steps=1)
    ckpt = run / "checkpoints" / "step_000001"
    for out in (ckpt / "merged", run / "checkpoints" / "merged"):
        rc, err = _cli(["export", str(ckpt), str(out), "--no-check"], capsys)
        assert rc == 2 and ("inside" in err or "holds" in err) and not out.exists(), err


def test_a_failed_start_leaves_the_folder_as_found(tmp_path):
    from helpers.loop_setup import queries, word_reward

    from gcpo_train.loop.trainer import GCPOLoopTrainer

    def broken_prompt(row, tok, max_context_tokens, template=None):
        raise RuntimeError("prompt template bug")

    run = _run(tmp_path, steps=1)
    before = _snapshot(run)
    cfg = TrainConfig(
        model="tiny:llama",
        modulator="none",
        group_size=4,
        queries_per_step=2,
        steps=2,
        max_new_tokens=4,
        output_dir=str(run),
        progress=False,
        device="cpu",
        judge="lexical",
        overwrite=True,
    )
    with pytest.raises(RuntimeError, match="prompt template bug"):
        GCPOLoopTrainer(cfg, queries=queries(), reward_fn=word_reward, prompt_fn=broken_prompt).train()
    assert _snapshot(run) == before  # the replaced run is back, nothing of the failed one is left
    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError):
        GCPOLoopTrainer(
            TrainConfig(**{**cfg.to_dict(), "output_dir": str(fresh), "overwrite": False}),
            queries=queries(),
            reward_fn=word_reward,
            prompt_fn=broken_prompt,
        ).train()
    assert not fresh.exists()
    make(tmp_path, "fresh", steps=1).train()  # the corrected rerun needs no --overwrite


def test_resume_after_a_kill_before_the_first_checkpoint_restarts(tmp_path):
    run = _run(tmp_path, steps=2)
    import shutil

    shutil.rmtree(run / "checkpoints")  # what SIGKILL before the first checkpoint completed leaves
    with pytest.warns(UserWarning, match="no checkpoint"):
        tr = make(tmp_path, "run", steps=2, checkpoint_every=1, resume=True)
        tr.train()
    assert tr.start_step == 1
    assert [json.loads(x)["step"] for x in (run / "log.jsonl").read_text().splitlines()] == [1, 2]


# ----------------------------------------------------------------------------- 2. one run per folder
def _train_argv(data, out, steps, *extra):
    return [
        sys.executable,
        "-m",
        "gcpo_train",
        "train",
        "--model",
        "tiny:llama",
        "--dataset",
        "narrativeqa",
        "--data_path",
        str(data),
        "--split_from_single",
        "--train_frac",
        "0.5",
        "--modulator",
        "none",
        "--group_size",
        "2",
        "--queries_per_step",
        "1",
        "--steps",
        str(steps),
        "--max_new_tokens",
        "3",
        "--max_context_tokens",
        "8",
        "--output_dir",
        str(out),
        "--progress",
        "false",
        "--device",
        "cpu",
        "--checkpoint_every",
        "0",
        "--judge",
        "lexical",
        *extra,
    ]


@pytest.mark.slow
def test_a_second_run_in_a_busy_folder_is_refused_naming_the_pid(tmp_path):
    import signal

    data = tmp_path / "nqa.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "question": f"who is {w} ?", "passage": f"the {w} .", "answer": [w]}) + "\n"
            for i, w in enumerate("abcdef")
        )
    )
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(_train_argv(data, out, 100000), env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (out / "log.jsonl").exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        for extra in (["--overwrite"], ["--resume"]):
            second = subprocess.run(
                _train_argv(data, out, 100000, *extra), env=env, capture_output=True, text=True, timeout=120
            )
            lines = [x for x in second.stderr.splitlines() if "error:" in x]
            assert second.returncode == 2 and len(lines) == 1, second.stderr
            assert f"PID {first.pid}" in lines[0] and "in use" in lines[0]
        assert first.poll() is None  # still training
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=120)
    rows = (out / "log.jsonl").read_text().splitlines()
    steps = [json.loads(x)["step"] for x in rows if x.strip()][: len(rows) - 1]  # the last may be partial
    assert steps[0] == 1 and steps == list(range(1, len(steps) + 1))  # the first run is unharmed: each step once


def test_trl_backend_follows_the_run_folder_rules(tmp_path):
    from gcpo_train.trl.backend import gcpo_config_from, run

    pytest.importorskip("trl")
    folder = _run(tmp_path, steps=1)
    before = _snapshot(folder)
    cfg = TrainConfig(
        model="tiny:llama",
        backend="trl",
        modulator="none",
        output_dir=str(folder),
        steps=1,
        group_size=2,
        queries_per_step=1,
        device="cpu",
        save_total_limit=2,
        judge="lexical",
    )
    with pytest.raises(ValueError, match="already holds a run"):
        run(cfg)
    assert _snapshot(folder) == before
    assert gcpo_config_from(cfg).save_total_limit == 2


# ----------------------------------------------------------------------------- 5. numbers refused
def test_a_diverged_run_stops_naming_the_step_and_keeps_the_last_finite_checkpoint(tmp_path):
    from gcpo_train.runfiles.checkpoint import DivergedRun, latest_checkpoint, safe_load

    tr = make(tmp_path, "run", steps=8, checkpoint_every=1, learning_rate=1e6, max_grad_norm=0.0, beta=0.0)
    with pytest.raises(DivergedRun, match=r"step \d+: the update made"):
        tr.train()
    latest = latest_checkpoint(tmp_path / "run")
    if latest is not None:
        assert all(bool(torch.isfinite(t).all()) for t in safe_load(latest / "trainable.pt").values())


def _poison(ckpt: Path, how: str) -> None:
    weights = torch.load(ckpt / "trainable.pt", weights_only=True)
    if how == "nan":
        weights = {k: torch.full_like(v, float("nan")) for k, v in weights.items()}
    elif how == "empty":
        weights = {}
    else:  # partial
        weights = dict(list(weights.items())[: len(weights) // 2])
    torch.save(weights, ckpt / "trainable.pt")


@pytest.mark.parametrize("how", ["nan", "empty", "partial"])
def test_resume_skips_a_nan_empty_or_partial_trainable_pt(tmp_path, how):
    run = _run(tmp_path, steps=2)
    _poison(run / "checkpoints" / "step_000002", how)
    with pytest.warns(UserWarning, match="skipping checkpoint step_000002"):
        tr = make(tmp_path, "run", steps=3, checkpoint_every=1, resume=True)
        tr.train()
    assert tr.resumed_from.endswith("step_000001")


def test_export_of_an_all_nan_checkpoint_is_refused(tmp_path, capsys):
    run = _run(tmp_path, steps=1)
    ckpt = run / "checkpoints" / "step_000001"
    _poison(ckpt, "nan")
    rc, err = _cli(["export", str(ckpt), str(tmp_path / "out")], capsys)
    assert rc == 2 and "NaN" in err and not (tmp_path / "out").exists()


def test_eval_n_below_one_is_refused(tmp_path, capsys):
    run = _run(tmp_path, steps=1)
    data = tmp_path / "nqa.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {"id": f"d{i}", "question": "who is the king ?", "passage": "the king .", "answer": ["the king"]}
            )
            + "\n"
            for i in range(3)
        )
    )
    out = tmp_path / "eval.json"
    rc, err = _cli(
        [
            "eval",
            str(run / "checkpoints" / "step_000001"),
            "--data_path",
            str(data),
            "--split",
            "train",
            "--n",
            "-2",
            "--output",
            str(out),
            "--no-progress",
        ],
        capsys,
    )
    assert rc == 2 and "--n" in err and ">= 1" in err and not out.exists()


def test_disk_full_during_a_checkpoint_is_one_line_and_leaves_no_tmp(tmp_path, monkeypatch, capsys):
    import errno

    import gcpo_train.runfiles.checkpoint as ckpt

    real = torch.save

    def full(obj, path, *a, **k):
        if str(path).endswith("optimizer.pt"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, path, *a, **k)

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError, match="checkpoint step_000001 not written"):
        make(tmp_path, "run", steps=1, checkpoint_every=1).train()
    assert not list((tmp_path / "run" / "checkpoints").glob("*tmp"))
    assert ckpt.latest_checkpoint(tmp_path / "run") is None


def test_a_killed_checkpoints_temporary_folder_is_cleared_by_the_next(tmp_path):
    """Checkpoints are written into a fresh mkdtemp folder; one left by a killed run is removed
    when the run (holding its folder's lock) writes its next checkpoint."""
    run = _run(tmp_path, steps=1)
    stale = run / "checkpoints" / ".step_000002.killed.gcpo-tmp"
    stale.mkdir()
    (stale / "trainable.pt").write_bytes(b"half")
    make(tmp_path, "run", steps=2, checkpoint_every=1, resume=True).train()
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["step_000001", "step_000002"]


# ----------------------------------------------------------------------------- a checkpoint's config
def test_an_unknown_key_in_a_checkpoints_config_json_is_one_line(tmp_path, capsys):
    run = _run(tmp_path, steps=1)
    ckpt = run / "checkpoints" / "step_000001"
    saved = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**saved, "future_knob": 1}))
    rc, err = _cli(["export", str(ckpt), str(tmp_path / "out"), "--no-check"], capsys)
    assert rc == 2 and "future_knob" in err and len(err.splitlines()) == 1


def test_resume_with_fewer_steps_than_done_is_refused_and_the_record_kept(tmp_path):
    """`--resume --steps 1` on a 3-step run: nothing to train, so nothing of the run is
    rewritten (its run.json once recorded steps 1)."""
    run = _run(tmp_path, steps=3)
    before = _snapshot(run)
    for steps in (1, 3):
        with pytest.raises(ValueError, match=f"already reached step 3 .* steps is {steps}.*greater than 3"):
            make(tmp_path, "run", steps=steps, checkpoint_every=1, resume=True).train()
        assert _snapshot(run) == before


@pytest.mark.parametrize("modulator", ["bot_rd", "rd:shuffled"])
def test_an_out_of_range_reward_in_training_names_its_query_and_step(tmp_path, modulator):
    """The loop's error said "reward 5.0 at index (3,)": a position in a group's array. Now it
    leads with the query id and the step, and names the rollout."""
    from helpers.embedders import HashEmbedder
    from helpers.loop_setup import loop_config, queries

    from gcpo_train.loop.trainer import GCPOLoopTrainer

    def five_on_q1(task, completion, references):
        return 5.0 if references == ["bad"] else 1.0

    qs = queries()
    qs["references"] = [["bad"] if q == "q1" else refs for q, refs in zip(qs["query_id"], qs["references"])]
    cfg = TrainConfig(**loop_config(tmp_path, modulator=modulator, queries_per_step=6, steps=1))
    trainer = GCPOLoopTrainer(cfg, queries=qs, reward_fn=five_on_q1, embedder=HashEmbedder())
    named = r"query 'q1' at step 1: reward 5 of rollout 0 lies outside the declared range"
    with pytest.raises(ValueError, match=named):
        trainer.train()


def test_a_reward_function_that_returns_a_boolean_stops_the_run_naming_it(tmp_path):
    """float(True) made a success flag a reward of 1.0 without a word; booleans are refused on
    every other reward path (dispersion.reward_array)."""
    from helpers.embedders import HashEmbedder
    from helpers.loop_setup import loop_config, queries

    from gcpo_train.loop.trainer import GCPOLoopTrainer

    def flag(task, completion, references):
        return completion.strip() != ""

    cfg = TrainConfig(**loop_config(tmp_path, modulator="none", steps=1))
    trainer = GCPOLoopTrainer(cfg, queries=queries(), reward_fn=flag, embedder=HashEmbedder())
    with pytest.raises(TypeError, match=r"returned (True|False) for query .* rollout 0: rewards are numbers"):
        trainer.train()
