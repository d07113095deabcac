"""gcpo_train.trl: GCPO inside TRL's GRPOTrainer, on a tiny random model (no network)."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

trl = pytest.importorskip("trl")
pytest.importorskip("datasets")

from helpers.embedders import HashEmbedder  # noqa: E402
from helpers.launch import accelerate_two_processes  # noqa: E402
from helpers.trl_setup import config_kwargs, dataset, recording_advantages, word_reward  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from gcpo_analysis.measures.clustering import greedy_nli_clusters  # noqa: E402
from gcpo_analysis.measures.judges import make_judge  # noqa: E402
from gcpo_analysis.measures.modulators import GroupFeatures, modulate  # noqa: E402
from gcpo_train.modulation import GroupModulator  # noqa: E402
from gcpo_train.trl import GCPOConfig, GCPOTrainer, gcpo_config_fields, group_weights, modulation_settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def model_dir(tiny_model_dir):
    return str(tiny_model_dir)


@pytest.fixture()
def record(monkeypatch):
    """Record the advantages TRL computed (before any GCPO weighting), per generation batch."""
    seen = []
    monkeypatch.setattr(
        trl.GRPOTrainer,
        "_generate_and_score_completions",
        recording_advantages(trl.GRPOTrainer._generate_and_score_completions, seen),
    )
    return seen


def _run(cls, cfg_cls, model_dir, out, **kw):
    extra = {k: kw.pop(k) for k in list(kw) if k in ("embedder",)}
    args = cfg_cls(**config_kwargs(out, **kw))
    trainer = cls(
        model=model_dir,
        reward_funcs=word_reward,
        args=args,
        train_dataset=dataset(),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        **extra,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return trainer


def _logged(trainer):
    return [(h["loss"], h["grad_norm"]) for h in trainer.state.log_history if "loss" in h]


def _history(trainer):
    """Every logged number but the timings (loss, grad_norm, kl, rewards, clip ratios, entropy...)."""
    return [
        {k: v for k, v in h.items() if "time" not in k and "per_second" not in k} for h in trainer.state.log_history
    ]


@pytest.mark.slow
@pytest.mark.trl
@pytest.mark.parametrize("bf16", [False, True])
def test_modulator_none_is_exactly_trl(model_dir, tmp_path, record, bf16):
    # beta > 0 (reference pass), num_iterations = 2 (old-policy pass), 3 steps, fp32 and bf16 autocast
    kw = dict(beta=0.04, num_iterations=2, max_steps=3, bf16=bf16)
    base = _run(trl.GRPOTrainer, trl.GRPOConfig, model_dir, tmp_path / "trl", **kw)
    trl_adv = [a.clone() for a in record]
    record.clear()
    # TRL's own log-prob pass: bit-identical (share_prompt's rounding is tested in test_trl_shared_prompt.py)
    ours = _run(GCPOTrainer, GCPOConfig, model_dir, tmp_path / "gcpo", modulator="none", share_prompt=False, **kw)
    assert len(_logged(base)) == 3 and _logged(base) == _logged(ours)
    assert any(h["kl"] > 0 for h in base.state.log_history if "kl" in h)  # step 1: policy = reference
    theirs = _history(base)
    assert [{k: v for k, v in h.items() if not k.startswith("gcpo/")} for h in _history(ours)] == theirs
    assert len(trl_adv) == len(record) == 2  # a generation batch every num_iterations steps
    for a, b in zip(trl_adv, record):
        assert (a == b).all()
    assert np.all(ours.gcpo_last["weights"] == 1.0)


@pytest.mark.slow
@pytest.mark.trl
def test_bot_advantages_are_trl_advantages_times_the_modulate_weights(model_dir, tmp_path, record, monkeypatch):
    final = []
    real = GCPOTrainer._generate_and_score_completions

    def keep(self, inputs):
        out = real(self, inputs)
        final.append((out["advantages"].clone(), dict(self.gcpo_last)))
        return out

    monkeypatch.setattr(GCPOTrainer, "_generate_and_score_completions", keep)
    trainer = _run(
        GCPOTrainer,
        GCPOConfig,
        model_dir,
        tmp_path / "bot",
        modulator="bot",
        judge="lexical",
        embedder=HashEmbedder(),
        log_group_measures=True,
    )
    judge, emb = make_judge("lexical"), HashEmbedder()
    changed = 0
    for trl_adv, (adv, last) in zip(record, final):
        G = 4
        expected = []
        for k in range(len(last["texts"]) // G):
            texts = last["texts"][k * G : (k + 1) * G]
            group = GroupFeatures(
                rewards=np.asarray(last["rewards"][k * G : (k + 1) * G]),
                embeddings=emb.encode(texts).astype(np.float64),
                clusters=greedy_nli_clusters(texts, judge, threshold=0.35),
            )
            _, info = modulate("bot", group, alpha_base=0.6, r_min=0.0, r_max=2.0)
            expected.append(info["w_bot"])
        w = np.repeat(expected, G)[last["local"]]
        np.testing.assert_allclose(adv.numpy(), trl_adv.numpy() * w, rtol=1e-6, atol=1e-7)
        changed += int((np.abs(np.asarray(expected) - 1) > 1e-9).sum())
    assert changed > 0  # the weights did something
    logged = [h for h in trainer.state.log_history if "loss" in h][0]
    assert 0 < logged["gcpo/w_bot"] <= 1 and "gcpo/bot" in logged and "gcpo/weight_mean" in logged
    frames = sorted((tmp_path / "bot" / "gcpo_groups").glob("train_step_*.parquet"))
    assert len(frames) == 2


@pytest.mark.parametrize(
    "name, reason", [("eg_spo", "token entropy"), ("r2vpo", "policy ratio"), ("empo", "replaces the reward")]
)
def test_per_rollout_modulators_are_refused_at_construction(name, reason, tmp_path):
    with pytest.raises(ValueError, match=f"modulator '{name}' cannot run inside TRL.*{reason}"):
        GCPOConfig(**config_kwargs(tmp_path, modulator=name))
    with pytest.raises(ValueError, match="alpha_base"):
        GCPOConfig(**config_kwargs(tmp_path, alpha_base=-1.0))


def test_every_gcpo_field_has_help():
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(GCPOConfig)}
    added = gcpo_config_fields()
    assert set(added) == {
        "modulator",
        "alpha_base",
        "q_hawkeye_alpha",
        "r_min",
        "r_max",
        "reward_range",
        "judge",
        "embedder",
        "nli_threshold",
        "use_full_completion",
        "modulator_params",
        "log_group_measures",
        "share_prompt",
    }
    assert all(len(fields[n].metadata.get("help", "")) > 20 for n in added)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.trl
def test_two_processes_split_groups_and_agree_with_one(model_dir, tmp_path):
    out = tmp_path / "two"
    out.mkdir()
    accelerate_two_processes(ROOT / "tests" / "helpers" / "trl_two_process.py", model_dir, str(out), timeout=600)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["world"] == 2
    # both ranks gathered the same batch and computed the same weights
    assert ranks[0]["texts"] == ranks[1]["texts"] and ranks[0]["weights"] == ranks[1]["weights"]
    G, n_local = 4, ranks[0]["local"][1] - ranks[0]["local"][0]
    assert n_local < G  # a group's completions live on both processes
    # the same texts and rewards scored in one process give the same weights
    one_process = GCPOConfig(**config_kwargs(tmp_path / "one", modulator="bot_rd", judge="lexical"))
    group_modulator = GroupModulator(
        modulation_settings(one_process), embedder=HashEmbedder(), judge=make_judge("lexical")
    )
    weights, _ = group_weights(
        ranks[0]["texts"], np.asarray(ranks[0]["rewards"]), G, group_modulator=group_modulator, modulator="bot_rd"
    )
    np.testing.assert_allclose(weights, ranks[0]["weights"], rtol=1e-12)
    for r in ranks:
        lo, hi = r["local"]
        np.testing.assert_allclose(r["after"], np.asarray(r["before"]) * np.repeat(weights, G)[lo:hi], rtol=1e-6)


@pytest.mark.slow
@pytest.mark.trl
def test_gcpo_train_backend_trl_runs_a_shipped_config(tmp_path, capsys):
    from gcpo_analysis.cli import main

    rc = main(
        [
            "train",
            "--config",
            str(ROOT / "configs" / "cpu_smoke.yaml"),
            "--backend",
            "trl",
            "--model",
            "tiny:llama",
            "--steps",
            "1",
            "--group_size",
            "4",
            "--queries_per_step",
            "2",
            "--max_new_tokens",
            "4",
            "--judge",
            "lexical",
            "--modulator",
            "cd_rd",
            "--checkpoint_every",
            "0",
            "--n_train",
            "8",
            "--output_dir",
            str(tmp_path / "run"),
            "--progress",
            "false",
        ]
    )
    assert rc == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "loss" in last and np.isfinite(last["loss"])


@pytest.mark.parametrize("name", ["ddp", "deepspeed_zero2", "deepspeed_zero3", "fsdp"])
def test_accelerate_configs_parse_and_name_an_existing_training_config(name):
    import re

    import yaml

    path = ROOT / "configs" / "accelerate" / f"{name}.yaml"
    cfg = yaml.safe_load(path.read_text())
    assert cfg["distributed_type"] in ("MULTI_GPU", "DEEPSPEED", "FSDP") and cfg["num_processes"] >= 1
    used = re.findall(r"--config (configs/\S+\.yaml)", path.read_text())
    assert used and all((ROOT / u).exists() for u in used)


def test_math_judge_under_trl_clusters_final_answers(tmp_path):
    cfg = GCPOConfig(**config_kwargs(tmp_path / "math", modulator="bot", judge="math"))
    group_modulator = GroupModulator(modulation_settings(cfg), embedder=HashEmbedder(), judge=make_judge("math"))
    texts = [
        "2 + 7 = 9. The answer is \\boxed{9}.",
        "Nine in all: \\boxed{9}",
        "I get \\boxed{10}",
        "So 4 + 5 = \\boxed{9.0}",
    ]
    _, infos = group_weights(texts, np.array([2.0, 2.0, 0.0, 2.0]), 4, group_modulator=group_modulator, modulator="bot")
    assert infos[0]["n_clusters"] == 2  # {9, 9, 9.0} and {10}; the derivations themselves all differ


def test_model_cards_name_gcpo_not_grpo():
    from trl import GRPOTrainer

    assert GCPOTrainer._name == "GCPO" and GRPOTrainer._name == "GRPO"
    assert set(GRPOTrainer._tag_names) < set(GCPOTrainer._tag_names) and "gcpo" in GCPOTrainer._tag_names
    assert "Why Semantic Entropy Fails" in GCPOTrainer._paper["title"]
    assert GCPOTrainer._paper["citation"].startswith("@article{") and "Zhang" in GCPOTrainer._paper["citation"]
