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

Ã_i is the modulated advantage from ``gcpo_analysis.measures.modulators`` (Section 3.4); the
log-probabilities come from the forward pass in ``logprobs`` (at the sampling temperature, as
TRL's). Hand-written in torch: TRL is not a dependency and its loss is a method of its trainer.
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
