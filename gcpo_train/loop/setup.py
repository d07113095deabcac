"""What the gcpo loop builds before its first step (``GCPOLoopTrainer.__init__``, in this order):
the accelerator, the sampler, the policy (loaded, LoRA-wrapped, checked by the sampler), whether
a group's prompt runs once, the KL reference, AdamW with its schedule, and the training queries.

Each is a function of the config (and what a caller injects), so the trainer's step phases
(``loop.trainer``) read only what these return. The order matters for reproducibility: the LoRA
adapters are drawn right after ``torch.manual_seed(seed)``, before anything else draws.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from gcpo_analysis.models import require
from gcpo_train.config import TrainConfig
from gcpo_train.evaluation.splits import load_split
from gcpo_train.model.logprobs import cache_argument
from gcpo_train.model.policy import Reference, load_model_and_tokenizer, wrap_lora
from gcpo_train.sampling.registry import sampler


def check_backend(cfg: TrainConfig) -> None:
    """The loop runs backend 'gcpo' (and its alias 'hf') only."""
    if cfg.backend == "vllm":
        raise NotImplementedError(
            "backend 'vllm' is not implemented for the gcpo loop; use backend: trl "
            "(TRL's vLLM generation) or backend: gcpo"
        )
    if cfg.backend == "trl":
        raise ValueError("backend 'trl' runs through gcpo_train.trl.backend (gcpo train --backend trl), not this loop")


def make_accelerator(cfg: TrainConfig):
    """The ``accelerate.Accelerator`` (CPU when ``device: cpu``) with the ``report_to`` backends as
    its trackers (``reporting.trackers``: started by ``init_trackers`` once the run folder is
    checked); each process generates whole groups, so a step needs at least one query per process."""
    log_with = None
    if cfg.report_to:
        from gcpo_train.reporting import trackers

        out = Path(cfg.output_dir)
        log_with = trackers(cfg.report_to, out, cfg.to_dict(), out.name)
    accelerator = require("accelerate").Accelerator(cpu=(cfg.device == "cpu"), log_with=log_with)
    if cfg.queries_per_step < accelerator.num_processes:
        raise ValueError(
            f"queries_per_step ({cfg.queries_per_step}) must be at least the number of "
            f"processes ({accelerator.num_processes}): each process generates whole groups"
        )
    return accelerator


def load_policy(cfg: TrainConfig, model=None, tokenizer=None):
    """(model, tokenizer): the config's policy (or the injected one), its LoRA adapters drawn from
    ``torch.manual_seed(seed)``, trainable parameters marked, gradient checkpointing on if asked,
    and checked by the sampler (a model the sampler does not implement is refused here, not at
    step 1)."""
    torch = require("torch")
    torch.manual_seed(cfg.seed)  # LoRA initialisation
    if model is None:
        model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if cfg.use_lora:
        model = wrap_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
    else:
        for p in model.parameters():
            p.requires_grad_(True)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    check_model = sampler(cfg.sampling_kernels).check_model
    if check_model is not None:
        check_model(model)
    return model, tokenizer


def shared_prompt(cfg: TrainConfig, model) -> tuple[bool, str | None]:
    """(share, fallback): the rollouts of a group share their prompt, run once per chunk (exact;
    see ``logprobs.group_logprobs_and_entropy``), unless recomputation or the model rules out a
    cache; then ``fallback`` says why, with a warning (never silent; run.json records it)."""
    fallback = (
        None
        if not cfg.share_prompt
        else "gradient_checkpointing (a checkpointed forward keeps no cache)"
        if cfg.gradient_checkpointing
        else f"the model ({type(model).__name__}) takes no key/value cache (no cache or past_key_values argument)"
        if cache_argument(model) is None
        else None
    )
    if fallback:
        warnings.warn(f"share_prompt: each group's prompt runs G times, because of {fallback}", stacklevel=3)
    return cfg.share_prompt and fallback is None, fallback


def make_reference(cfg: TrainConfig, model, need_ratio: bool, device) -> Reference | None:
    """π_ref (``policy.Reference``) when the loss's KL (β > 0) or the ratio variance reads it."""
    if not (cfg.beta > 0 or need_ratio):
        return None
    reference = Reference(model, cfg.use_lora)
    if reference.copy is not None:
        reference.copy.to(device)
    return reference


def make_optimizer(cfg: TrainConfig, model):
    """(trainable params, AdamW, LambdaLR): linear warm-up over ``warmup_steps``, then constant or
    linear decay to 0, counted in updates (steps × μ)."""
    torch = require("torch")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    total = cfg.steps * cfg.num_iterations
    warm = cfg.warmup_steps * cfg.num_iterations

    def schedule(i):
        if warm and i < warm:
            return (i + 1) / warm
        return 1.0 if cfg.lr_schedule == "constant" else max(0.0, (total - i) / max(1, total - warm))

    return params, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def training_queries(cfg: TrainConfig, queries=None):
    """The training split (or the injected queries), cut to ``n_train``; a step must hold
    ``queries_per_step`` distinct queries."""
    queries = queries if queries is not None else load_split(cfg, cfg.train_split)
    if cfg.n_train:
        queries = queries.iloc[: cfg.n_train].reset_index(drop=True)
    if len(queries) == 0:
        raise ValueError(f"no training queries for dataset {cfg.dataset!r}")
    if len(queries) < cfg.queries_per_step:  # a step would hold a query twice: one group id, 2G rollouts
        raise ValueError(
            f"queries_per_step ({cfg.queries_per_step}) is more than the {len(queries)} training "
            f"queries of {cfg.dataset!r}: set queries_per_step <= {len(queries)}, or give more queries"
        )
    return queries
