"""The policy's forward pass: per-token log-probabilities and entropies of the completions.

For a completion y scored after its prompt q, with z_t the logits that predict y_t and τ the
sampling temperature:

    logp_t           = log softmax(z_t / τ)[y_t]           the sampler's, with gradient
    entropy_t        = −Σ_v p_v log p_v,  p = softmax(z_t / τ)
    policy_logp_t    = log softmax(z_t)[y_t]               π_θ itself (τ = 1), no gradient
    policy_entropy_t = −Σ_v p_v log p_v,  p = softmax(z_t)

The loss uses ``logp`` (ρ and the KL compare the distributions the rollouts were drawn from,
as TRL does); the rollouts frame's ``token_entropy`` and ``logprob`` and the modulators that read
them use ``policy_*``, π_θ's own uncertainty (docs/conventions.md, "The frames"). Both come
from the same logits of one forward.

A group's G rollouts share their prompt: ``run_prompt_once`` computes its keys and values
once and ``group_logprobs_and_entropy`` runs the completions on them (docs/conventions.md,
"Shared prompts"). ``rollout_chunks`` and ``chunk_logprobs`` cut a ``policy.TokenBatch`` into
the micro-batches of one pass. The objective itself is ``loss.grpo_loss``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gcpo_analysis.models import require
from gcpo_analysis.prompt_cache import (
    cache_argument,
    forward_parameters,
    output_cache,
    run_prompt_once,
    shared_prompt_logits,
)
from gcpo_analysis.tokens import position_ids

__all__ = [  # run_prompt_once and forward_parameters live in gcpo_analysis.prompt_cache
    "TokenLogprobs",
    "cat_token_logprobs",
    "chunk_logprobs",
    "cache_argument",
    "forward_parameters",
    "output_cache",
    "group_logprobs_and_entropy",
    "rollout_chunks",
    "run_prompt_once",
    "token_logprobs_and_entropy",
]


class TokenLogprobs(NamedTuple):
    """Per-token values of one pass, each (B, T) over the completion's positions (formulas in
    the module docstring); a field not asked for is None."""

    logp: Any  # log π at the sampling temperature, with the forward's gradient
    entropy: Any = None  # entropy at the sampling temperature (TRL's), detached
    policy_logp: Any = None  # log π_θ at temperature 1, detached: the rollouts frame's
    policy_entropy: Any = None  # entropy of π_θ at temperature 1, detached: the rollouts frame's


def cat_token_logprobs(parts: list[TokenLogprobs]) -> TokenLogprobs:
    """The passes of consecutive row chunks as one (rows concatenated, field by field)."""
    torch = require("torch")
    return TokenLogprobs(
        *(None if parts[0][k] is None else torch.cat([p[k] for p in parts]) for k in range(len(TokenLogprobs._fields)))
    )


def token_logprobs_and_entropy(
    model,
    input_ids,
    attention_mask,
    n_completion: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    policy_stats: bool = False,
) -> TokenLogprobs:
    """``TokenLogprobs`` of the last ``n_completion`` tokens of full [prompt | completion] rows.

    ``with_entropy``: also the entropies at ``temperature``; ``policy_stats``: also π_θ's own
    log-probs and entropies (temperature 1). Rows are scored at ``tokens.position_ids``, the
    positions ``generate`` sampled them at.
    """
    accepted, kwargs = forward_parameters(model), {}
    if "logits_to_keep" in accepted:
        # only the completion's logits are needed; the LM head over the prompt as well would
        # cost a (B, P, vocab) tensor (hundreds of MB for a 49k vocabulary)
        kwargs["logits_to_keep"] = n_completion + 1
    if "position_ids" in accepted:
        # without them a left-padded row would be scored at shifted positions (absolute
        # position embeddings, RoPE) and no longer at those it was sampled at
        kwargs["position_ids"] = position_ids(attention_mask)
    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs)
    return _logprobs_of(
        out.logits[:, -n_completion - 1 : -1, :], input_ids[:, -n_completion:], temperature, with_entropy, policy_stats
    )


def group_logprobs_and_entropy(
    model,
    prompt_ids,
    completion_ids,
    completion_mask,
    temperature: float = 1.0,
    with_entropy: bool = False,
    prompt_model=None,
    prompt_mask=None,
    policy_stats: bool = False,
    on_shared=None,
) -> TokenLogprobs:
    """``token_logprobs_and_entropy`` for g rollouts that continue one prompt, running the prompt once.

    The prompt's keys and values are computed once (P tokens instead of g·P) and repeated g
    times (``Cache.batch_repeat_interleave``); the completions run on top of them (g·(T−1)
    tokens), and the first completion token's distribution is the prompt's last logit. The same
    numbers as the plain forward up to float rounding, gradients included: the backward of the
    repeat sums the g rollouts' gradients into the shared prompt. prompt_ids (1, P) unpadded;
    completion_ids, completion_mask (g, T). ``prompt_model`` runs the prompt (the model inside a
    DDP wrapper, so that DDP sees one forward per backward; default ``model``). ``prompt_mask``
    (1, P): the attention mask of a left-padded prompt (TRL's batches); None = all ones.
    ``on_shared(shared, repeated)``: called with the prompt's tensors that the g rollouts read
    (keys/values, the last logits) before and after their repeat (``track_gradvar``).
    """
    logits = shared_prompt_logits(
        model, prompt_ids, completion_ids, completion_mask, prompt_model, prompt_mask, on_shared=on_shared
    )
    return _logprobs_of(logits, completion_ids, temperature, with_entropy, policy_stats)


def rollout_chunks(batch, group_size: int, micro_batch_size: int, shared_prompt: bool) -> list[tuple]:
    """Micro-batches of at most ``micro_batch_size`` rollouts of a ``policy.TokenBatch``, as
    (group, rows). With ``shared_prompt`` a chunk stays inside one group, whose prompt then runs
    once per chunk; otherwise (gradient checkpointing, a model that takes no cache) chunks are
    (None, rows) of the plain full-sequence forward."""
    n = batch.completion_mask.shape[0]
    if not (shared_prompt and batch.prompt_ids):
        return [(None, slice(i, min(n, i + micro_batch_size))) for i in range(0, n, micro_batch_size)]
    return [
        (k, slice(k * group_size + i, k * group_size + min(group_size, i + micro_batch_size)))
        for k in range(n // group_size)
        for i in range(0, group_size, micro_batch_size)
    ]


def chunk_logprobs(
    model,
    batch,
    chunk,
    temperature: float = 1.0,
    with_entropy: bool = False,
    prompt_model=None,
    policy_stats: bool = False,
    on_shared=None,
) -> TokenLogprobs:
    """``TokenLogprobs`` of one chunk from ``rollout_chunks`` (``on_shared``: see
    ``group_logprobs_and_entropy``; unused for a chunk of full rows)."""
    group, rows = chunk
    if group is None:
        return token_logprobs_and_entropy(
            model,
            batch.input_ids[rows],
            batch.attention_mask[rows],
            batch.n_completion,
            temperature,
            with_entropy,
            policy_stats,
        )
    return group_logprobs_and_entropy(
        model,
        batch.prompt_ids[group],
        batch.completion_ids[rows],
        batch.completion_mask[rows],
        temperature,
        with_entropy,
        prompt_model,
        policy_stats=policy_stats,
        on_shared=on_shared,
    )


def _entropy(logsm):
    """−Σ_v p_v log p_v over the last axis, from log-probabilities."""
    return -(logsm.exp() * logsm).sum(-1)


def _logprobs_of(logits, targets, temperature: float, with_entropy: bool, policy_stats: bool = False) -> TokenLogprobs:
    """``TokenLogprobs`` from (B, T, V) logits and the (B, T) tokens they predict."""
    torch = require("torch")
    # float32 for half-precision models; a float64 model (exactness tests) stays float64
    z = logits if logits.dtype == torch.float64 else logits.float()
    logsm = torch.log_softmax(z / temperature, dim=-1)
    logp = logsm.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = policy_logp = policy_entropy = None
    with torch.no_grad():
        if with_entropy:
            entropy = _entropy(logsm)
        if policy_stats:
            # π_θ itself from the same logits; at τ = 1 that is the sampler's (z / 1 == z exactly)
            own = logsm if temperature == 1 else torch.log_softmax(z, dim=-1)
            policy_logp = own.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            policy_entropy = entropy if (entropy is not None and temperature == 1) else _entropy(own)
    return TokenLogprobs(logp, entropy, policy_logp, policy_entropy)
