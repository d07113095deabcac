"""The GRPO objective on per-token log-probabilities (GRPO paper, Shao et al. 2024, Eq. 3).

    ρ_{i,t} = exp(log π_θ(y_t) − log π_old(y_t))
    L_clip  = −min(ρ_{i,t} Ã_i, clip(ρ_{i,t}, 1−ε, 1+ε) Ã_i)
    KL_{i,t} = exp(ref − logp) − (ref − logp) − 1            (k3 estimator, ≥ 0, Schulman 2020)
    ℓ_{i,t} = L_clip + β·KL_{i,t}

Aggregation (``loss_aggregation``), with m_{i,t} the completion mask, N the step's rollouts and
T_max the completion cap (``max_new_tokens``); each name is TRL 1.16's ``loss_type`` of that form:
- ``"sequence"`` (TRL ``grpo``; the GRPO paper's 1/G Σ_i 1/|o_i| Σ_t): per-rollout token mean,
  then the mean over the rollouts: L = (1/N) Σ_i (Σ_t m ℓ / Σ_t m). A long rollout's tokens
  weigh less, which lets long wrong answers off lightly (the length drift of Dr. GRPO, Liu et
  al. 2025).
- ``"token"`` (TRL ``bnpo``) and ``"dapo"`` (TRL ``dapo``, DAPO, Yu et al. 2025): every token of
  the step weighs the same, L = Σ_{i,t} m ℓ / Σ_{i,t} m over the step. The two are one formula
  here, because this loop always normalises by the whole step's tokens; in TRL ``bnpo`` divides
  each micro-batch by its own token count and ``dapo`` by the generation batch's, so they differ
  there once a step is split into micro-batches or processes.
- ``"dr_grpo"`` (TRL ``dr_grpo``, Dr. GRPO): L = Σ_{i,t} m ℓ / (N · T_max), a constant
  normaliser, so neither the rollout's length nor the batch's token count scales a token's
  gradient.
All are a sum over a micro-batch divided by a step-wide normaliser (``n_seqs``, ``n_tokens``,
``n_seqs · max_completion_length``), so chunked gradient accumulation gives the same gradient as
one big batch.

Ã_i is the modulated advantage from ``gcpo_analysis.measures.modulators`` (Section 3.4); the
log-probabilities come from the forward pass in ``logprobs`` (at the sampling temperature, as
TRL's). Hand-written in torch: TRL is not a dependency and its loss is a method of its trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gcpo_analysis.models import require
from gcpo_train.config import LOSS_AGGREGATIONS

# TRL 1.16 loss_type of each form: sequence = grpo, token = bnpo, dapo = dapo, dr_grpo = dr_grpo
TRL_LOSS_TYPE = {"sequence": "grpo", "token": "bnpo", "dapo": "dapo", "dr_grpo": "dr_grpo"}


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
    max_completion_length: int | None = None,
) -> LossOutput:
    """Clipped GRPO surrogate + β·k3 KL on one micro-batch (formula in the module docstring).

    logp (B,T) with grad; old_logp, ref_logp (B,T) detached (ref_logp None when β = 0);
    advantages (B,) Ã_i; mask (B,T) completion mask. n_seqs / n_tokens: step-wide
    normalisers (default: this micro-batch's); max_completion_length: T_max of ``dr_grpo``
    (required there).
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
    elif aggregation in ("token", "dapo"):
        loss = (per_token * m).sum() / float(n_tokens or m.sum().clamp(min=1.0))
    elif aggregation == "dr_grpo":
        if max_completion_length is None or max_completion_length < 1:
            raise ValueError(
                f"loss_aggregation 'dr_grpo' needs max_completion_length >= 1 (the completion cap), "
                f"got {max_completion_length!r}"
            )
        loss = (per_token * m).sum() / float((n_seqs or logp.shape[0]) * max_completion_length)
    else:
        raise ValueError(f"loss_aggregation must be one of {', '.join(LOSS_AGGREGATIONS)}, got {aggregation!r}")
    with torch.no_grad():
        is_clipped = ((ratio < 1.0 - clip_epsilon) & (adv < 0)) | ((ratio > 1.0 + clip_epsilon) & (adv > 0))
        clip_frac = per_rollout_mean(is_clipped.to(m.dtype), mask)
        kl_seq = per_rollout_mean(kl, mask)
    return LossOutput(loss=loss, kl=kl_seq.detach(), clip_frac=clip_frac)
