"""The update phase of a GCPO/GRPO step (``GCPOLoopTrainer._update``): μ = ``num_iterations``
optimizer steps on the clipped surrogate + β·k3 KL (``loss.grpo_loss``, paper Section 3.4), in
micro-batches whose gradients accumulate to the whole batch's, with the per-group gradient
variance tracked on the first update when asked (``gradvar_tracking``).

Distributed: the loss is normalised by the step's rollout and token counts over all processes and
multiplied by the process count, which DDP's gradient mean divides away, so N processes take one
process's step; gradients sync once per update (``no_sync`` on all but the last micro-batch).
"""

from __future__ import annotations

import contextlib
import time

from gcpo_analysis.models import require
from gcpo_train.loop.loss import grpo_loss
from gcpo_train.loop.step_data import BeforeUpdate, UpdateStats
from gcpo_train.model.logprobs import cat_token_logprobs


def grpo_update(trainer, batch, advantages, before: BeforeUpdate) -> UpdateStats:
    """μ = num_iterations optimizer steps on the clipped surrogate + β·KL (``loss.grpo_loss``),
    in micro-batches whose gradients accumulate to the whole batch's."""
    torch = require("torch")
    cfg, acc, mask = trainer.config, trainer.accelerator, batch.completion_mask
    # the step's normalisers over all processes; DDP then averages the processes' gradients,
    # which the factor num_processes undoes, so N processes give one process's gradient
    n_rollouts = cfg.queries_per_step * cfg.group_size
    n_tokens = float(acc.reduce(mask.sum().float(), reduction="sum")) if acc.num_processes > 1 else float(mask.sum())
    chunks = trainer._chunks(batch)
    # without an extra pass, π_old = π_θ at the first update: take it (and π_θ's own log-probs
    # and entropies, which the modulators did not need earlier) from the gradient pass itself
    from_gradient_pass = before.old_logp is None
    stats = UpdateStats(lr=float(trainer.scheduler.get_last_lr()[0]))  # the rate of the first update
    trainer.model.train()
    for iteration in range(cfg.num_iterations):
        t_start = time.perf_counter()
        loss, kl, clip_frac, passes = 0.0, [], [], []
        # V_train of every group rides the first update's backward (gradvar_tracking); a
        # shared prompt's layers see the sum of its rollouts' gradients, so the tracker
        # back-propagates each rollout's own through the prompt after the training backward
        tracker = _gradvar_tracker(trainer, mask.shape[0]) if cfg.track_gradvar and iteration == 0 else None
        for k, (group, rows) in enumerate(chunks):
            # gradients sync once per update, in the last micro-batch's backward
            sync = contextlib.nullcontext() if k == len(chunks) - 1 else acc.no_sync(trainer.model)
            shared = tracker is not None and group is not None
            track = tracker.chunk(rows, shared_prompt=shared) if tracker is not None else contextlib.nullcontext()
            with sync, track:
                token = trainer._forward(
                    trainer.model,
                    batch,
                    (group, rows),
                    grad=True,
                    policy_stats=from_gradient_pass,
                    on_shared=tracker.on_shared if (tracker is not None and shared) else None,
                )
                logp = token.logp
                old = logp.detach() if from_gradient_pass else before.old_logp[rows]
                out = grpo_loss(
                    logp,
                    old,
                    None if before.ref_logp is None else before.ref_logp[rows],
                    advantages[rows],
                    mask[rows],
                    beta=cfg.beta,
                    clip_epsilon=cfg.clip_epsilon,
                    aggregation=cfg.loss_aggregation,
                    n_seqs=n_rollouts,
                    n_tokens=n_tokens,
                    max_completion_length=cfg.max_new_tokens,
                )
                # a tracked shared chunk keeps the graph for its per-rollout prompt passes
                acc.backward(out.loss * acc.num_processes, retain_graph=shared)
            loss += float(out.loss.detach())
            kl.append(out.kl)
            clip_frac.append(out.clip_frac)
            if iteration == 0 and from_gradient_pass:
                passes.append(token._replace(logp=None))  # keep π_θ's stats, not the graph
        if tracker is not None:
            tracker.remove()
            stats.gradvar, stats.time_gradvar = tracker.results(), tracker.seconds
            stats.time_gradvar_prompt = tracker.prompt_seconds
        t_optimizer = time.perf_counter()
        stats.time_forward_backward += t_optimizer - t_start
        if cfg.max_grad_norm and cfg.max_grad_norm > 0:
            grad_norm = acc.clip_grad_norm_(trainer.params, cfg.max_grad_norm)
        else:
            grad_norm = torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in trainer.params if p.grad is not None])
            )
        trainer.optimizer.step()
        trainer.scheduler.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        stats.time_step += time.perf_counter() - t_optimizer
        stats.grad_norm.append(float(grad_norm))
        stats.loss.append(loss)
        stats.kl.append(torch.cat(kl).cpu().numpy())
        stats.clip_frac.append(torch.cat(clip_frac).cpu().numpy())
        if passes:
            own = cat_token_logprobs(passes)
            before.set_rollout_stats(own.policy_logp, own.policy_entropy, mask)
    return stats


def _gradvar_tracker(trainer, n_rows: int):
    """Hooks on the trainable layers for one update pass (``gradvar_tracking``); the factor
    num_processes undoes the one the loss is multiplied by before DDP's gradient mean."""
    from gcpo_train.loop.gradvar_tracking import GradVarTracker

    return GradVarTracker(
        trainer.policy, trainer.params, trainer.config.group_size, n_rows, scale=trainer.accelerator.num_processes
    )
