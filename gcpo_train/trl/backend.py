"""``gcpo train --backend trl``: any configs/*.yaml run through ``gcpo_train.trl.GCPOTrainer``.

The TrainConfig is translated field by field into a ``GCPOConfig`` (TRL's GRPOConfig plus the
GCPO fields); the data, prompts and rewards are gcpo's (``load_split``, ``build_prompt``,
``task_reward``, whose extra columns TRL passes to the reward function); the model is loaded
as gcpo's own loop loads it (packaged GGUF, hub name or path) and LoRA goes through TRL's
``peft_config``. Multi-GPU runs use ``accelerate launch --config_file configs/accelerate/...``
(see the README). What has no TRL counterpart is refused with the field named.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable
from typing import Any

from gcpo_train.config import TrainConfig

# TrainConfig field -> the GRPOConfig field of the same meaning under another name (TRL's).
TRL_NAMES = {
    "output_dir": "output_dir",
    "seed": "seed",
    "steps": "max_steps",
    "learning_rate": "learning_rate",
    "weight_decay": "weight_decay",
    "warmup_steps": "warmup_steps",
    "lr_schedule": "lr_scheduler_type",
    "beta": "beta",
    "clip_epsilon": "epsilon",
    "num_iterations": "num_iterations",
    "group_size": "num_generations",
    "max_new_tokens": "max_completion_length",
    "temperature": "temperature",
    "top_p": "top_p",
    "log_every": "logging_steps",
    "save_total_limit": "save_total_limit",
    "gradient_checkpointing": "gradient_checkpointing",
}


def gcpo_config_from(cfg: TrainConfig, plain_trl: bool = False, **overrides):
    """The GCPOConfig of a TrainConfig (one generation batch of queries_per_step x G per step);
    ``plain_trl``: TRL's GRPOConfig of the same run, without the GCPO fields. The GCPO fields are
    copied by name (both configs declare them from ``gcpo_analysis.knobs``), TRL's fields through
    ``TRL_NAMES`` and the few conversions below."""
    from gcpo_train.loop.loss import TRL_LOSS_TYPE
    from gcpo_train.trl import GCPOConfig, gcpo_config_fields

    kwargs: dict[str, Any] = {trl: getattr(cfg, ours) for ours, trl in TRL_NAMES.items()}
    kwargs.update({name: getattr(cfg, name) for name in gcpo_config_fields() if hasattr(cfg, name)})
    kwargs.update(
        max_grad_norm=cfg.max_grad_norm or 1e9,
        loss_type=TRL_LOSS_TYPE[cfg.loss_aggregation],
        scale_rewards="group",
        per_device_train_batch_size=cfg.queries_per_step * cfg.group_size,
        top_k=0,
        save_steps=cfg.checkpoint_every or cfg.steps,
        use_cpu=cfg.device == "cpu",
        bf16=cfg.dtype == "bfloat16",
        fp16=cfg.dtype == "float16",
        report_to=list(cfg.report_to or ()),  # validate made it a list
        use_full_completion=cfg.full_completion,  # auto resolved: TRL's dataset has no name
        disable_tqdm=not cfg.progress,
    )
    kwargs.update(overrides)
    if plain_trl:
        import trl

        return trl.GRPOConfig(**{k: v for k, v in kwargs.items() if k not in gcpo_config_fields()})
    return GCPOConfig(**kwargs)


def prompts_dataset(cfg: TrainConfig, tokenizer, queries=None):
    """TRL's train_dataset: prompt (chat-formatted text), references, task, query_id — one row per
    query of the train split (or of ``queries``, a queries frame given instead: tests, notebooks).
    TRL passes the columns besides the prompt to the reward functions."""
    from datasets import Dataset

    from gcpo_analysis.prompts import build_prompt
    from gcpo_train.evaluation.splits import load_split

    if queries is None:
        queries = load_split(cfg, cfg.train_split)
    if cfg.n_train:
        queries = queries.iloc[: cfg.n_train]
    rows = queries.to_dict("records")
    return Dataset.from_dict(
        {
            "prompt": [
                build_prompt(r, tokenizer, max_context_tokens=cfg.max_context_tokens, template=cfg.prompt) for r in rows
            ],
            "references": [list(r["references"]) for r in rows],
            "task": [r["task"] for r in rows],
            "query_id": [str(r["query_id"]) for r in rows],
        }
    )


def task_reward_fn(completions, references, task, **_):
    """TRL reward function: gcpo's task reward of each completion (rewards in [0, 2])."""
    from gcpo_analysis.rewards import task_reward
    from gcpo_train.trl import completion_text

    return [task_reward(t, completion_text(c), list(refs)) for c, refs, t in zip(completions, references, task)]


# TrainConfig fields of the gcpo loop that --backend trl does not read, and why.
TRL_IGNORES = {
    "micro_batch_size": "TRL chunks with per_device_train_batch_size and gradient_accumulation_steps",
    "track_gradvar": "gradient-variance tracking hooks the gcpo loop's backward only",
    "save_rollouts": "TRL writes no rollouts frame (log_group_measures writes the groups)",
    "max_prompt_tokens": "TRL's max_prompt_length is not set from it",
    "eps": "TRL makes the GRPO advantages; GCPO only scales them",
    "eval_max_new_tokens": "evaluation runs through TRL's eval_strategy",
    "eval_n": "evaluation runs through TRL's eval_strategy",
}


def refuse_unsupported(cfg: TrainConfig, flags: Iterable[str] = (), read_elsewhere: Iterable[str] = ()) -> None:
    """Fields with no TRL counterpart here are refused, naming them (before any file is touched);
    so is a command-line ``flag`` that --backend trl does not read (``TRL_IGNORES``). A config
    file's value of such a field is not a flag (any configs/*.yaml runs under TRL): a warning
    names the ones that differ from their defaults, except those the caller reads itself
    (``read_elsewhere``: ``gcpo compare`` evaluates with eval_max_new_tokens)."""
    refused = {"resume": "use TRL's resume_from_checkpoint", "eval_every": "use TRL's eval_strategy"}
    for key, why in refused.items():
        if getattr(cfg, key):
            raise ValueError(f"{key} has no --backend trl counterpart here ({why}); unset it")
    given = [f for f in flags if f in TRL_IGNORES]
    if given:
        reasons = "; ".join(f"--{f}: {TRL_IGNORES[f]}" for f in given)
        raise ValueError(f"--backend trl does not read {', '.join('--' + f for f in given)} ({reasons}); drop it")
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    differ = [f for f in TRL_IGNORES if getattr(cfg, f) != defaults[f] and f not in set(read_elsewhere)]
    if differ:
        warnings.warn(f"--backend trl ignores {', '.join(differ)} (set in the config)", stacklevel=1)  # once per run


def build_trl_trainer(
    cfg: TrainConfig,
    *,
    embedder=None,
    judge=None,
    queries=None,
    reward_funcs=None,
    read_elsewhere: Iterable[str] = (),
    plain_trl: bool = False,
    **overrides,
):
    """A ready GCPOTrainer for ``cfg`` (not yet trained); ``plain_trl`` builds TRL's own
    GRPOTrainer on the same workload instead (benchmarks). ``queries`` (a queries frame) replaces
    the train split and ``reward_funcs`` (a TRL reward function) gcpo's task reward, as
    ``GCPOLoopTrainer``'s keywords do; ``read_elsewhere``: see ``refuse_unsupported``."""
    from gcpo_analysis.models import is_packaged_policy
    from gcpo_train.model.policy import load_model_and_tokenizer
    from gcpo_train.trl import GCPOTrainer

    if cfg.backend != "trl":
        raise ValueError(f"build_trl_trainer needs backend: trl, got {cfg.backend!r}")
    refuse_unsupported(cfg, read_elsewhere=read_elsewhere)
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
        reward_funcs=reward_funcs or task_reward_fn,
        train_dataset=prompts_dataset(cfg, tokenizer, queries),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    if plain_trl:
        import trl

        return trl.GRPOTrainer(args=args, **common)
    return GCPOTrainer(args=args, embedder=embedder, judge=judge, **common)


def run(cfg: TrainConfig, flags: Iterable[str] = ()) -> list[dict]:
    """Train with TRL in the locked run folder, under gcpo's run-folder rules
    (``run_folder.RunFolder``: a folder holding a run needs ``overwrite``, which removes only what
    gcpo or TRL wrote; a start that fails before the first step leaves the folder as found);
    returns TRL's log history (one dict per logged step)."""
    import os

    from gcpo_train.runfiles.run_folder import RunFolder

    refuse_unsupported(cfg, flags)
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
