"""Each group's prompt runs once in TRL's log-prob passes (``GCPOConfig.share_prompt``).

TRL's ``GRPOTrainer._get_per_token_logps_and_entropies`` runs every row [prompt | completion]
in full, so a group's prompt runs G times in the training forward and backward, the old-policy
pass and the reference pass. ``SharedPromptMixin`` overrides that hook: inside each of TRL's
chunks (its ``batch_size``), the rows whose prompt tokens and prompt mask are identical form one
group; the prompt runs once (``logprobs.run_prompt_once``, left padding and all), its keys/values
are repeated for the group's rows and the completions run on that cache — the code of
``logprobs.group_logprobs_and_entropy``, the same path our own loop uses. The numbers are TRL's up
to float rounding:

    log pi(c_t | prompt, c_<t) from the prompt's last logit (t = 0) and the completion logits
    (t >= 1), at TRL's temperature, positions and masks; 0 where the completion mask is 0.

Generation (transformers, not vLLM): TRL's ``generate`` call gets G copies of each prompt and
prefills all of them. ``_generate_single_turn`` wraps that call (not a copy of TRL's method):
each distinct prompt but its last token runs once (``logprobs.run_prompt_once`` at generate's
positions, ``gcpo_analysis.tokens.position_ids``), its cache is copied to its rows and
``generate`` continues from there, with its own sampler and random draws (metric
``gcpo/shared_prefill``).

The idea (one prompt forward, a cache shared by its G completions) is the one of TRL's
unmerged "GRPO VRAM Optimization" pull request (huggingface/trl #2669); the code is ours.

Falls back to TRL's own pass, named once in a warning (an info line for share_prompt=False) and in the metric
``gcpo/shared_prompt`` (the fraction of the step's hook calls that shared: 1 all, 0 none), when:
share_prompt is off; the hook's signature is not TRL 1.16's; active dropout (TRL keeps the
model's dropout by default; the G rows would share one mask on their prompt); gradient
checkpointing, TRL's default (the training forward only, which then keeps no cache; TRL turns
checkpointing off for the old-policy and reference passes, which still share); DeepSpeed ZeRO-3
or FSDP (sharded parameters, not tested here); a model whose forward takes no key/value cache
(``cache``, or ``past_key_values`` before transformers 5.24); a prompt-learning PEFT adapter;
multimodal inputs; TRL's MoE aux loss; TRL's entropy bonus (it needs gradients through the entropy).
The shared prefill also falls back (metric ``gcpo/shared_prefill``) for a generation setting it
does not implement (``generation_config_fallback``: beam search and every mode but greedy and
sampling, ``num_return_sequences`` > 1, ``use_cache=False``) and for a ``generate`` replaced on
the model instance (a test's ``patch.object``), which then receives TRL's own call.
"""

from __future__ import annotations

import inspect
import logging
from contextlib import contextmanager
from typing import Any

import torch

logger = logging.getLogger(__name__)

# TRL 1.16's GRPOTrainer._get_per_token_logps_and_entropies, parameter names in order
HOOK_PARAMETERS = (
    "self",
    "model",
    "input_ids",
    "attention_mask",
    "logits_to_keep",
    "batch_size",
    "compute_entropy",
    "compute_aux_loss",
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def hook_matches(cls) -> bool:
    """Whether ``cls._get_per_token_logps_and_entropies`` (TRL's) has the signature written against."""
    return tuple(inspect.signature(cls._get_per_token_logps_and_entropies).parameters) == HOOK_PARAMETERS


def static_fallback(trainer, base_cls, generation: bool = False) -> str | None:
    """Why the shared-prompt pass (``generation``: the shared prefill) cannot run for this
    trainer at all (None: it can)."""
    from gcpo_train.model.logprobs import cache_argument

    args = trainer.args
    if not getattr(args, "share_prompt", False):
        return "share_prompt=False"
    if not hook_matches(base_cls):
        return (
            "TRL's _get_per_token_logps_and_entropies has another signature than TRL 1.16's "
            f"(got {tuple(inspect.signature(base_cls._get_per_token_logps_and_entropies).parameters)})"
        )
    if getattr(trainer, "is_fsdp_enabled", False):
        return "FSDP (sharded parameters; the shared-prompt pass is not tested under FSDP)"
    plugin = getattr(getattr(trainer.accelerator, "state", None), "deepspeed_plugin", None)
    if getattr(trainer, "is_deepspeed_enabled", False) and getattr(plugin, "zero_stage", None) == 3:
        return "DeepSpeed ZeRO-3 (sharded parameters; the shared-prompt pass is not tested under ZeRO-3)"
    if cache_argument(trainer.model) is None:
        return f"the model ({type(trainer.model).__name__}) takes no key/value cache (no cache/past_key_values)"
    peft_cfg = getattr(trainer.model, "active_peft_config", None)
    if peft_cfg is not None and getattr(peft_cfg, "is_prompt_learning", False):
        return "a prompt-learning PEFT adapter (virtual tokens are prepended to every row)"
    if not generation and getattr(trainer, "_entropy_bonus_enabled", False):
        return "TRL's entropy bonus (it needs gradients through the entropy; the shared pass gives them none)"
    return None


def active_dropout(model) -> bool:
    """Whether a forward of ``model`` now drops out (training mode and a dropout rate > 0)."""
    if not model.training:
        return False
    if float(getattr(getattr(model, "config", None), "attention_dropout", 0.0) or 0.0) > 0:
        return True
    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 and m.training for m in model.modules())


def call_fallback(
    compute_aux_loss: bool, extra: dict, checkpointing: bool = False, dropout: bool = False
) -> str | None:
    """Why this call keeps TRL's pass (None: it can share). ``checkpointing``: the model
    recomputes activations in this (gradient-carrying) forward, which then keeps no cache; TRL
    switches checkpointing off for its no-gradient old-policy and reference passes, which share.
    ``dropout``: the G rows would share one dropout mask on their prompt instead of G masks."""
    if dropout:
        return "active dropout (the G rows would share their prompt's dropout mask; set disable_dropout=True)"
    if checkpointing:
        return "gradient checkpointing (TRL's default; the checkpointed training forward keeps no cache)"
    if compute_aux_loss:
        return "TRL's MoE load-balancing aux loss (compute_aux_loss=True)"
    given = sorted(k for k, v in extra.items() if v is not None)
    if given:
        return f"multimodal inputs ({', '.join(given)})"
    return None


def prompt_groups(prompt_ids, prompt_mask) -> list[list[int]]:
    """Rows with identical prompt tokens and mask, in first-seen order (TRL's layout puts a
    group's G rows next to each other, but nothing here relies on it)."""
    key_rows = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1).cpu()
    groups: dict[bytes, list[int]] = {}
    for i, row in enumerate(key_rows):
        groups.setdefault(row.numpy().tobytes(), []).append(i)
    return list(groups.values())


def shared_prompt_logps(
    model,
    input_ids,
    attention_mask,
    logits_to_keep: int,
    batch_size=None,
    *,
    compute_entropy=False,
    temperature=1.0,
    prompt_model=None,
):
    """TRL's per-token log-probs (and entropies) of [prompt | completion] rows, each distinct
    prompt of a chunk run once (``logprobs.group_logprobs_and_entropy``). Returns (logps, entropies
    or None), both (B, logits_to_keep) at TRL's temperature, zero where the completion mask is 0
    (as TRL's)."""
    from gcpo_train.model.logprobs import group_logprobs_and_entropy

    T = logits_to_keep
    batch_size = batch_size or input_ids.size(0)
    logps, entropies = [], []
    for start in range(0, input_ids.size(0), batch_size):
        ids, att = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
        p_ids, p_mask, c_ids, c_mask = ids[:, :-T], att[:, :-T], ids[:, -T:], att[:, -T:]
        parts, order = [], []
        for rows in prompt_groups(p_ids, p_mask):
            r = torch.as_tensor(rows, device=ids.device)
            first = rows[0]
            parts.append(
                group_logprobs_and_entropy(
                    model,
                    p_ids[first : first + 1],
                    c_ids[r],
                    c_mask[r],
                    temperature,
                    compute_entropy,
                    prompt_model,
                    prompt_mask=p_mask[first : first + 1],
                )
            )
            order.extend(rows)
        inverse = torch.argsort(torch.as_tensor(order, device=ids.device))
        mask = c_mask.to(torch.float32)
        logps.append(torch.cat([p.logp for p in parts])[inverse] * mask)
        if compute_entropy:
            entropies.append(torch.cat([p.entropy for p in parts])[inverse] * mask)
    return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None)


def prefill_plan(input_ids, attention_mask):
    """(first row of each distinct prompt, each row's prompt number) of a generate batch, or None
    when no two rows share a prompt or the prompt has one token (nothing to prefill)."""
    groups = prompt_groups(input_ids, attention_mask)
    if len(groups) == input_ids.size(0) or input_ids.size(1) < 2:
        return None
    index = torch.empty(input_ids.size(0), dtype=torch.long)
    for k, rows in enumerate(groups):
        index[rows] = k
    return [rows[0] for rows in groups], index.to(input_ids.device)


# generate's keyword arguments that change the decoding away from one row per prompt row (the
# trainer's check reads its GenerationConfig; these guard a direct call of the wrapper)
WIDENING_ARGUMENTS = ("num_beams", "num_return_sequences", "assistant_model", "prompt_lookup_num_tokens", "use_cache")


def shared_prefill_generate(model, generate):
    """``generate`` (a model's bound method, TRL's call ``generate(input_ids=..., attention_mask=...,
    generation_config=...)``) whose prompts' prefill runs once per distinct prompt: all but the
    last prompt token run through ``logprobs.run_prompt_once`` at generate's own positions
    (``gcpo_analysis.tokens.position_ids``), the cache is copied to the prompt's rows, and ``generate`` continues
    from it (only the last prompt token and the new tokens run per row). The sampler and its
    random draws are generate's, so the samples are the plain call's up to float rounding."""
    from gcpo_analysis.prompt_cache import CACHE_ARGUMENTS
    from gcpo_analysis.tokens import position_ids
    from gcpo_train.model.logprobs import cache_argument, output_cache, run_prompt_once

    def wrapped(*args, input_ids=None, attention_mask=None, **kwargs):
        plan = (
            None
            if (
                args
                or attention_mask is None
                or any(k in kwargs for k in CACHE_ARGUMENTS + WIDENING_ARGUMENTS)
                or generation_config_fallback(kwargs.get("generation_config")) is not None
            )
            else prefill_plan(input_ids, attention_mask)
        )
        if plan is None:
            return generate(*args, input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        firsts, index = plan
        positions = position_ids(attention_mask)  # generate's rule
        with torch.no_grad():
            cache = output_cache(
                run_prompt_once(
                    model,
                    input_ids[firsts, :-1],
                    1,
                    attention_mask=attention_mask[firsts, :-1],
                    position_ids=positions[firsts, :-1],
                )
            )
        cache.batch_select_indices(index)
        kwargs[cache_argument(model) or "past_key_values"] = cache
        return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    return wrapped


@contextmanager
def wrapped_generate(target):
    """``target.generate`` wrapped by ``shared_prefill_generate`` inside the block; afterwards the
    instance holds exactly what it held before: its own ``generate`` (a test's ``patch.object``)
    put back, or none, so the class's method shows through again."""
    missing = object()
    before = vars(target).get("generate", missing)
    target.generate = shared_prefill_generate(target, target.generate)
    try:
        yield
    finally:
        if before is missing:
            del target.generate
        else:
            target.generate = before


def generation_fallback(trainer, images, multimodal_fields) -> str | None:
    """Why TRL's generation keeps its G prefills per prompt (None: one prefill per prompt)."""
    if getattr(trainer, "use_vllm", False):
        return "vLLM generation (vLLM has its own prefix cache)"
    if getattr(trainer.args, "use_transformers_paged", False):
        return "transformers' paged generation (generate_batch)"
    if images is not None or multimodal_fields:
        return "multimodal inputs"
    if getattr(trainer.generation_config, "cache_implementation", None) is not None:
        return f"cache_implementation={trainer.generation_config.cache_implementation!r}"
    reason = generation_config_fallback(trainer.generation_config)
    if reason is not None:
        return reason
    target = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    if "generate" in vars(target):
        return "model.generate is replaced on the instance (a patch receives TRL's call unchanged)"
    return None


# the decoding modes whose batch stays one row per prompt row, continuing from a given cache
SHARED_PREFILL_MODES = ("greedy_search", "sample")


def generation_config_fallback(config) -> str | None:
    """Why a ``GenerationConfig`` is one the shared prefill does not implement (None: it is):
    beam search and the other modes widen or reorder the batch (B x num_beams rows, candidate
    tokens, contrastive look-ahead) past the B-row cache; ``num_return_sequences`` > 1 repeats
    each row; ``use_cache=False`` decodes without a cache."""
    if config is None:
        return None
    mode = config.get_generation_mode()
    if str(getattr(mode, "value", mode)) not in SHARED_PREFILL_MODES:
        return (
            f"the generation mode {getattr(mode, 'value', mode)} (num_beams={config.num_beams}; "
            f"the shared prefill implements {' and '.join(SHARED_PREFILL_MODES)} only)"
        )
    if (config.num_return_sequences or 1) > 1:
        return f"num_return_sequences={config.num_return_sequences} (the shared prefill keeps one row per prompt row)"
    if config.use_cache is False:
        return "use_cache=False (generation keeps no cache to share)"
    return None


class SharedPromptMixin:
    """Overrides TRL's ``_get_per_token_logps_and_entropies`` (see the module docstring). Mixed
    in before ``trl.GRPOTrainer``; the trainer's ``args`` carries ``share_prompt``."""

    # set by trl.GRPOTrainer, the class this is mixed into
    model: Any
    _metrics: dict
    gcpo_prompt_fallbacks: set[tuple[str, str]]

    def _gcpo_note_fallback(self, reason: str | None, metric: str = "gcpo/shared_prompt", what: str = "pass") -> None:
        if not hasattr(self, "gcpo_prompt_fallbacks"):
            self.gcpo_prompt_fallbacks = set()
        mode = "train" if self.model.training else "eval"
        self._metrics[mode][metric].append(0.0 if reason else 1.0)
        if reason and (what, reason) not in self.gcpo_prompt_fallbacks:
            self.gcpo_prompt_fallbacks.add((what, reason))
            # a fallback the user did not ask for is a warning (never silent), share_prompt=False an info
            say = logger.info if reason == "share_prompt=False" else logger.warning
            say("GCPOTrainer: each group's prompt runs G times (TRL's own %s), because of %s", what, reason)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
        from trl import GRPOTrainer

        reason = static_fallback(self, GRPOTrainer, generation=True) or generation_fallback(
            self, images, multimodal_fields
        )
        self._gcpo_note_fallback(reason, "gcpo/shared_prefill", "generation prefill")
        if reason is not None:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
            )
        # TRL generates with accelerator.unwrap_model(model_wrapped): wrap that object's generate for this call
        target = self.accelerator.unwrap_model(self.model_wrapped)
        with wrapped_generate(target):
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
            )

    def _gcpo_static_fallback(self):
        if not hasattr(self, "_gcpo_static"):
            from trl import GRPOTrainer

            self._gcpo_static = static_fallback(self, GRPOTrainer)
        return self._gcpo_static

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        *args,
        **kwargs,
    ):
        reason = self._gcpo_static_fallback()
        if reason is None:
            inner_model = self.accelerator.unwrap_model(model)
            flag = (
                "is_activation_checkpointing"
                if hasattr(inner_model, "is_activation_checkpointing")
                else "is_gradient_checkpointing"
            )  # renamed in transformers 5
            checkpointing = torch.is_grad_enabled() and bool(getattr(inner_model, flag, False))
            reason = (
                "positional multimodal arguments"
                if args
                else call_fallback(compute_aux_loss, kwargs, checkpointing, active_dropout(inner_model))
            )
        self._gcpo_note_fallback(reason)
        if reason is not None:
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                *args,
                **kwargs,
            )
        # under DDP the prompt runs on the wrapped module, so that DDP sees one forward per backward
        inner = self.accelerator.unwrap_model(model, keep_torch_compile=False) if hasattr(model, "module") else None
        with self.accelerator.autocast():
            logps, entropies = shared_prompt_logps(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy=compute_entropy,
                temperature=self.temperature,
                prompt_model=inner,
            )
        return logps, entropies, None
