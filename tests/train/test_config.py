"""TrainConfig loading/validation and the train/eval CLI (tiny model, local data)."""

import dataclasses
import json

import pytest

from gcpo_train.config import TrainConfig, load_config, parse_overrides


def test_every_field_has_help():
    for f in dataclasses.fields(TrainConfig):
        assert f.metadata.get("help"), f.name


APPENDIX_E = ("Qwen/Qwen2.5-1.5B-Instruct", 2000, 5e-5, 0.002, 16, 0.9, 0.6)  # the paper's protocol


def _protocol(c):
    return (c.model, c.steps, c.learning_rate, c.beta, c.group_size, c.temperature, c.alpha_base)


def test_defaults_follow_appendix_e():
    c = TrainConfig()
    assert _protocol(c) == APPENDIX_E
    assert (c.modulator, c.clip_epsilon, c.num_iterations, c.nli_threshold) == ("bot_rd", 0.2, 1, 0.35)
    assert TrainConfig(dataset="math500").full_completion and not c.full_completion
    assert not TrainConfig(dataset="math500", use_full_completion=False).full_completion


def test_yaml_then_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("modulator: cd\ngroup_size: 8\nlearning_rate: 1.0e-4\n")
    c = load_config(p, parse_overrides(["group_size=4", "use_lora=false", "lora_target_modules=[q_proj]"]))
    assert (c.modulator, c.group_size, c.learning_rate, c.use_lora, c.lora_target_modules) == (
        "cd",
        4,
        1e-4,
        False,
        ["q_proj"],
    )


@pytest.mark.parametrize(
    "text,match",
    [
        ("learning_rat: 1.0\n", r"unknown config key 'learning_rat'.*did you mean learning_rate"),
        ("modulator: entropy\n", r"modulator must be one of .*bot_rd:shuffled.*bot_rd:deranged.*, got 'entropy'"),
        ("dataset: squad\n", r"dataset must be one of narrativeqa.*got 'squad'"),
        ("group_size: 1\n", r"group_size must be >= 2"),
        ("loss_aggregation: mean\n", r"loss_aggregation must be one of"),
        ("r_min: 2\nr_max: 1\n", r"r_max"),
    ],
)
def test_config_errors(tmp_path, text, match):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_config(p)


def test_config_hash_ignores_run_keys_only():
    a = TrainConfig()
    assert a.config_hash() == TrainConfig(steps=5, output_dir="x", resume=True).config_hash()
    assert a.config_hash() != TrainConfig(beta=0.01).config_hash()


def test_cli_unknown_flag_names_close_match(capsys):
    from gcpo_analysis.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--learning_rat", "1e-4"])
    assert "did you mean --learning_rate" in capsys.readouterr().err


def test_vllm_backend_is_refused_not_faked():
    pytest.importorskip("torch")
    from gcpo_train.loop.trainer import GCPOLoopTrainer

    with pytest.raises(NotImplementedError, match="vllm"):
        GCPOLoopTrainer(TrainConfig(backend="vllm", model="tiny:llama"))


def test_cli_trains_two_steps_then_evaluates(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from gcpo_analysis.cli import main

    data = tmp_path / "nqa.jsonl"
    recs = [
        {
            "id": f"d{i}",
            "question": f"who is the {w} ?",
            "passage": f"the {w} had a son . the ship was in the city .",
            "answer": [f"the {w}"],
        }
        for i, w in enumerate(["king", "queen", "man", "woman", "father", "mother"])
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "run"
    main(
        [
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
            "rd",
            "--group_size",
            "3",
            "--queries_per_step",
            "2",
            "--steps",
            "2",
            "--max_new_tokens",
            "5",
            "--max_context_tokens",
            "12",
            "--output_dir",
            str(out),
            "--progress",
            "false",
            "--device",
            "cpu",
            "--checkpoint_every",
            "1",
        ]
    )
    rows = [json.loads(line) for line in open(out / "log.jsonl")]
    assert [r["step"] for r in rows] == [1, 2]
    assert {"rd", "w_rd", "reward_mean", "kl"} <= set(rows[0])
    assert rows[0]["kl"] == 0.0
    assert (out / "rollouts" / "step_000002.parquet").exists()
    ck = out / "checkpoints" / "step_000002"
    assert (ck / "adapter").is_dir() and json.loads((ck / "state.json").read_text())["data_position"] == 4
    res = tmp_path / "eval.json"
    main(
        [
            "eval",
            str(ck),
            "--data_path",
            str(data),
            "--split",
            "test",
            "--n",
            "2",
            "--output",
            str(res),
            "--no_progress",
        ]
    )
    metrics = json.loads(res.read_text())
    assert metrics["n"] == 2 and {"F1", "BLEU", "Acc", "mean_reward"} <= set(metrics["metrics"])


def test_generated_configs_load_and_match_the_table():
    import runpy
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs"
    mod = runpy.run_path(str(root / "make_configs.py"))
    for bench in mod["BENCHMARKS"]:
        for method, modulator in mod["METHODS"].items():
            c = load_config(root / bench / f"{method}.yaml")
            assert (c.dataset, c.modulator, c.group_size, c.beta) == (bench, modulator, 16, 0.002)
            assert c.full_completion == (bench in ("math500", "olympiadbench"))
    smoke = load_config(root / "cpu_smoke.yaml")
    assert (smoke.model, smoke.group_size, smoke.queries_per_step, smoke.lora_r) == ("packaged", 4, 2, 8)


def test_compare_configs_are_generated_load_and_hold_the_paper_protocol():
    import runpy
    from pathlib import Path

    import yaml

    from gcpo_train.compare.run import Comparison
    from gcpo_train.compare.settings import load_compare_config

    root = Path(__file__).resolve().parents[2] / "configs"
    mod = runpy.run_path(str(root / "make_configs.py"))
    files = sorted((root / "compare").glob("*.yaml"))
    assert [f.stem for f in files] == sorted(mod["BENCHMARKS"])  # one per benchmark, nothing stale
    for path in files:
        text = yaml.safe_load(path.read_text())
        assert text == mod["build_compare"](path.stem)  # the committed file is what make_configs writes
        c, settings = load_compare_config(path)
        assert _protocol(c) == APPENDIX_E
        math = path.stem in ("math500", "olympiadbench")
        assert (c.dataset, c.backend, c.full_completion, c.gradient_checkpointing) == (path.stem, "trl", math, math)
        assert settings["modulators"] == ["none", "se", "kle", "care", "cd_rd", "bot_rd"]
        assert settings["seeds"] == [0, 1, 2] and settings["eval_every"] == 500 and settings["eval_n"] == 500
        Comparison(c, "unused", settings["modulators"], settings["seeds"])  # every arm validates under TRL
