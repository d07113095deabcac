"""The fast CPU sampler: all groups of a step in one decode loop, with prepacked oneDNN weights.

``TrainConfig.sampling_kernels`` picks how rollouts are decoded (the names and their declared
properties: ``gcpo_train.sampling.registry``):

* ``exact`` (default): ``transformers`` ``generate``, one call per group right after
  ``torch.manual_seed(group seed)`` (``policy.generate_groups``): today's samples, bit for bit.
* ``onednn``: this module. The step's Q prompts are decoded together (Q·G rows, prompt-major),
  each group's tokens drawn with its own ``torch.Generator`` seeded with the group's seed, so a
  group's random numbers depend on its seed alone, as with ``exact``. Every ``torch.nn.Linear``
  runs on fp32 weights prepacked once for oneDNN (``torch.ops.mkldnn._linear_pointwise``), and
  the keys/values are written in place into buffers sized for the whole completion
  (``growing_kv_layer``) instead of being concatenated at every token. The math is the same
  (temperature, top-p, softmax, ``torch.multinomial``); what differs is float rounding: another
  GEMM kernel, and a row's logits computed in a batch of Q·G rows instead of G. The logits agree
  to about 1e-5 relative, so a token differs from ``exact``'s only when a draw lands that close
  to a boundary of the sampling distribution (rare; tested on a tiny model).
* ``bf16``: as ``onednn`` with the weights and activations of the linear layers rounded to
  bfloat16 (fp32 accumulation) for the CPU's bf16 instructions. The samples then come from a
  policy a bf16 rounding away from π_θ, while the loss scores them under π_θ in the run's dtype:
  a small off-policy gap, as with a vLLM sampler in bf16.
* ``fused``: as ``onednn`` (the same loop, generators and draws), with a hand-written decode
  step for Llama models instead of the transformers forward (``fused_decode.py``): q/k/v and
  gate/up each one packed GEMM, LoRA as a low-rank term, RoPE precomputed, the prompt's
  keys/values shared by a group's rows. Float rounding again: logits agree with the model's to
  about 1e-5 relative. Models it does not implement are refused, naming 'onednn'.
* ``fused_bf16``: ``fused`` with the base weights packed in bfloat16 and the linear layers'
  inputs rounded to it (fp32 accumulation; LoRA's adapters, norms, attention and the draw stay
  fp32): half the weight bytes to stream per token. Samples from a bf16 rounding of the policy,
  as with ``bf16``.

Why: on a CPU, MKL's fp32 GEMM at 8–16 rows runs well below memory speed (measured on an AMD
EPYC: 6 GB/s on the 113 MB embedding matrix at 8 rows, oneDNN 14 GB/s), so a decode step costs
about three times the time it takes to stream the weights (``bench/sampling.py``).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

from gcpo_analysis.models import require
from gcpo_analysis.tokens import position_ids
from gcpo_train.model.logprobs import cache_argument, output_cache, run_prompt_once


class PackedLinears:
    """Every ``torch.nn.Linear`` of a model run on weights prepacked for oneDNN, while in
    ``applied(model)``. A packed weight is kept and reused until its tensor changes (a frozen
    base weight under LoRA is packed once per run; adapters and fully fine-tuned weights are
    repacked after each optimizer step), at the cost of one packed copy of the weights in memory."""

    def __init__(self, bf16: bool = False, rows_hint: int = 16, name: str | None = None):
        self.bf16 = bf16
        self.name = name or ("bf16" if bf16 else "onednn")  # the sampler's (registry.Sampler.name)
        self.rows_hint = rows_hint
        self._packed: dict[int, tuple] = {}  # id(module) -> (weight version key, packed weight, bias)

    def _pack(self, module):
        torch = require("torch")
        w = module.weight
        key = (w.data_ptr(), w._version, w.dtype)
        hit = self._packed.get(id(module))
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        dtype = torch.bfloat16 if self.bf16 else w.dtype
        packed = torch.ops.mkldnn._reorder_linear_weight(w.detach().to(dtype), self.rows_hint)
        bias = None if module.bias is None else module.bias.detach().to(dtype)
        self._packed[id(module)] = (key, packed, bias)
        return packed, bias

    @contextlib.contextmanager
    def applied(self, model):
        torch = require("torch")
        linear_pointwise = torch.ops.mkldnn._linear_pointwise
        patched = []
        cast = self.bf16  # bf16 in, fp32 accumulation, back to the model's dtype
        try:
            for module in model.modules():
                if type(module) is not torch.nn.Linear:
                    continue
                packed, bias = self._pack(module)

                def forward(x, packed=packed, bias=bias, out_dtype=module.weight.dtype):
                    if not cast:
                        return linear_pointwise(x, packed, bias, "none", [], "")
                    return linear_pointwise(x.to(packed.dtype), packed, bias, "none", [], "").to(out_dtype)

                module.forward = forward  # an instance attribute shadows the class's forward
                patched.append(module)
            yield model
        finally:
            for module in patched:
                del module.forward


def grow_cache(cache, capacity: int):
    """Turn each ``DynamicLayer`` of ``cache`` into a growing layer of ``capacity`` positions
    (other layer types, e.g. sliding windows, keep their own update)."""
    from transformers.cache_utils import DynamicLayer

    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized:
            cache.layers[i] = growing_kv_layer().from_layer(layer, capacity)
    return cache


@functools.cache
def growing_kv_layer():
    """The ``GrowingKVLayer`` class (defined on first use: importing this module needs no transformers)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingKVLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys/values live in buffers of a fixed capacity: ``update``
        writes the new positions in place and exposes the filled part as a view, so a decode step
        copies one position per layer instead of the whole cache (``torch.cat``). The attention
        reads the same values as with ``DynamicLayer``."""

        _keys: Any  # (B, H, capacity, D) buffers; keys/values are views of their first _n positions
        _values: Any
        _n: int

        @classmethod
        def from_layer(cls, layer, capacity: int):
            new = cls()
            b, h, n, d = layer.keys.shape
            new.dtype, new.device, new.is_initialized = layer.keys.dtype, layer.keys.device, True
            new._keys = layer.keys.new_empty(b, h, max(capacity, n), d)
            new._values = layer.values.new_empty(b, h, max(capacity, layer.values.shape[-2]), layer.values.shape[-1])
            new._keys[:, :, :n] = layer.keys
            new._values[:, :, :n] = layer.values
            new._n = n
            new.keys, new.values = new._keys[:, :, :n], new._values[:, :, :n]
            return new

        def update(self, key_states, value_states, *args, **kwargs):
            n, q = self._n, key_states.shape[-2]
            if n + q > self._keys.shape[-2]:  # past the capacity: grow as DynamicLayer does
                self._n = n + q
                return super().update(key_states, value_states, *args, **kwargs)
            self._keys[:, :, n : n + q] = key_states
            self._values[:, :, n : n + q] = value_states
            self._n = n + q
            self.keys, self.values = self._keys[:, :, : n + q], self._values[:, :, : n + q]
            return self.keys, self.values

    return GrowingKVLayer


def decode(
    model,
    input_ids,
    attention_mask,
    group_size: int,
    *,
    max_new_tokens: int,
    eos_ids: list[int],
    pad_token_id: int,
    generators=None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    step=None,
):
    """Decode ``group_size`` continuations of each of Q left-padded prompts in one loop.

    input_ids, attention_mask: (Q, P). Returns (Q·G, P + T) token ids, rows prompt-major, T ≤
    ``max_new_tokens`` (the loop stops when every row has emitted an EOS; later tokens of a
    finished row are ``pad_token_id``). ``generators``: one ``torch.Generator`` per prompt
    (sampling), or None (greedy). The steps are ``generate``'s: each prompt runs once without its
    last token and its keys/values serve its G rows; the last prompt token is the first
    decode step; positions count the prompt's real tokens (``attention_mask.cumsum − 1``); the
    next-token scores are logits / temperature, then top-p (``transformers.TopPLogitsWarper``),
    softmax and ``torch.multinomial`` on the group's generator; greedy takes the argmax.
    ``step(model, input_ids, attention_mask, positions, G, max_new_tokens)`` runs the prefill and
    returns the next-token logits function ``(tokens (Q·G, 1), t) -> (Q·G, V)`` of the decode
    (``model_step``: the model's own forward; ``fused_decode.FusedKernels.decode_step``).
    """
    torch = require("torch")
    Q, P = input_ids.shape
    G = group_size
    if generators is not None and len(generators) != Q:
        raise ValueError(f"{len(generators)} generators for {Q} prompts")
    if P < 2:
        raise ValueError("decode needs prompts of at least 2 tokens (the prompt runs once without its last token)")
    warpers: list = []
    if generators is not None:
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        if temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(temperature))
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p))
    positions = position_ids(attention_mask)
    eos = torch.tensor(eos_ids, dtype=input_ids.dtype, device=input_ids.device)
    rows = Q * G
    tokens = input_ids.new_full((rows, max_new_tokens), pad_token_id)
    unfinished = torch.ones(rows, dtype=torch.bool, device=input_ids.device)
    with torch.no_grad():
        next_logits = (step or model_step)(model, input_ids, attention_mask, positions, G, max_new_tokens)
        current = input_ids[:, -1:].repeat_interleave(G, dim=0)
        T = 0
        for t in range(max_new_tokens):
            scores = next_logits(current, t)
            if generators is None:
                nxt = scores.argmax(-1)
            else:
                for warp in warpers:
                    scores = warp(None, scores)
                probs = torch.softmax(scores, dim=-1)
                nxt = torch.cat(
                    [
                        torch.multinomial(probs[q * G : (q + 1) * G], 1, generator=g).squeeze(1)
                        for q, g in enumerate(generators)
                    ]
                )
            nxt = torch.where(unfinished, nxt, pad_token_id)
            tokens[:, t] = nxt
            T = t + 1
            unfinished &= ~torch.isin(nxt, eos)
            if not unfinished.any():
                break
            current = nxt[:, None]
    return torch.cat([input_ids.repeat_interleave(G, dim=0), tokens[:, :T]], dim=1)


def model_step(model, input_ids, attention_mask, positions, group_size: int, max_new_tokens: int):
    """``decode``'s prefill and steps by the model's forward: each prompt (Q, P) runs once without
    its last token, its keys/values repeated G times into buffers for the whole completion
    (``grow_cache``); returns the next-token logits ``(tokens (Q·G, 1), t) -> (Q·G, V)`` float32
    of decode step t, which writes the cache in place. positions (Q, P): the prompt tokens'."""
    torch = require("torch")
    G, P = group_size, input_ids.shape[1]
    prefill = run_prompt_once(
        model, input_ids[:, :-1], G, attention_mask=attention_mask[:, :-1], position_ids=positions[:, :-1]
    )
    cache = grow_cache(output_cache(prefill), P + max_new_tokens)
    del prefill
    rows = input_ids.shape[0] * G
    att = torch.cat([attention_mask.repeat_interleave(G, dim=0), attention_mask.new_ones(rows, max_new_tokens)], dim=1)
    position = positions[:, -1:].repeat_interleave(G, dim=0)
    name = cache_argument(model) or "past_key_values"

    def step(tokens, t):
        out = model(
            input_ids=tokens,
            attention_mask=att[:, : P + t],
            position_ids=position + t,
            **{name: cache},
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1].to(copy=True, dtype=torch.float32)

    return step
