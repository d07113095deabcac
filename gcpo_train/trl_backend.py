"""``gcpo train --backend trl``: any configs/*.yaml run through ``gcpo_train.trl.GCPOTrainer``.

The TrainConfig is translated field by field into a ``GCPOConfig`` (TRL's GRPOConfig plus the
GCPO fields); the data, prompts and rewards are gcpo's (``load_split``, ``build_prompt``,
``task_reward``, whose extra columns TRL passes to the reward function); the model is loaded
as gcpo's own loop loads it (packaged GGUF, hub name or path) and LoRA goes through TRL's
``peft_config``. Multi-GPU runs use ``accelerate launch --config_file configs/accelerate/...``
(see the README). What has no TRL counterpart is refused with the field named.
"""

from __future__ import annotations

from typing import Any

from .config import TrainConfig


def gcpo_config_from(cfg: TrainConfig, plain_trl: bool = False, **overrides):
    """The GCPOConfig of a TrainConfig (one generation batch of queries_per_step x G per step);
    ``plain_trl``: TRL's GRPOConfig of the same run, without the GCPO fields."""
    from .loss import TRL_LOSS_TYPE
    from .trl import GCPOConfig, gcpo_config_fields

    loss_type = TRL_LOSS_TYPE[cfg.loss_aggregation]
    kwargs: dict[str, Any] = dict(
        output_dir=cfg.output_dir,
        seed=cfg.seed,
        max_steps=cfg.steps,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        warmup_steps=cfg.warmup_steps,
        max_grad_norm=cfg.max_grad_norm or 1e9,
        lr_scheduler_type=cfg.lr_schedule,
        beta=cfg.beta,
        epsilon=cfg.clip_epsilon,
        num_iterations=cfg.num_iterations,
        loss_type=loss_type,
        scale_rewards="group",
        num_generations=cfg.group_size,
        per_device_train_batch_size=cfg.queries_per_step * cfg.group_size,
        max_completion_length=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=0,
        logging_steps=cfg.log_every,
        save_steps=cfg.checkpoint_every or cfg.steps,
        save_total_limit=cfg.save_total_limit,
        use_cpu=cfg.device == "cpu",
        bf16=cfg.dtype == "bfloat16",
        fp16=cfg.dtype == "float16",
        gradient_checkpointing=cfg.gradient_checkpointing,
        report_to=list(cfg.report_to or ()),  # validate made it a list
        modulator=cfg.modulator,
        alpha_base=cfg.alpha_base,
        q_hawkeye_alpha=cfg.q_hawkeye_alpha,
        r_min=cfg.r_min,
        r_max=cfg.r_max,
        judge=cfg.judge,
        embedder=cfg.embedder,
        nli_threshold=cfg.nli_threshold,
        use_full_completion=cfg.full_completion,
        modulator_params=cfg.modulator_params,
        disable_tqdm=not cfg.progress,
        share_prompt=cfg.share_prompt,
    )
    kwargs.update(overrides)
    if plain_trl:
        import trl

        return trl.GRPOConfig(**{k: v for k, v in kwargs.items() if k not in gcpo_config_fields()})
    return GCPOConfig(**kwargs)


def prompts_dataset(cfg: TrainConfig, tokenizer):
    """TRL's train_dataset: prompt (chat-formatted text), references, task — one row per query."""
    from datasets import Dataset

    from gcpo_analysis.prompts import build_prompt

    from .splits import load_split

    queries = load_split(cfg, cfg.train_split)
    if cfg.n_train:
        queries = queries.iloc[: cfg.n_train]
    rows = queries.to_dict("records")
    return Dataset.from_dict(
        {
            "prompt": [build_prompt(r, tokenizer, max_context_tokens=cfg.max_context_tokens) for r in rows],
            "references": [list(r["references"]) for r in rows],
            "task": [r["task"] for r in rows],
        }
    )


def task_reward_fn(completions, references, task, **_):
    """TRL reward function: gcpo's task reward of each completion (rewards in [0, 2])."""
    from gcpo_analysis.rewards import task_reward

    from .trl import completion_text

    return [task_reward(t, completion_text(c), list(refs)) for c, refs, t in zip(completions, references, task)]


def refuse_unsupported(cfg: TrainConfig) -> None:
    """Fields with no TRL counterpart here are refused, naming them (before any file is touched)."""
    refused = {"resume": "use TRL's resume_from_checkpoint", "eval_every": "use TRL's eval_strategy"}
    for key, why in refused.items():
        if getattr(cfg, key):
            raise ValueError(f"{key} has no --backend trl counterpart here ({why}); unset it")


def build_trl_trainer(cfg: TrainConfig, *, embedder=None, judge=None, plain_trl: bool = False, **overrides):
    """A ready GCPOTrainer for ``cfg`` (not yet trained); ``plain_trl`` builds TRL's own
    GRPOTrainer on the same workload instead (benchmarks)."""
    from gcpo_analysis.models import is_packaged_policy

    from .policy import load_model_and_tokenizer
    from .trl import GCPOTrainer

    if cfg.backend != "trl":
        raise ValueError(f"build_trl_trainer needs backend: trl, got {cfg.backend!r}")
    refuse_unsupported(cfg)
    model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype)
    if getattr(getattr(model, "hf_quantizer", None), "quantization_config", None) is not None and str(
        model.hf_quantizer.quantization_config.quant_method
    ).lower().endswith("gguf"):
        # transformers dequantises GGUF weights into ordinary float tensors on load; only the
        # marker stays behind, and HF's Trainer refuses any marked model. The weights train fine.
        model.hf_quantizer = None
        model.is_quantized = False
    peft_config = None
    if cfg.use_lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules=cfg.lora_target_modules or "all-linear",
            task_type="CAUSAL_LM",
        )
    elif cfg.beta > 0 and (is_packaged_policy(cfg.model) or cfg.model.startswith("tiny:")):
        raise ValueError(
            "full fine-tuning with beta > 0 under --backend trl needs a model TRL can reload as "
            "its reference (a hub name or a local folder), not 'packaged'/'tiny:'; use LoRA or beta: 0"
        )
    args = gcpo_config_from(cfg, plain_trl=plain_trl, **overrides)
    common = dict(
        model=model,
        reward_funcs=task_reward_fn,
        train_dataset=prompts_dataset(cfg, tokenizer),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    if plain_trl:
        import trl

        return trl.GRPOTrainer(args=args, **common)
    return GCPOTrainer(args=args, embedder=embedder, judge=judge, **common)


def run(cfg: TrainConfig) -> list[dict]:
    """Train with TRL in the locked run folder, under gcpo's run-folder rules
    (``run_folder.RunFolder``: a folder holding a run needs ``overwrite``, which removes only what
    gcpo or TRL wrote; a start that fails before the first step leaves the folder as found);
    returns TRL's log history (one dict per logged step)."""
    import os

    from .run_folder import RunFolder

    refuse_unsupported(cfg)
    is_main = int(os.environ.get("RANK", "0")) == 0  # accelerate launch sets RANK per process
    with RunFolder(cfg.output_dir, is_main=is_main) as folder:
        folder.prepare(resume=False, overwrite=cfg.overwrite, load_latest=lambda: (None, None))
        trainer = build_trl_trainer(cfg)
        trainer.add_callback(_started_callback(folder))
        trainer.train()
    return [h for h in trainer.state.log_history if "loss" in h]


def _started_callback(folder):
    """A TrainerCallback that marks the run folder started after TRL's first optimizer step."""
    from transformers import TrainerCallback

    class Started(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            folder.started()

    return Started()
