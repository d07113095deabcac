"""Policy loading, LoRA wrapping, the KL reference, and batched group generation.

Reference policy (the β·KL anchor): with LoRA it is the base model with the adapters switched
off (``with model.disable_adapter():``) — no second copy in memory. With full fine-tuning a
frozen deep copy is kept, which doubles the weight memory (e.g. +3 GB for a 1.5B model in
bf16; +0.5 GB for SmolLM2-135M in float32).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Any

from gcpo_analysis.models import require
from gcpo_analysis.tokens import completion_mask

from .logprobs import cache_argument, output_cache, run_prompt_once

LORA_CANDIDATES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "c_attn",
    "c_proj",
    "c_fc",
)


def load_model_and_tokenizer(name: str, dtype: str = "float32"):
    """'packaged' → offline SmolLM2-135M-Instruct; 'tiny:<family>' → random tiny model + word
    tokenizer (tests only); anything else → ``gcpo_analysis.models.load_policy(name)``."""
    torch = require("torch")
    from gcpo_analysis import models

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    if name.startswith("tiny:"):
        from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

        tok = tiny_tokenizer()
        model = tiny_causal_lm(name.split(":", 1)[1], vocab_size=len(tok)).to(torch_dtype)
        return model, tok
    model, tok = models.load_policy(name, dtype=torch_dtype)  # 'packaged' resolved there (resolve_policy)
    return model, tok


def wrap_lora(model, r: int, alpha: int, dropout: float, target_modules=None):
    """peft LoRA on the attention/MLP projections present in the model (or ``target_modules``)."""
    peft = require("peft")
    if target_modules is None:
        present = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        target_modules = [m for m in LORA_CANDIDATES if m in present] or None
    cfg = peft.LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, task_type="CAUSAL_LM"
    )
    return peft.get_peft_model(model, cfg)


class Reference:
    """Log-probabilities under π_ref: adapters disabled (LoRA) or a frozen copy (full FT)."""

    def __init__(self, model, use_lora: bool):
        self.use_lora = use_lora
        self.copy = None
        if not use_lora:
            self.copy = copy.deepcopy(model).eval()
            for p in self.copy.parameters():
                p.requires_grad_(False)

    @contextlib.contextmanager
    def model(self, policy):
        if self.use_lora:
            with policy.disable_adapter():
                yield policy
        else:
            yield self.copy


@dataclass
class TokenBatch:
    """The tokens of one generation batch: Q prompts × G rollouts as ids, masks and decoded
    texts, rows prompt-major (no rewards: ``step_data.StepRollouts`` holds them)."""

    input_ids: Any  # torch.Tensor (Q*G, P+T), prompts left-padded (torch is imported lazily)
    attention_mask: Any  # (Q*G, P+T)
    completion_mask: Any  # (Q*G, T)
    texts: list
    n_prompt: int
    prompt_ids: list | None = None  # per group, its prompt unpadded (1, P_q): what the G rollouts share

    @property
    def completion_ids(self):
        return self.input_ids[:, self.n_prompt :]

    @property
    def n_completion(self) -> int:
        return int(self.completion_mask.shape[1])


def eos_ids_of(tokenizer, model) -> list[int]:
    ids: set[int] = set()
    for src in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if src is None:
            continue
        ids.update(src if isinstance(src, (list, tuple)) else [src])
    return sorted(int(i) for i in ids)


def generate_groups(
    model,
    tokenizer,
    prompts: list[str],
    group_size: int,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    do_sample: bool = True,
    max_prompt_tokens: int | None = 1024,
    device=None,
    seeds=None,
    share_prompt: bool = True,
    kernels=None,
) -> TokenBatch:
    """Sample ``group_size`` completions per prompt.

    seeds=None: one batched ``generate`` over all prompts (evaluation). seeds (one int per
    prompt): each prompt's group is sampled in its own call right after ``torch.manual_seed``,
    so a group's rollouts depend on its seed alone — not on which prompts share its batch or
    process — and a run on N processes samples what a run on one samples. That costs batching
    across prompts; large runs generate with TRL (``--backend trl``, vLLM). With
    ``share_prompt`` the G rollouts share one prefill of their prompt (the same samples).

    Prompts are left-padded and left-truncated to ``max_prompt_tokens``; a group never spans two
    calls, so its rollouts are measured together. top_k is disabled (pure temperature/nucleus).

    ``kernels`` (``sampling.make_kernels``: a ``PackedLinears`` for ``sampling_kernels`` 'onednn'
    or 'bf16', a ``fused_decode.FusedKernels`` for 'fused' or 'fused_bf16'): all prompts in one ``sampling.decode``
    loop on prepacked weights, each group drawn from its own ``torch.Generator(seed)``; the same
    samples up to float rounding (see ``gcpo_train.sampling``).
    """
    torch = require("torch")
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        do_sample=do_sample,
        max_prompt_tokens=max_prompt_tokens,
        device=device,
    )
    if kernels is not None:
        return _decode_packed(model, tokenizer, prompts, group_size, kernels, seeds=seeds, **kwargs)
    if seeds is None:
        return _generate(model, tokenizer, prompts, group_size, **kwargs)
    if len(seeds) != len(prompts):
        raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
    parts = []
    for prompt, seed in zip(prompts, seeds):
        torch.manual_seed(int(seed))
        part = _generate(model, tokenizer, [prompt], group_size, shared_prefill=share_prompt, **kwargs)
        part.prompt_ids = [part.input_ids[:1, : part.n_prompt]]
        parts.append(part)
    return concat_token_batches(parts, tokenizer.pad_token_id)


def concat_token_batches(parts: list[TokenBatch], pad_token_id: int) -> TokenBatch:
    """One batch from several: prompts left-padded to the longest, completions right-padded."""
    torch = require("torch")
    pad = torch.nn.functional.pad
    n_prompt = max(b.n_prompt for b in parts)
    n_completion = max(b.n_completion for b in parts)
    ids, attention, completion = [], [], []
    for b in parts:
        left, right = n_prompt - b.n_prompt, n_completion - b.n_completion
        ids.append(pad(b.input_ids, (left, right), value=pad_token_id))
        attention.append(pad(b.attention_mask, (left, right), value=0))
        completion.append(pad(b.completion_mask, (0, right), value=0))
    prompt_ids = [p for b in parts for p in b.prompt_ids or ()] if all(b.prompt_ids for b in parts) else None
    return TokenBatch(
        input_ids=torch.cat(ids),
        attention_mask=torch.cat(attention),
        completion_mask=torch.cat(completion),
        texts=[t for b in parts for t in b.texts],
        n_prompt=n_prompt,
        prompt_ids=prompt_ids,
    )


def _encode(tokenizer, prompts, max_prompt_tokens, device):
    """Prompts left-padded and left-truncated to ``max_prompt_tokens`` (None: no cap)."""
    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    keep = slice(None) if max_prompt_tokens is None else slice(-max_prompt_tokens, None)
    ids, att = enc["input_ids"][:, keep], enc["attention_mask"][:, keep]
    if device is not None:
        ids, att = ids.to(device), att.to(device)
    return ids, att


def _decode_packed(
    model,
    tokenizer,
    prompts,
    group_size,
    kernels,
    *,
    seeds,
    max_new_tokens,
    temperature,
    top_p,
    do_sample,
    max_prompt_tokens,
    device,
) -> TokenBatch:
    """``generate_groups`` with ``kernels``: one ``sampling.decode`` over all prompts."""
    torch = require("torch")
    from .sampling import decode

    ids, att = _encode(tokenizer, prompts, max_prompt_tokens, device)
    grouped, generators = seeds is not None, None
    if do_sample:
        if seeds is None:  # each prompt its own stream, seeded from the global generator
            seeds = torch.randint(2**31, (len(prompts),)).tolist()
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        generators = [torch.Generator(device=ids.device).manual_seed(int(s)) for s in seeds]
    eos = eos_ids_of(tokenizer, model)
    with kernels.applied(model):
        seqs = decode(
            model,
            ids,
            att,
            group_size,
            max_new_tokens=max_new_tokens,
            eos_ids=eos,
            pad_token_id=tokenizer.pad_token_id,
            generators=generators,
            temperature=temperature,
            top_p=top_p,
            step=getattr(kernels, "decode_step", None),
        )
    batch = _token_batch(seqs, att, group_size, eos, tokenizer)
    if grouped:  # groups: each its prompt unpadded, as generate_groups(seeds=...) gives
        batch.prompt_ids = [ids[q : q + 1, att[q].bool()] for q in range(len(prompts))]
    return batch


def _generate(
    model,
    tokenizer,
    prompts,
    group_size,
    *,
    max_new_tokens,
    temperature,
    top_p,
    do_sample,
    max_prompt_tokens,
    device,
    shared_prefill=False,
) -> TokenBatch:
    torch = require("torch")
    ids, att = _encode(tokenizer, prompts, max_prompt_tokens, device)
    eos = eos_ids_of(tokenizer, model)
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        num_return_sequences=group_size,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=eos or None,
    )
    if do_sample:
        kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    with torch.no_grad():
        if shared_prefill and ids.shape[0] == 1 and ids.shape[1] > 1 and group_size > 1:
            # the G rollouts of one prompt share its prefill: run the prompt once, repeat its
            # keys/values G times and let generate() continue from them (same samples, 1/G of the
            # prefill's cost)
            cache = output_cache(run_prompt_once(model, ids[:, :-1], group_size, attention_mask=att[:, :-1]))
            kwargs.update({"num_return_sequences": 1, cache_argument(model) or "past_key_values": cache})
            seqs = model.generate(
                input_ids=ids.repeat_interleave(group_size, dim=0),
                attention_mask=att.repeat_interleave(group_size, dim=0),
                **kwargs,
            )
        else:
            seqs = model.generate(input_ids=ids, attention_mask=att, **kwargs)
    return _token_batch(seqs, att, group_size, eos, tokenizer)


def _token_batch(seqs, att, group_size, eos, tokenizer) -> TokenBatch:
    """The ``TokenBatch`` of sequences (Q·G, P + T) continuing prompts whose mask is ``att`` (Q, P)."""
    torch = require("torch")
    n_prompt = att.shape[1]
    comp = seqs[:, n_prompt:]
    if comp.shape[1] == 0:
        raise RuntimeError("generate returned no new tokens; check max_new_tokens")
    cmask = completion_mask(comp, eos)  # up to and including the first EOS
    att_full = torch.cat([att.repeat_interleave(group_size, dim=0), cmask.to(att.dtype)], dim=1)
    texts = [tokenizer.decode(row[m.bool()], skip_special_tokens=True).strip() for row, m in zip(comp, cmask)]
    return TokenBatch(input_ids=seqs, attention_mask=att_full, completion_mask=cmask, texts=texts, n_prompt=n_prompt)
