"""The GRPO objective on per-token log-probabilities (GRPO paper, Shao et al. 2024, Eq. 3).

    ρ_{i,t} = exp(log π_θ(y_t) − log π_old(y_t))
    L_clip  = −min(ρ_{i,t} Ã_i, clip(ρ_{i,t}, 1−ε, 1+ε) Ã_i)
    KL_{i,t} = exp(ref − logp) − (ref − logp) − 1            (k3 estimator, ≥ 0, Schulman 2020)
    ℓ_{i,t} = L_clip + β·KL_{i,t}

Aggregation (``loss_aggregation``), with m_{i,t} the completion mask:
- ``"sequence"`` (default, the GRPO paper's 1/G Σ_i 1/|o_i| Σ_t): per-rollout token mean, then the
  mean over the N rollouts of the step: L = (1/N) Σ_i (Σ_t m ℓ / Σ_t m).
- ``"token"`` (TRL's ``bnpo``, DAPO-style): L = Σ_{i,t} m ℓ / Σ_{i,t} m over the step.
Both are written as a sum over a micro-batch divided by a step-wide normaliser (``n_seqs`` or
``n_tokens``), so chunked gradient accumulation gives the same gradient as one big batch.

Ã_i is the modulated advantage from ``gcpo_analysis.measures.modulators`` (Section 3.4).
Hand-written in torch: TRL is not a dependency and its loss is a method of its trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gcpo_analysis.models import require


@dataclass
class LossOutput:
    loss: Any  # scalar torch.Tensor (torch is imported lazily) (this micro-batch's share of the step loss)
    kl: Any  # (B,) per-rollout token-mean KL, detached
    clip_frac: Any  # (B,) fraction of tokens where the clip is active, detached


def k3_kl(logp, ref_logp):
    """k3 estimator of KL(π_θ ‖ π_ref) per token: exp(ref − logp) − (ref − logp) − 1 (≥ 0)."""
    d = ref_logp - logp
    return d.exp() - d - 1.0


def per_rollout_mean(x, mask):
    """Mean of x over each rollout's completion tokens: Σ_t m_{i,t} x_{i,t} / max(1, Σ_t m_{i,t})."""
    m = mask.to(x.dtype)
    return (x * m).sum(-1) / m.sum(-1).clamp(min=1.0)


def masked_var(x, mask):
    """Population variance over the masked tokens of each row: Var_t x_{i,t} (0 for ≤ 1 token)."""
    torch = require("torch")
    m = mask.to(x.dtype)
    n = m.sum(-1).clamp(min=1.0)
    mean = (x * m).sum(-1) / n
    var = (((x - mean.unsqueeze(-1)) ** 2) * m).sum(-1) / n
    return torch.where(m.sum(-1) > 1, var, torch.zeros_like(var))


def grpo_loss(
    logp,
    old_logp,
    ref_logp,
    advantages,
    mask,
    *,
    beta: float,
    clip_epsilon: float,
    aggregation: str = "sequence",
    n_seqs: int | None = None,
    n_tokens: float | None = None,
) -> LossOutput:
    """Clipped GRPO surrogate + β·k3 KL on one micro-batch (formula in the module docstring).

    logp (B,T) with grad; old_logp, ref_logp (B,T) detached (ref_logp None when β = 0);
    advantages (B,) Ã_i; mask (B,T) completion mask. n_seqs / n_tokens: step-wide
    normalisers (default: this micro-batch's).
    """
    torch = require("torch")
    if logp.shape != mask.shape or old_logp.shape != mask.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask "
            f"{tuple(mask.shape)} must have the same shape"
        )
    if advantages.shape != (logp.shape[0],):
        raise ValueError(f"advantages must be ({logp.shape[0]},), got {tuple(advantages.shape)}")
    m = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    adv = advantages.to(logp.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon) * adv
    per_token = -torch.min(unclipped, clipped)
    if beta and ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * kl
    else:
        kl = torch.zeros_like(logp)
    if aggregation == "sequence":
        loss = per_rollout_mean(per_token, mask).sum() / float(n_seqs or logp.shape[0])
    elif aggregation == "token":
        loss = (per_token * m).sum() / float(n_tokens or m.sum().clamp(min=1.0))
    else:
        raise ValueError(f"loss_aggregation must be 'sequence' or 'token', got {aggregation!r}")
    with torch.no_grad():
        is_clipped = ((ratio < 1.0 - clip_epsilon) & (adv < 0)) | ((ratio > 1.0 + clip_epsilon) & (adv > 0))
        clip_frac = per_rollout_mean(is_clipped.to(m.dtype), mask)
        kl_seq = per_rollout_mean(kl, mask)
    return LossOutput(loss=loss, kl=kl_seq.detach(), clip_frac=clip_frac)


def token_logprobs_and_entropy(
    model, input_ids, attention_mask, n_completion: int, temperature: float = 1.0, with_entropy: bool = True
):
    """Per-token log π(y_t | y_<t) of the last ``n_completion`` tokens and their entropies.

    Logits are divided by the sampling temperature (as TRL does) so that ρ and the KL compare
    the distributions the rollouts were drawn from. Entropy H_t = −Σ_v p_v log p_v (nats).
    Returns (logp (B,T), entropy (B,T) or None).
    """
    from .policy import forward_parameters

    accepted, kwargs = forward_parameters(model), {}
    if "logits_to_keep" in accepted:
        # only the completion's logits are needed; the LM head over the prompt as well would
        # cost a (B, P, vocab) tensor (hundreds of MB for a 49k vocabulary)
        kwargs["logits_to_keep"] = n_completion + 1
    if "position_ids" in accepted:
        # positions count real tokens, as in generate(): a left-padded row then scores exactly
        # the tokens it sampled (without them, absolute position embeddings would shift)
        kwargs["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs)
    return _logprobs_of(
        out.logits[:, -n_completion - 1 : -1, :], input_ids[:, -n_completion:], temperature, with_entropy
    )


def group_logprobs_and_entropy(
    model,
    prompt_ids,
    completion_ids,
    completion_mask,
    temperature: float = 1.0,
    with_entropy: bool = True,
    prompt_model=None,
    prompt_mask=None,
):
    """``token_logprobs_and_entropy`` for g rollouts that continue one prompt, running the prompt once.

    The prompt's keys and values are computed once (P tokens instead of g·P) and repeated g
    times (``Cache.batch_repeat_interleave``); the completions run on top of them (g·(T−1)
    tokens), and the first completion token's distribution is the prompt's last logit. The same
    numbers as the plain forward up to float rounding, gradients included: the backward of the
    repeat sums the g rollouts' gradients into the shared prompt. prompt_ids (1, P) unpadded;
    completion_ids, completion_mask (g, T). ``prompt_model`` runs the prompt (the model inside a
    DDP wrapper, so that DDP sees one forward per backward; default ``model``). ``prompt_mask``
    (1, P): the attention mask of a left-padded prompt (TRL's batches); None = all ones.
    """
    from .policy import run_prompt_once

    torch = require("torch")
    g, T = completion_ids.shape
    P = prompt_ids.shape[1]
    prompt = run_prompt_once(model if prompt_model is None else prompt_model, prompt_ids, g, attention_mask=prompt_mask)
    logits = prompt.logits[:, -1:, :].expand(g, 1, -1)
    if T > 1:
        ones = (
            torch.ones(g, P, dtype=completion_mask.dtype, device=completion_mask.device)
            if prompt_mask is None
            else prompt_mask.to(completion_mask.dtype).expand(g, -1)
        )
        positions = torch.arange(P, P + T - 1, device=completion_ids.device).expand(g, -1)
        rest = model(
            input_ids=completion_ids[:, :-1],
            attention_mask=torch.cat([ones, completion_mask[:, :-1]], dim=1),
            past_key_values=prompt.past_key_values,
            position_ids=positions,
            use_cache=True,
        )
        logits = torch.cat([logits, rest.logits], dim=1)
    return _logprobs_of(logits, completion_ids, temperature, with_entropy)


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


def chunk_logprobs(model, batch, chunk, temperature: float = 1.0, with_entropy: bool = True, prompt_model=None):
    """Token log-probs (and entropies) of one chunk from ``rollout_chunks``."""
    group, rows = chunk
    if group is None:
        return token_logprobs_and_entropy(
            model, batch.input_ids[rows], batch.attention_mask[rows], batch.n_completion, temperature, with_entropy
        )
    return group_logprobs_and_entropy(
        model,
        batch.prompt_ids[group],
        batch.completion_ids[rows],
        batch.completion_mask[rows],
        temperature,
        with_entropy,
        prompt_model,
    )


def _logprobs_of(logits, targets, temperature: float, with_entropy: bool):
    """log π(target) per position from (B, T, V) logits at ``temperature``, and the entropies."""
    torch = require("torch")
    # float32 for half-precision models; a float64 model (exactness tests) stays float64
    logsm = torch.log_softmax((logits if logits.dtype == torch.float64 else logits.float()) / temperature, dim=-1)
    logp = logsm.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    ent = None
    if with_entropy:
        with torch.no_grad():
            ent = -(logsm.exp() * logsm).sum(-1)
    return logp, ent
