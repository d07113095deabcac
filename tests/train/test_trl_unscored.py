"""GCPOTrainer and TRL's "no reward" (a reward function returns None for a row it cannot score):
as GRPOTrainer, a rollout no function scored is NaN, not 0. RD, the running range and the other
measures read the scored rewards only; a group with no scored reward has omega = 1, counted in
the metric gcpo/groups_unscored. A reward_weights of the wrong length is refused with TRL's message."""

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
pytest.importorskip("datasets")

from helpers.embedders import HashEmbedder  # noqa: E402
from helpers.trl_setup import WORDS, config_kwargs, dataset, word_reward  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from gcpo_train.modulation import GroupModulator  # noqa: E402
from gcpo_train.trl import GCPOConfig, GCPOTrainer, group_weights, modulation_settings, scored_rewards  # noqa: E402

FAST = dict(
    gradient_checkpointing=False,
    disable_dropout=True,
    bf16=False,
    max_steps=2,
    beta=0.0,
    per_device_train_batch_size=16,
)
G = 4


def multi_task_reward(prompts, completions, **kwargs):
    """A reward in [5, 7] for the "king", "city" and "house" prompts; None (cannot score) for every
    "war" row and for the second rollout of each "house" group (TRL's multi-task convention)."""
    out = []
    for i, (p, c) in enumerate(zip(prompts, completions)):
        if "war" in p or ("house" in p and i % G == 1):
            out.append(None)
        else:
            words = c.split()
            out.append(5.0 + 2.0 * sum(t in WORDS for t in words) / max(1, len(words)))
    return out


multi_task_reward.reward_bounds = (5.0, 7.0)  # type: ignore[attr-defined]


@pytest.fixture()
def model_dir(tiny_model_dir):
    return str(tiny_model_dir)


def _train(cls, cfg_cls, model_dir, out, **kw):
    trainer = cls(
        model=model_dir,
        reward_funcs=multi_task_reward,
        args=cfg_cls(**config_kwargs(out, **{**FAST, **kw})),
        train_dataset=dataset(),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return trainer


def _recording(trainer):
    """Each step's gathered rewards as group_weights saw them, with the modulator's range."""
    seen = []
    real = trainer._group_weights_of_batch

    def recording(texts, rewards, G):
        out = real(texts, rewards, G)
        cfg = trainer.group_modulator.config
        seen.append((np.array(rewards), cfg.r_min, cfg.r_max, out[0]))
        return out

    trainer._group_weights_of_batch = recording
    return seen


def _rd_weight(scored, low, high, alpha_base):
    """omega = 1 + (alpha_base / ln n) RD by hand, RD = sum|r - mean| / RD_max(n) over the n scored rewards."""
    n = len(scored)
    if n < 2:
        return 1.0
    rd_max = 2.0 / n * (n // 2) * math.ceil(n / 2) * (high - low)
    return 1.0 + alpha_base / math.log(n) * min(1.0, np.abs(scored - scored.mean()).sum() / rd_max)


def test_scored_rewards_are_nan_only_where_no_function_scored():
    per_func = torch.tensor([[1.0, float("nan")], [float("nan"), float("nan")], [2.0, 3.0]])
    np.testing.assert_array_equal(scored_rewards(per_func, torch.tensor([1.0, 0.5])), [1.0, np.nan, 3.5])


def test_group_weights_read_only_scored_rewards():
    # before: NaN became r_min, a phantom reward that widened RD (5 of [5, 7] counted as a reward)
    settings = modulation_settings(
        GCPOConfig(**config_kwargs("unused", modulator="rd", r_min=5.0, r_max=7.0, report_to=[]))
    )
    rewards = np.array([7.0, np.nan, 6.0, 6.5, np.nan, np.nan, np.nan, np.nan, 5.0, 7.0, 5.0, 7.0])
    texts = [f"answer {i}" for i in range(12)]
    weights, rows = group_weights(texts, rewards, G, group_modulator=GroupModulator(settings), modulator="rd")
    alpha = settings.alpha_base
    expected = [_rd_weight(np.array([7.0, 6.0, 6.5]), 5, 7, alpha), 1.0, _rd_weight(rewards[8:], 5, 7, alpha)]
    np.testing.assert_allclose(weights, expected, rtol=1e-12)
    assert rows[0]["n_scored"] == 3 and rows[1] == {"unscored": 1.0} and "n_scored" not in rows[2]
    none_weights, none_rows = group_weights(
        texts, rewards, G, group_modulator=GroupModulator(settings), modulator="none"
    )
    assert (none_weights == 1).all() and none_rows[1] == {"unscored": 1.0}


def _check_weights(seen, alpha_base, running=False):
    unscored_seen = partial_seen = 0
    every = []
    for rewards, low, high, weights in seen:
        every.append(rewards[np.isfinite(rewards)])
        if running:  # the running range is the min and max of the scored rewards so far
            so_far = np.concatenate(every)
            assert (low, high) == (so_far.min(), so_far.max())
        else:
            assert (low, high) == (5.0, 7.0)
        for k, group in enumerate(rewards.reshape(-1, G)):
            scored = group[np.isfinite(group)]
            unscored_seen += scored.size == 0
            partial_seen += 0 < scored.size < G
            if scored.size == 0:
                assert weights[k] == 1.0
    assert unscored_seen and partial_seen  # the data exercised both cases


@pytest.mark.slow
@pytest.mark.trl
def test_rd_with_a_declared_range_trains_on_rewards_with_none(model_dir, tmp_path):
    # before: ValueError "reward 0 ... outside [5, 7]" (the unscored rows summed to 0)
    trainer = GCPOTrainer(
        model=model_dir,
        reward_funcs=multi_task_reward,
        args=GCPOConfig(**config_kwargs(tmp_path, **{**FAST, "modulator": "rd"})),
        train_dataset=dataset(),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    seen = _recording(trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert trainer.gcpo_reward_range == ("declared", (5.0, 7.0))
    _check_weights(seen, trainer.args.alpha_base)
    rewards, low, high, weights = seen[-1]
    expected = [_rd_weight(g[np.isfinite(g)], low, high, trainer.args.alpha_base) for g in rewards.reshape(-1, G)]
    np.testing.assert_allclose(weights, expected, rtol=1e-12)
    logged = [h["gcpo/groups_unscored"] for h in trainer.state.log_history if "gcpo/groups_unscored" in h]
    assert len(logged) == 2 and sum(logged) > 0


@pytest.mark.slow
@pytest.mark.trl
def test_running_range_and_bot_rd_ignore_unscored_rows(model_dir, tmp_path):
    # before: the running range started at the phantom 0 (r_min 0.0 with every scored reward >= 5)
    trainer = GCPOTrainer(
        model=model_dir,
        reward_funcs=multi_task_reward,
        args=GCPOConfig(
            **config_kwargs(tmp_path, **{**FAST, "modulator": "bot_rd", "judge": "lexical", "reward_range": "running"})
        ),
        train_dataset=dataset(),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        embedder=HashEmbedder(),
    )
    seen = _recording(trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    _check_weights(seen, trainer.args.alpha_base, running=True)
    assert min(low for _, low, _, _ in seen) >= 5.0


@pytest.mark.slow
@pytest.mark.trl
def test_none_logs_grpo_trainers_rewards_on_rewards_with_none(model_dir, tmp_path):
    base = _train(trl.GRPOTrainer, trl.GRPOConfig, model_dir, tmp_path / "trl")
    ours = _train(GCPOTrainer, GCPOConfig, model_dir, tmp_path / "gcpo", modulator="none", share_prompt=False)
    keys = ("reward", "reward_std", "rewards/multi_task_reward/mean", "loss", "grad_norm")
    theirs = [{k: h[k] for k in keys} for h in base.state.log_history if "loss" in h]
    assert len(theirs) == 2 and theirs == [{k: h[k] for k in keys} for h in ours.state.log_history if "loss" in h]
    assert all(np.isfinite(h["reward"]) for h in theirs)
    assert np.isnan(ours.gcpo_last["rewards"]).any() and (ours.gcpo_last["weights"] == 1).all()


def test_reward_weights_of_the_wrong_length_get_trls_message_first(tiny_model_dir, tmp_path):
    # before: "declare no bounds: set reward_range='running' ..." and then TRL refused anyway
    args = GCPOConfig(**config_kwargs(tmp_path, **FAST, modulator="bot_rd", reward_weights=[1.0, 2.0]))
    with pytest.raises(ValueError, match=r"Number of reward weights \(2\) must match number of reward functions \(1\)"):
        GCPOTrainer(
            model=str(tiny_model_dir),
            reward_funcs=word_reward,
            args=args,
            train_dataset=dataset(),
            processing_class=AutoTokenizer.from_pretrained(str(tiny_model_dir)),
        )
