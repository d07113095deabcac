"""Batched group generation: each query's prompt once, G completions sampled from it, cut at
their first EOS into a ``TokenBatch`` (token ids, masks, texts).

Every sampler draws from π_θ at the caller's temperature and top-p, or takes its argmax (greedy),
and from nothing else: the model folder's ``generation_config`` (an instruct checkpoint's
``repetition_penalty``, ``top_k``, ``no_repeat_ngram_size``, ``do_sample``...) is ignored, by
every sampler alike. The GRPO loss scores the rollouts under softmax(logits / T) with top-p, so
a sampler that applied the folder's settings would sample another policy than the one the loss
assumes. The packed samplers never read it; transformers ``generate`` fills every
setting a call leaves unset from the model's own ``generation_config``, so ``_generate`` runs
with a default one in its place (``model_defaults_ignored``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from gcpo_analysis.models import require
from gcpo_analysis.tokens import completion_mask
from gcpo_train.model.logprobs import cache_argument, output_cache, run_prompt_once
from gcpo_train.model.policy import eos_ids_of


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

    ``kernels`` (``sampling.registry.make_kernels``: a ``PackedLinears`` for ``sampling_kernels`` 'onednn'
    or 'bf16', a ``fused_decode.FusedKernels`` for 'fused' or 'fused_bf16'): all prompts in one ``sampling.decode``
    loop on prepacked weights, each group drawn from its own ``torch.Generator(seed)``; the same
    samples up to float rounding (see ``gcpo_train.sampling.kernels``).
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
    from gcpo_train.sampling.kernels import decode

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


@contextlib.contextmanager
def model_defaults_ignored(model):
    """While inside, every module of ``model`` that carries a ``generation_config`` (the causal LM,
    also under a peft wrapper) has a default ``GenerationConfig`` instead, so that ``generate``
    applies the settings of its call and transformers' global defaults, not the model folder's."""
    from transformers import GenerationConfig

    swapped = [
        (module, module.generation_config)
        for module in model.modules()
        if isinstance(vars(module).get("generation_config"), GenerationConfig)
    ]
    try:
        for module, _ in swapped:
            module.generation_config = GenerationConfig()
        yield model
    finally:
        for module, own in swapped:
            module.generation_config = own


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
    with torch.no_grad(), model_defaults_ignored(model):
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
