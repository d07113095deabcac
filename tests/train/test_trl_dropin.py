"""GCPOTrainer as a drop-in for TRL's GRPOTrainer, on a tiny random llama (no network):
beam search falls back from the shared prefill, named and recorded; ``args`` is optional with
TRL's naming; a ``generate`` patched on the model instance gets every call and is restored; the
reward range without stated bounds (declared, running, or refused when the trainer is built)."""

import logging
import math
import warnings
from unittest.mock import patch

import numpy as np
import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
pytest.importorskip("datasets")

from helpers.trl_setup import config_kwargs, dataset, word_reward  # noqa: E402
from transformers import AutoTokenizer, GenerationConfig  # noqa: E402

from gcpo_train.trl import GCPOConfig, GCPOTrainer  # noqa: E402
from gcpo_train.trl import shared_prompt as sp  # noqa: E402
from gcpo_train.trl.reward_range import RunningRange, declared_range, range_source  # noqa: E402

FAST = dict(gradient_checkpointing=False, disable_dropout=True, bf16=False, max_steps=1, beta=0.0)


@pytest.fixture()
def model_dir(tiny_model_dir):
    return str(tiny_model_dir)


def _trainer(model_dir, out, reward=word_reward, **kw):
    return GCPOTrainer(
        model=model_dir,
        reward_funcs=reward,
        args=GCPOConfig(**config_kwargs(out, **{**FAST, **kw})),
        train_dataset=dataset(),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )


def _train(trainer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return trainer


def _metric(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


# ----------------------------------------------------------------- generation settings


@pytest.mark.slow
@pytest.mark.trl
def test_beam_search_falls_back_from_the_shared_prefill_named_and_recorded(model_dir, tmp_path, caplog):
    # before: the B-row prefill cache met B x num_beams rows (RuntimeError: Expected size 3 but got size 6)
    trainer = _trainer(model_dir, tmp_path, modulator="none", generation_kwargs={"num_beams": 2})
    with caplog.at_level(logging.WARNING, logger="gcpo_train.trl.shared_prompt"):
        _train(trainer)
    assert _metric(trainer, "gcpo/shared_prefill") == [0.0]  # recorded in the logs
    (reason,) = [r for what, r in trainer.gcpo_prompt_fallbacks if what == "generation prefill"]
    assert "beam_sample" in reason and "num_beams=2" in reason  # and in the trainer's state
    assert any("beam_sample" in m for m in caplog.messages)  # named in a warning


@pytest.mark.parametrize(
    "settings, named",
    [
        (dict(do_sample=True, num_beams=2), "beam_sample"),
        (dict(do_sample=False, num_beams=3), "beam_search"),
        (dict(do_sample=True, num_return_sequences=2), "num_return_sequences=2"),
        (dict(do_sample=True, use_cache=False), "use_cache=False"),
        (dict(penalty_alpha=0.6, top_k=4), "contrastive_search"),
        (dict(prompt_lookup_num_tokens=3), "assisted_generation"),
    ],
)
def test_generation_settings_the_prefill_does_not_implement_are_named(settings, named):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = GenerationConfig(**settings)
    assert named in sp.generation_config_fallback(config)


def test_sampling_and_greedy_keep_the_shared_prefill():
    assert sp.generation_config_fallback(GenerationConfig(do_sample=True, top_k=0)) is None
    assert sp.generation_config_fallback(GenerationConfig(do_sample=False)) is None


# ----------------------------------------------------------------- args optional


@pytest.mark.slow
@pytest.mark.trl
def test_args_is_optional_and_named_as_trl_names_it(model_dir, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    post_init = trl.GRPOConfig.__post_init__

    def on_cpu(self):  # TRL's default bf16 is refused on a machine without a GPU unless use_cpu
        self.use_cpu = True
        post_init(self)

    monkeypatch.setattr(trl.GRPOConfig, "__post_init__", on_cpu)
    tok = AutoTokenizer.from_pretrained(model_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = trl.GRPOTrainer(
            model=model_dir, reward_funcs=word_reward, train_dataset=dataset(), processing_class=tok
        )

        def plain(completions, **kwargs):  # no reward_bounds: the default bot_rd needs a range
            return [float(len(c)) for c in completions]

        with caplog.at_level(logging.WARNING, logger="gcpo_train.trl"):
            ours = GCPOTrainer(model=model_dir, reward_funcs=plain, train_dataset=dataset(), processing_class=tok)
    assert isinstance(ours.args, GCPOConfig)
    assert str(theirs.args.output_dir).endswith("-GRPO")
    assert str(ours.args.output_dir) == str(theirs.args.output_dir)[: -len("GRPO")] + "GCPO"
    assert ours.args.reward_range == "running" and ours.gcpo_reward_range[0] == "running"
    assert any("reward_range='running'" in m for m in caplog.messages)


def test_args_of_another_type_is_still_refused(model_dir, tmp_path):
    with pytest.raises(TypeError, match="GCPOConfig"):
        GCPOTrainer(
            model=model_dir, reward_funcs=word_reward, args=trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True)
        )


# ----------------------------------------------------------------- a patched generate


@pytest.mark.slow
@pytest.mark.trl
def test_generate_patched_on_the_instance_gets_every_call_and_stays(model_dir, tmp_path):
    # before: the wrapper's `del target.generate` removed the patch after step 1 (1 of 3 calls),
    # and leaving the `with` raised AttributeError
    trainer = _trainer(model_dir, tmp_path, modulator="none", max_steps=3)
    model = trainer.model
    with patch.object(model, "generate", wraps=model.generate) as patched:
        _train(trainer)
        assert patched.call_count == 3
        assert model.generate is patched
    assert "generate" not in vars(model)  # patch.object's own restore ran: the class's method shows through
    assert _metric(trainer, "gcpo/shared_prefill") == [0.0, 0.0, 0.0]


def test_wrapped_generate_puts_back_what_the_instance_held():
    class Model:
        def generate(self, **kw):
            return "class"

    m = Model()
    mine = lambda **kw: "instance"  # noqa: E731
    m.generate = mine
    with sp.wrapped_generate(m):
        assert m.generate is not mine
    assert m.generate is mine
    bare = Model()
    with sp.wrapped_generate(bare):
        assert "generate" in vars(bare)
    assert "generate" not in vars(bare) and bare.generate() == "class"


# ----------------------------------------------------------------- the reward range


def _f(bounds):
    def f(completions, **kwargs):
        return [0.0] * len(completions)

    f.reward_bounds = bounds
    return f


def test_declared_range_combines_bounds_and_weights_by_hand():
    # 2 * [0, 1] + (-0.5) * [-1, 3] = [0, 2] + [-1.5, 0.5] = [-1.5, 2.5]
    assert declared_range([_f((0, 1)), _f((-1, 3))], [2.0, -0.5]) == (-1.5, 2.5)
    assert declared_range([_f((0, 1)), _f((-1, 3))], None) == (-1.0, 4.0)
    assert declared_range([_f((0, 1)), word_reward, "some/reward-model"][:2], None) == (0.0, 3.0)
    assert declared_range([_f((0, 1)), "some/reward-model"], None) is None
    with pytest.raises(ValueError, match="reward_bounds"):
        declared_range([_f((1, 1))], None)


def test_range_source_order_and_refusal_naming_the_options():
    funcs = ["org/reward-model"]
    assert range_source(None, 1.0, "declared", "bot_rd", funcs, None) == ("fixed", (0.0, 1.0))
    assert range_source(-3.0, None, "running", "rd", funcs, None) == ("fixed", (-3.0, 2.0))
    assert range_source(None, None, "running", "rd", funcs, None) == ("running", None)
    assert range_source(None, None, "declared", "bot", funcs, None) == ("unused", None)
    assert range_source(None, None, "declared", "rd", [_f((0, 5))], [0.5]) == ("declared", (0.0, 2.5))
    for name in ("rd", "cd_rd", "bot_rd", "q_hawkeye"):
        with pytest.raises(ValueError, match="reward_range='running'.*r_min and r_max.*reward_bounds"):
            range_source(None, None, "declared", name, funcs, None)


def test_running_range_is_the_min_and_max_seen_so_far():
    rr = RunningRange()
    assert rr.update([3.0, 3.0]) == (3.0, 4.0)  # all equal so far: width 1 (RD = 0 whatever the width)
    assert rr.update([np.nan, 54.0, -2.5]) == (-2.5, 54.0)
    assert rr.update([0.0, 1.0]) == (-2.5, 54.0)


@pytest.mark.trl
def test_a_range_modulator_without_bounds_is_refused_when_the_trainer_is_built(model_dir, tmp_path):
    def reward_model_like(completions, **kwargs):
        return [-3.0] * len(completions)

    with pytest.raises(ValueError, match="reward_model_like.*reward_range='running'"):
        _trainer(model_dir, tmp_path, reward=reward_model_like, modulator="rd")


def _length_reward(completions, **kwargs):
    """Unbounded, negative at first: a reward model's or length reward's scale."""
    return [float(len(c)) - 20.0 for c in completions]


@pytest.mark.slow
@pytest.mark.trl
def test_running_range_trains_unbounded_rewards_and_logs_the_range(model_dir, tmp_path):
    # before: [0, 2] refused the first step's rewards ("lies outside the declared range")
    trainer = _trainer(model_dir, tmp_path, reward=_length_reward, modulator="rd", reward_range="running", max_steps=2)
    seen = []
    real = trainer._group_weights_of_batch

    def recording(texts, rewards, G):
        out = real(texts, rewards, G)
        seen.append((np.array(rewards), trainer.group_modulator.config.r_min, trainer.group_modulator.config.r_max))
        return out

    trainer._group_weights_of_batch = recording
    _train(trainer)
    assert len(seen) == 2 and (np.concatenate([r for r, _, _ in seen]) < 0).any()
    for step, (_rewards, low, high) in enumerate(seen):
        every = np.concatenate([r for r, _, _ in seen[: step + 1]])
        assert (low, high) == (every.min(), every.max())  # the running range, this step's included
    assert _metric(trainer, "gcpo/r_min") == [seen[0][1], seen[1][1]]
    assert _metric(trainer, "gcpo/r_max") == [seen[0][2], seen[1][2]]
    # omega = 1 + alpha_G RD, RD = sum|r - mean| / RD_max, RD_max = (2/G) floor(G/2) ceil(G/2) (high - low)
    rewards, low, high = seen[-1]
    G = trainer.num_generations
    rd_max = 2.0 / G * (G // 2) * math.ceil(G / 2) * (high - low)
    alpha_g = trainer.args.alpha_base / math.log(G)
    groups = rewards.reshape(-1, G)
    expected = 1.0 + alpha_g * np.clip(np.abs(groups - groups.mean(1, keepdims=True)).sum(1) / rd_max, 0, 1)
    np.testing.assert_allclose(trainer.gcpo_last["weights"], expected, rtol=1e-12)


@pytest.mark.trl
def test_stated_range_is_kept_fixed(model_dir, tmp_path):
    trainer = _trainer(model_dir, tmp_path, reward=_length_reward, modulator="rd", r_max=1.0)
    assert trainer.gcpo_reward_range == ("fixed", (0.0, 1.0))
    assert (trainer.group_modulator.config.r_min, trainer.group_modulator.config.r_max) == (0.0, 1.0)


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan"), 1e-45])
def test_gcpo_config_refuses_a_temperature_no_sampler_can_use(temperature):
    """GRPOConfig takes any temperature and the run then fails at its first step inside torch;
    GCPOConfig refuses it at construction, naming the field (what gcpo's own config does)."""
    pytest.importorskip("trl")
    from gcpo_train.trl import GCPOConfig

    with pytest.raises(ValueError, match="temperature must be"):
        GCPOConfig(output_dir="unused", temperature=temperature, use_cpu=True)
