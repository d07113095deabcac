"""One group's GRPO gradient at a fixed policy: the model half of the update-alignment study.

For a query q, G rollouts are sampled with the run's decoding (``sampling.generate.generate_groups``,
the run's kernels, temperature and caps), scored with the task reward, and the group's gradient is

    g_q = ∇_θ L_q,   L_q = grpo_loss(logp, logp.detach(), −, A_q, mask; β = 0, the run's aggregation,
                                     n_seqs = G, n_tokens = G · T_max, T_max = max_new_tokens)

over the trainable parameters θ (the LoRA adapters), with A_q the plain GRPO advantages
(``grpo_advantages``). At the first of the μ updates π_old = π_θ, so ρ ≡ 1 and the clip is idle,
as in the trainer. The normalisers are constants common to every group, so a batch's training
gradient, (1/n_tokens(B)) Σ_{q∈B} Σ_t ∇ℓ for ``dapo``, is a per-batch scalar times Σ_q g_q, and a
group-level modulator's (Ã_q = ω(q) A_q) is that scalar times Σ_q ω(q) g_q: the weighted sum the
statistics (``gcpo_analysis.stats.alignment``) read. β = 0 because ω does not scale the KL term; at
the base policy its gradient is zero anyway (π_θ = π_ref), and with β = 0.002 it stays small.

A group whose rewards are all equal has A_q = 0, so g_q = 0 exactly: it gets a no-grad pass (for the
per-rollout entropies and log-probabilities the modulators read) and no backward.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from gcpo_analysis.models import require
from gcpo_train.config import TrainConfig


@dataclass
class GroupGradient:
    """One group: its flattened gradient (float32, (D,)) and what the modulators read."""

    gradient: np.ndarray
    rewards: np.ndarray  # (G,)
    texts: list[str]  # completions
    answers: list[str]  # extracted answers
    token_entropy: np.ndarray  # (G,) mean token entropy of π_θ (temperature 1)
    seq_logprob: np.ndarray  # (G,) Σ_t log π_θ(y_t) (temperature 1)
    n_tokens: np.ndarray  # (G,) completion tokens
    seconds_generate: float
    seconds_gradient: float


def load_policy(config: TrainConfig, checkpoint: str | None):
    """(model, tokenizer) in train mode: the base policy with the run's LoRA initialisation
    (``torch.manual_seed(seed)`` before ``wrap_lora``, as the trainer does; B = 0, so the base
    function), or a checkpoint's (``checkpoint.load_trained``)."""
    torch = require("torch")
    from gcpo_train.model.policy import load_model_and_tokenizer, wrap_lora
    from gcpo_train.runfiles.checkpoint import load_trained

    if checkpoint is not None:
        model, tok, _ = load_trained(checkpoint)
    else:
        torch.manual_seed(config.seed)
        model, tok = load_model_and_tokenizer(config.model, config.dtype)
        if config.use_lora:
            model = wrap_lora(model, config.lora_r, config.lora_alpha, config.lora_dropout, config.lora_target_modules)
        else:
            for p in model.parameters():
                p.requires_grad_(True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def trainable(model) -> list:
    """The trained parameters, in ``named_parameters`` order (the order of a flattened gradient)."""
    return [p for p in model.parameters() if p.requires_grad]


def sample_group(model, tokenizer, config: TrainConfig, query: dict, seed: int, kernels=None, reward_fn=None):
    """(TokenBatch, rewards (G,), answers) of one query's G rollouts, sampled as the trainer samples
    (``generate_groups`` with the run's decoding; ``seed`` seeds the group) and scored by
    ``reward_fn(task, completion, references)`` (default the task reward)."""
    from gcpo_analysis.measures.dispersion import reward_array
    from gcpo_analysis.prompts import build_prompt
    from gcpo_analysis.rewards import extract_answer
    from gcpo_train.sampling.generate import generate_groups

    if reward_fn is None:
        from gcpo_analysis.rewards import task_reward as reward_fn
    cfg = config
    prompt = build_prompt(query, tokenizer, max_context_tokens=cfg.max_context_tokens, template=cfg.prompt)
    model.eval()
    batch = generate_groups(
        model,
        tokenizer,
        [prompt],
        cfg.group_size,
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_prompt_tokens=cfg.max_prompt_tokens,
        seeds=[seed],
        share_prompt=cfg.share_prompt,
        kernels=kernels,
    )
    refs = list(query["references"])
    rewards = reward_array([reward_fn(query["task"], t, refs) for t in batch.texts])  # a bool refused
    answers = [extract_answer(t, query["task"]) or "" for t in batch.texts]
    return batch, rewards, answers


def rollouts_gradient(model, config: TrainConfig, batch, advantages, *, n_seqs: int, n_tokens: float):
    """(flattened ∇_θ Σ_chunks grpo_loss, π_θ's own TokenLogprobs) over the rollouts of ``batch``
    (one group or several), with β = 0, ρ ≡ 1 (π_old = π_θ) and the given normalisers; no
    backward (a zero gradient) when every advantage is 0."""
    torch = require("torch")
    from gcpo_train.loop.loss import grpo_loss
    from gcpo_train.model.logprobs import cat_token_logprobs, chunk_logprobs, rollout_chunks

    cfg = config
    params = trainable(model)
    adv = torch.as_tensor(np.asarray(advantages), dtype=torch.float64)
    live = bool((adv != 0).any())
    model.train()
    for p in params:
        p.grad = None
    parts = []
    with torch.enable_grad() if live else torch.no_grad():
        for chunk in rollout_chunks(batch, cfg.group_size, cfg.micro_batch_size, cfg.share_prompt):
            rows = chunk[1]
            token = chunk_logprobs(model, batch, chunk, cfg.temperature, prompt_model=model, policy_stats=True)
            if live:
                out = grpo_loss(
                    token.logp,
                    token.logp.detach(),
                    None,
                    adv[rows].to(token.logp.dtype),
                    batch.completion_mask[rows],
                    beta=0.0,
                    clip_epsilon=cfg.clip_epsilon,
                    aggregation=cfg.loss_aggregation,
                    n_seqs=n_seqs,
                    n_tokens=n_tokens,
                    max_completion_length=cfg.max_new_tokens,
                )
                out.loss.backward()
            parts.append(token._replace(logp=None))
    flat = torch.cat([torch.zeros_like(p).reshape(-1) if p.grad is None else p.grad.reshape(-1) for p in params])
    for p in params:
        p.grad = None
    return flat.detach().numpy(), cat_token_logprobs(parts)


def group_gradient(
    model, tokenizer, config: TrainConfig, query: dict, seed: int, kernels=None, reward_fn=None
) -> GroupGradient:
    """``GroupGradient`` of one query (formula in the module docstring); ``seed`` seeds its sampling."""
    from gcpo_analysis.measures.advantages import grpo_advantages
    from gcpo_train.loop.loss import per_rollout_mean

    cfg, G = config, config.group_size
    t0 = time.perf_counter()
    batch, rewards, answers = sample_group(model, tokenizer, cfg, query, seed, kernels, reward_fn)
    t1 = time.perf_counter()
    gradient, own = rollouts_gradient(
        model, cfg, batch, grpo_advantages(rewards, cfg.eps), n_seqs=G, n_tokens=float(G * cfg.max_new_tokens)
    )
    mask = batch.completion_mask
    return GroupGradient(
        gradient=gradient.astype(np.float32),
        rewards=rewards,
        texts=list(batch.texts),
        answers=answers,
        token_entropy=per_rollout_mean(own.policy_entropy, mask).numpy().astype(float),
        seq_logprob=(own.policy_logp * mask.to(own.policy_logp.dtype)).sum(-1).numpy().astype(float),
        n_tokens=mask.sum(-1).numpy().astype(int),
        seconds_generate=t1 - t0,
        seconds_gradient=time.perf_counter() - t1,
    )
