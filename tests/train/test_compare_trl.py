"""gcpo compare --backend trl: 2 arms x 2 seeds x 2 steps through TRL's GRPOTrainer on a tiny
random llama (held-out evaluations, records, common random numbers, resume after a kill,
finished runs never redone), and the refusals made before anything runs."""

import json

import numpy as np
import pandas as pd
import pytest

from gcpo_train.compare.run import Comparison
from gcpo_train.config import TrainConfig


def _config(tmp_path, **kw):
    from helpers.loop_setup import loop_config

    return TrainConfig(**{**loop_config(tmp_path, "unused"), "backend": "trl", "micro_batch_size": 16, **kw})


def test_arms_trl_cannot_run_are_refused_up_front_naming_them(tmp_path):
    with pytest.raises(
        ValueError, match=r"--backend trl cannot run the arm\(s\) 'eg_spo', 'r2vpo' \('eg_spo': .*token"
    ):
        Comparison(_config(tmp_path), tmp_path / "cmp", ["none", "eg_spo", "r2vpo"], [0])
    assert not (tmp_path / "cmp").exists()


def test_trl_comparison_refuses_a_multi_process_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="without accelerate launch"):
        Comparison(_config(tmp_path), tmp_path / "cmp", ["none"], [0])


def _write(tmp_path, text):
    path = tmp_path / "cmp.yaml"
    path.write_text(text)
    return path


def test_compare_mapping_gives_the_flags_defaults_and_refuses_unknown_keys(tmp_path):
    from gcpo_train.compare.settings import COMPARE_DEFAULTS, load_compare_config

    cfg, settings = load_compare_config(
        _write(tmp_path, "backend: trl\nsteps: 3\ncompare:\n  modulators: [none, rd]\n  seeds: '4,5'\n"), {"steps": 7}
    )
    assert (cfg.backend, cfg.steps) == ("trl", 7)
    assert settings == {**COMPARE_DEFAULTS, "modulators": ["none", "rd"], "seeds": [4, 5]}
    assert load_compare_config(_write(tmp_path, "steps: 3\n"))[1] == COMPARE_DEFAULTS
    with pytest.raises(ValueError, match="unknown key 'seed' in .*compare: mapping.*did you mean seeds"):
        load_compare_config(_write(tmp_path, "compare:\n  seed: [0]\n"))
    with pytest.raises(ValueError, match="'compare' must be a mapping"):
        load_compare_config(_write(tmp_path, "compare: [none]\n"))
    with pytest.raises(ValueError, match="compare.seeds: 'a' is not an integer seed"):
        load_compare_config(_write(tmp_path, "compare:\n  seeds: [a]\n"))
    with pytest.raises(ValueError, match="compare.eval_n must be an integer >= 1, got '500'"):
        load_compare_config(_write(tmp_path, "compare:\n  eval_n: '500'\n"))
    with pytest.raises(ValueError, match="compare.eval_every must be an integer >= 0, got None"):
        load_compare_config(_write(tmp_path, "compare:\n  eval_every: null\n"))
    with pytest.raises(ValueError, match="unknown config key 'stepz'"):
        load_compare_config(_write(tmp_path, "stepz: 3\n"))


def test_cli_backend_flag_reaches_the_arms_refusal(tmp_path, capsys):
    from gcpo_analysis.cli import main

    path = _write(tmp_path, "model: tiny:llama\ncompare:\n  modulators: [none, empo]\n")
    assert main(["compare", "--config", str(path), "--backend", "trl", "--output", str(tmp_path / "out2")]) != 0
    assert "--backend trl cannot run the arm(s) 'empo' ('empo': it replaces the reward" in capsys.readouterr().err
    assert not (tmp_path / "out2").exists()


def test_omega_of_a_trl_rollouts_frame_is_its_weight_column_tied_groups_left_out():
    from gcpo_train.compare.report import omega_per_group

    frame = pd.DataFrame(
        {
            "step": 1,
            "query_id": np.repeat(["a", "b", "c"], 3),
            "reward": [0.0, 1.0, 2.0, 1.0, 1.0, 1.0, 2.0, 0.0, 0.0],  # group b's rewards are all equal
            "weight": np.repeat([0.7, 0.5, 1.3], 3),
        }
    )
    np.testing.assert_array_equal(omega_per_group(frame), [0.7, 1.3])


def test_resume_picks_the_newest_complete_trl_checkpoint(tmp_path):
    from gcpo_train.compare.trl_arm import _latest_checkpoint

    assert _latest_checkpoint(tmp_path / "absent") == (None, None)
    for step in (2, 9, 10, 11):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if step != 11:  # checkpoint-11: killed while saving
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    with pytest.warns(UserWarning, match="checkpoint-11 has no trainer_state.json"):
        state, path = _latest_checkpoint(tmp_path)
    assert state == {"step": 10} and path == str(tmp_path / "checkpoint-10")  # 10 after 9, by number


# ---------------------------------------------------------------------- end to end (tiny model)
pytest.importorskip("trl")
pytest.importorskip("peft")


def _comparison(tmp_path, seeds=(0, 1), arms=("none", "bot_rd")):
    from helpers.loop_setup import comparison

    return comparison(_config(tmp_path, checkpoint_every=1), tmp_path / "cmp", arms, seeds)


@pytest.mark.slow
@pytest.mark.trl
def test_trl_compare_end_to_end_crn_resume_and_skip(tmp_path, monkeypatch):
    from gcpo_train.trl import GCPOTrainer

    real = GCPOTrainer._generate_and_score_completions

    def dies_in_bot_rd(self, inputs):  # a kill while bot_rd (seed 0) generates its second step
        if self.args.modulator == "bot_rd" and self.state.global_step == 1:
            raise KeyboardInterrupt
        return real(self, inputs)

    monkeypatch.setattr(GCPOTrainer, "_generate_and_score_completions", dies_in_bot_rd)
    with pytest.raises(KeyboardInterrupt):
        _comparison(tmp_path).run(progress=False)
    out = tmp_path / "cmp"
    runs = out / "runs"
    finished, killed = runs / "none" / "seed_0", runs / "bot_rd" / "seed_0"
    assert (finished / "done.json").exists() and not (killed / "done.json").exists()
    assert (killed / "checkpoint-1").is_dir() and [json.loads(x)["step"] for x in open(killed / "log.jsonl")] == [1]
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (finished / "log.jsonl", finished / "run.json")}

    monkeypatch.setattr(GCPOTrainer, "_generate_and_score_completions", real)
    summary = _comparison(tmp_path).run(progress=False)
    # the finished run was not redone; the killed one resumed from its checkpoint, not from step 1
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in before} == before
    assert json.loads((killed / "run.json").read_text())["resumed_from"].endswith("checkpoint-1")
    assert [json.loads(x)["step"] for x in open(killed / "log.jsonl")] == [1, 2]

    spec = json.loads((out / "compare.json").read_text())
    assert spec["backend"] == "trl" and "not paired draws" in spec["common_random_numbers"]["later_steps"]
    res = pd.read_parquet(out / "results.parquet")
    assert list(res.columns) == ["arm", "seed", "step", "query_id", "score"]
    got = res.groupby(["arm", "seed"])["step"].apply(lambda s: sorted(set(s))).to_dict()
    assert got == {("base", 0): [0], ("base", 1): [0], **{(a, s): [1, 2] for a in ("none", "bot_rd") for s in (0, 1)}}
    assert (res.groupby(["arm", "seed", "step"]).size() == 4).all() and set(res["query_id"]) == {
        f"hq{i}" for i in range(4)
    }
    for arm in ("none", "bot_rd"):  # the same greedy decoding as the base policy's evaluation
        ev = json.loads((runs / arm / "seed_1" / "eval" / "step_000002.json").read_text())
        assert (ev["decoding"], ev["n"], ev["max_new_tokens"]) == ("greedy", 4, 6)

    # common random numbers: the same seed draws the same queries and first-step samples in every arm
    first = {
        (a, s): pd.read_parquet(runs / a / f"seed_{s}" / "rollouts" / "step_000001.parquet")
        for a in ("none", "bot_rd")
        for s in (0, 1)
    }
    for s in (0, 1):
        assert list(first["none", s]["completion"]) == list(first["bot_rd", s]["completion"])
        assert list(first["none", s]["query_id"]) == list(first["bot_rd", s]["query_id"])
        assert list(first["none", s]["reward"]) == list(first["bot_rd", s]["reward"])
    assert list(first["none", 0]["completion"]) != list(first["none", 1]["completion"])
    assert set(first["none", 0]["query_id"]) <= {f"q{i}" for i in range(6)}  # training queries only
    assert (first["none", 0]["weight"] == 1.0).all() and (first["bot_rd", 0]["weight"] != 1.0).any()

    table = summary["table"].set_index("arm")
    assert table.loc["bot_rd", "paired_seeds"] == 2 and np.isfinite(table.loc["bot_rd", "delta"])
    assert table.loc["none", "omega_p5"] == pytest.approx(1.0) == table.loc["none", "omega_p95"]
    # ω: the weights GCPOTrainer applied, one per group, of the groups whose rewards differ
    rolled = pd.concat(
        pd.read_parquet(p).assign(seed=p.parent.parent.name) for p in runs.glob("bot_rd/seed_*/rollouts/step_*.parquet")
    )
    assert len(rolled) == 2 * 2 * 8  # seeds x steps x (2 queries x G = 4)
    groups = [g for _, g in rolled.groupby(["seed", "step", "query_id"])]
    assert all(g["weight"].nunique() == 1 for g in groups)
    omega = [g["weight"].iloc[0] for g in groups if g["reward"].nunique() > 1]
    low, high = np.quantile(omega, [0.05, 0.95])
    assert (table.loc["bot_rd", "omega_p5"], table.loc["bot_rd", "omega_p95"]) == pytest.approx((low, high))
    assert high != pytest.approx(1.0)
    assert "Δ vs none" in (out / "summary.md").read_text() and (out / "figures" / "compare.png").stat().st_size > 0

    # killed after its last checkpoint, before its last evaluation: evaluated again, not retrained
    run = runs / "none" / "seed_1"
    log = (run / "log.jsonl").read_bytes()
    final = run / "eval" / "step_000002.predictions.parquet"
    scores = pd.read_parquet(final)["score"].tolist()
    for p in (run / "done.json", final, final.with_name("step_000002.json")):
        p.unlink()
    _comparison(tmp_path).run(progress=False)
    assert (run / "done.json").exists() and (run / "log.jsonl").read_bytes() == log
    assert pd.read_parquet(final)["score"].tolist() == scores  # the trained policy, restored from checkpoint-2


@pytest.mark.slow
@pytest.mark.trl
def test_shipped_compare_config_runs_through_the_cli_on_a_tiny_model(tmp_path, capsys):
    """configs/compare/narrativeqa.yaml (the packaged NarrativeQA data) as the paper's protocol
    runs it, shrunk to a tiny random model, 2 arms x 1 seed x 2 steps; a rerun skips both."""
    from pathlib import Path

    from gcpo_analysis.cli import main

    config = Path(__file__).resolve().parents[2] / "configs" / "compare" / "narrativeqa.yaml"
    out = tmp_path / "cmp"
    argv = ["compare", "--config", str(config), "--backend", "trl", "--modulators", "none,rd", "--seeds", "0"]
    argv += ["--eval_n", "3", "--output", str(out), "--no_progress", "--set", "model=tiny:llama", "dtype=float32"]
    argv += ["device=cpu", "steps=2", "group_size=4", "queries_per_step=2", "max_new_tokens=4", "n_train=8"]
    argv += ["max_context_tokens=24", "checkpoint_every=0"]
    assert main(argv) == 0
    assert "| rd | 1 | 2 |" in capsys.readouterr().out
    res = pd.read_parquet(out / "results.parquet")
    assert res.groupby(["arm", "step"]).size().to_dict() == {("base", 0): 3, ("none", 2): 3, ("rd", 2): 3}
    assert json.loads((out / "compare.json").read_text())["eval_every"] == 500  # the config's compare: mapping
    logs = {arm: (out / "runs" / arm / "seed_0" / "log.jsonl").stat().st_mtime_ns for arm in ("none", "rd")}
    assert main(argv) == 0  # finished runs are never redone
    assert {arm: (out / "runs" / arm / "seed_0" / "log.jsonl").stat().st_mtime_ns for arm in logs} == logs
