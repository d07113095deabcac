"""``sampling_kernels: fused``: a hand-written forward for Llama models, on prepacked weights.

``sampling.decode`` with ``onednn`` calls the transformers model once per token; at 8 rows about
half of that step is not the linear layers but the modeling code around them (module dispatch per
layer, the attention mask and position embeddings rebuilt per call, cache bookkeeping, peft's
LoRA layers). Here ``FusedKernels.decode_step`` runs the prompts' prefill and every decode token
through one loop over the layers with the same math as ``LlamaForCausalLM``:

    h   = x · rsqrt(mean(x²) + ε) · w₁                       RMSNorm (``LlamaRMSNorm``)
    qkv = h · [W_q; W_k; W_v]ᵀ (+ LoRA)                        ONE packed GEMM for the three
    q, k ← q·cos + rotate_half(q)·sin                          RoPE; cos/sin from the model's own
                                                               ``rotary_emb``, once per decode
    a   = softmax(q·kᵀ/√d + mask) · v                          over the row's real prompt tokens
                                                               and its completion so far
    x  += a · W_oᵀ;  h = RMSNorm(x) · w₂
    x  += (silu(h·W_gateᵀ) ⊙ h·W_upᵀ) · W_downᵀ                ONE packed GEMM for gate and up
    logits = RMSNorm(x) · W_headᵀ                              the last position only

The prefill runs each prompt once without its last token (causal attention); its keys/values are
kept once per group, and a decode step attends to them with the G rows' query heads together
(the n_rep query heads of a KV head as n_rep queries, transformers' ``pack_gqa``, times G rows),
in one call with the group's completion keys (the other rows' masked) while G·T is small
(``ONE_CALL_KEYS``), else as two parts merged by their log-sum-exps. Inside ``prefixes_shared``
(greedy evaluation) the linear layers of the prefill see each distinct (prefix, position) of the
batch once (``prefixes.prefill_rows``); the attention gathers them back into the padded layout.

LoRA (peft, the trainer's policy): each projection adds x·Aᵀ·(s·B)ᵀ; the adapters of a fused
projection are stacked (A rows concatenated, s·B block-diagonal), so q/k/v cost one low-rank
product pair. The base weights are packed once for oneDNN and kept while their tensors are
unchanged; the adapters and biases are read at every ``decode`` call, so an optimizer step is
seen at once.

The numbers differ from ``onednn``'s by float rounding only: q/k/v (and gate/up) as one GEMM,
the prefill on packed weights too, the attention's summation order, the LoRA scaling folded
into B. Logits agree with the transformers model's full forward to about 1e-5 relative
(tests/train/test_fused_decode.py); a sampled token differs only when a draw lands that close to
a boundary of the sampling distribution. ``fused_bf16`` (``FusedKernels(bf16=True)``) packs the
base weights in bfloat16 and rounds each linear layer's input to it (oneDNN accumulates in fp32
and returns bf16, read back as fp32); LoRA, norms, RoPE, attention and the logits' softmax stay
fp32. Its logits equal a full forward with every base linear layer so rounded up to summation
order (tests), and are a bf16 rounding away from the policy's. Anything but a float32 ``LlamaForCausalLM`` (optionally
under peft LoRA) with the position-only RoPE types is refused, naming 'onednn'.
"""

from __future__ import annotations

import contextlib

from gcpo_analysis.models import require
from gcpo_train.sampling.prefixes import prefill_rows

ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # cos/sin a function of the position alone
USE_ONEDNN = "; use sampling_kernels 'onednn'"
ONE_CALL_KEYS = 512  # completion keys of a group (G·T) up to which a layer's attention is one call


def llama_of(model):
    """The ``LlamaForCausalLM`` inside ``model`` (a peft wrapper or the model itself), checked
    for what the fused step implements; a ``ValueError`` names what is not."""
    torch = require("torch")
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not isinstance(base, LlamaForCausalLM):
        raise ValueError(
            f"sampling_kernels 'fused' implements LlamaForCausalLM, not {type(base).__name__}" + USE_ONEDNN
        )
    cfg = base.config
    rope = (getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}).get("rope_type")
    problems = {
        f"hidden_act {cfg.hidden_act!r} (fused: silu)": cfg.hidden_act != "silu",
        f"rope_type {rope!r} (fused: {', '.join(ROPE_TYPES)})": (rope or "default") not in ROPE_TYPES,
        "a sliding attention window": getattr(cfg, "sliding_window", None) is not None,
        f"pretraining_tp {getattr(cfg, 'pretraining_tp', 1)}": getattr(cfg, "pretraining_tp", 1) != 1,
        f"dtype {base.dtype} (fused: float32)": base.dtype != torch.float32,
        f"{len(base.model.layers)} layers for num_hidden_layers {cfg.num_hidden_layers}": len(base.model.layers)
        != cfg.num_hidden_layers,
    }
    found = [what for what, bad in problems.items() if bad]
    if found:
        raise ValueError(f"sampling_kernels 'fused' does not implement {', '.join(found)}" + USE_ONEDNN)
    plain = {"embed_tokens": torch.nn.Embedding, "lm_head": torch.nn.Linear}
    for name, module in base.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        want = plain.get(leaf) or (LlamaRMSNorm if leaf.endswith("norm") else None)
        if want is not None and type(module) is not want:
            raise ValueError(
                f"sampling_kernels 'fused' needs a plain {want.__name__} at {name}, found {type(module).__name__}"
                + USE_ONEDNN
            )
    return base


def _lora_terms(module, name: str):
    """(base ``nn.Linear``, [(A, s·B), ...]) of a projection: itself, or a peft LoRA layer's base
    and its active adapters, refusing what peft's forward would compute otherwise."""
    torch = require("torch")
    if type(module) is torch.nn.Linear:
        return module, []
    if not (hasattr(module, "base_layer") and hasattr(module, "lora_A") and type(module.base_layer) is torch.nn.Linear):
        raise ValueError(
            f"sampling_kernels 'fused': {name} is a {type(module).__name__}, not a Linear or LoRA Linear" + USE_ONEDNN
        )
    if module.disable_adapters or module.merged:
        if module.disable_adapters and module.merged:
            raise ValueError(f"sampling_kernels 'fused': {name} has merged adapters that are disabled" + USE_ONEDNN)
        return module.base_layer, []  # merged: the base weight holds the adapters
    if getattr(module, "fan_in_fan_out", False):
        raise ValueError(f"sampling_kernels 'fused': {name} has fan_in_fan_out weights" + USE_ONEDNN)
    terms = []
    for adapter in module.active_adapters:
        if adapter not in module.lora_A:
            continue
        dropout = module.lora_dropout[adapter]
        if adapter in getattr(module, "lora_variant", {}) or module.use_dora.get(adapter, False):
            raise ValueError(
                f"sampling_kernels 'fused': {name} has a LoRA variant (DoRA, ...) in {adapter!r}" + USE_ONEDNN
            )
        if module.lora_B[adapter].bias is not None:
            raise ValueError(f"sampling_kernels 'fused': {name} has a LoRA bias in {adapter!r}" + USE_ONEDNN)
        if dropout.training and getattr(dropout, "p", 0.0) > 0:
            raise ValueError(
                f"sampling_kernels 'fused': {name} has LoRA dropout {dropout.p} active (the model is in training "
                "mode); sample in eval mode" + USE_ONEDNN.replace(";", " or")
            )
        if module.lora_A[adapter].weight.dtype != torch.float32:
            raise ValueError(
                f"sampling_kernels 'fused': {name} has {module.lora_A[adapter].weight.dtype} adapters" + USE_ONEDNN
            )
        terms.append((module.lora_A[adapter].weight, module.lora_B[adapter].weight * module.scaling[adapter]))

    return module.base_layer, terms


class FusedKernels:
    """``sampling_kernels: fused``: ``decode`` with the step of this module (``decode_step``).
    Packed weights are kept across calls (one packed copy of the base weights) and repacked
    only when a weight tensor changes, as ``sampling.PackedLinears`` does."""

    def __init__(self, rows_hint: int = 16, bf16: bool = False, name: str | None = None, share_prefixes: bool = False):
        self.rows_hint = rows_hint
        self.bf16 = bf16
        # the prefill computes each distinct prompt prefix once (``prefixes.prefill_rows``); off for
        # sampling, where it would move the logits by rounding (``prefixes_shared``)
        self.share_prefixes = share_prefixes
        self.name = name or ("fused_bf16" if bf16 else "fused")  # the sampler's (registry.Sampler.name)
        self._packed: dict[str, tuple] = {}  # key -> (the weights' (data_ptr, _version), packed weight)

    @contextlib.contextmanager
    def prefixes_shared(self):
        """While inside, the prefill computes each distinct prompt prefix once (greedy evaluation:
        questions on one passage). A prefix's states are then the rounding of the first prompt
        that holds it rather than each prompt's own (attention sums a prompt's keys at its own
        padding offset): the logits move by float rounding (up to 7e-5 on the packaged policy's
        held-out prompts), so sampling, whose draws the comparison's arms share, keeps the plain
        prefill."""
        saved = self.share_prefixes
        self.share_prefixes = True
        try:
            yield self
        finally:
            self.share_prefixes = saved

    @contextlib.contextmanager
    def applied(self, model):
        """Checks that the fused step implements the model (``decode_step`` then runs it alone)."""
        llama_of(model)
        yield model

    def _linear(self, key: str, modules: dict):
        """A callable x -> x·[W₁; W₂; ...]ᵀ + b (+ LoRA) for projections that read the same input
        (``modules``: qualified name -> module); the stacked weight packed under ``key``."""
        torch = require("torch")
        bases, terms = [], []
        for name, module in modules.items():
            base, lora = _lora_terms(module, name)
            bases.append(base)
            terms.append(lora)
        version = tuple((m.weight.data_ptr(), m.weight._version) for m in bases)
        hit = self._packed.get(key)
        if hit is None or hit[0] != version:
            w = torch.cat([m.weight.detach() for m in bases])
            w = w.to(torch.bfloat16) if self.bf16 else w
            hit = self._packed[key] = (version, torch.ops.mkldnn._reorder_linear_weight(w, self.rows_hint))
        packed, bias = hit[1], None
        if any(m.bias is not None for m in bases):  # read at each decode, as the adapters are
            bias = torch.cat(
                [m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.out_features) for m in bases]
            ).to(packed.dtype)
        pointwise = torch.ops.mkldnn._linear_pointwise
        if self.bf16:  # bf16 in and out of oneDNN (fp32 accumulation inside), fp32 around it

            def linear(x, packed, bias, *args):
                return pointwise(x.to(torch.bfloat16), packed, bias, *args).float()

        else:
            linear = pointwise
        if not any(terms):
            return lambda x: linear(x, packed, bias, "none", [], "")
        a_t, b_t = _stacked_lora(bases, terms)  # the adapters stay float32
        return lambda x: torch.addmm(linear(x, packed, bias, "none", [], ""), torch.mm(x, a_t), b_t)

    def decode_step(self, model, input_ids, attention_mask, positions, group_size: int, max_new_tokens: int):
        """``sampling.decode``'s prefill and steps by the fused step: the prompts (Q, P), left-padded,
        run once without their last token (causal attention over their real tokens), their
        keys/values kept once per group; returns the next-token logits ``(tokens (Q·G, 1), t) ->
        (Q·G, V)`` of decode step t. positions (Q, P): the prompt tokens'."""
        torch = require("torch")
        F = torch.nn.functional
        base = llama_of(model)
        cfg, core = base.config, base.model
        (Q, P), G, T = input_ids.shape, group_size, max_new_tokens
        n0 = P - 1
        H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
        D = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
        inter, eps = cfg.intermediate_size, cfg.rms_norm_eps
        blocks = []
        for i, block in enumerate(core.layers):

            def linear(key, *names, i=i, block=block):
                return self._linear(f"{i}.{key}", {f"model.layers.{i}.{n}": block.get_submodule(n) for n in names})

            blocks.append(
                (
                    block.input_layernorm.weight.detach(),
                    linear("qkv", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                    linear("o", "self_attn.o_proj"),
                    block.post_attention_layernorm.weight.detach(),
                    linear("gate_up", "mlp.gate_proj", "mlp.up_proj"),
                    linear("down", "mlp.down_proj"),
                )
            )
        head = self._linear("lm_head", {"lm_head": base.lm_head})
        embed, final_norm = core.embed_tokens.weight.detach(), core.norm.weight.detach()

        def norm(x, w):
            return F.rms_norm(x, (x.shape[-1],), w, eps)

        def layer(x, c, s, weights, attend):
            """One decoder layer on x (N, hidden); attend(q (N, H, D), k, v (N, Hkv, D)) -> (N, H·D)."""
            w1, qkv_of, o_of, w2, gate_up_of, down_of = weights
            qkv = qkv_of(norm(x, w1))
            qk = qkv[:, : (H + Hkv) * D].view(-1, H + Hkv, D)
            qk = qk * c + torch.cat((-qk[..., D // 2 :], qk[..., : D // 2]), dim=-1) * s  # RoPE
            x = x + o_of(attend(qk[:, :H], qk[:, H:], qkv[:, (H + Hkv) * D :].view(-1, Hkv, D)))
            gu = gate_up_of(norm(x, w2))
            return x + down_of(F.silu(gu[:, :inter]) * gu[:, inter:])

        # the prefill: Q·(P − 1) positions; a padding query attends to itself alone (its output is never read)
        real = attention_mask[:, :n0].bool()
        causal = torch.ones(n0, n0, dtype=torch.bool).tril()
        allowed = ((causal & real[:, None, :]) | torch.eye(n0, dtype=torch.bool))[:, None]
        cos, sin = core.rotary_emb(embed[:1], positions[:, :n0])
        c, s = cos.reshape(Q * n0, 1, D), sin.reshape(Q * n0, 1, D)
        tokens = input_ids[:, :n0].reshape(-1)
        rows = where = None  # the plain prefill: every position of the padded (Q, P − 1) layout
        if self.share_prefixes and Q * n0:
            # the linear layers run on each distinct prefix position once (prefixes.prefill_rows); the
            # attention sees the (Q, P − 1) layout it always did, gathered from those rows
            rows, where = prefill_rows(input_ids[:, :n0], real, positions[:, :n0])
            c, s, tokens = c[rows], s[rows], tokens[rows]
        prompt_kv = []

        def causal_attend(q, k, v):
            if where is not None:
                q, k, v = q[where], k[where], v[where]
            k, v = (
                k.view(Q, n0, Hkv, D).transpose(1, 2).contiguous(),
                v.view(Q, n0, Hkv, D).transpose(1, 2).contiguous(),
            )
            prompt_kv.append((k, v))
            q = q.view(Q, n0, H, D).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
            a = a.transpose(1, 2).reshape(Q * n0, H * D)
            return a if rows is None else a[rows]

        x = F.embedding(tokens, embed)
        for weights in blocks:
            x = layer(x, c, s, weights, causal_attend)
        del x
        kind = _one_call_attention if G * T <= ONE_CALL_KEYS else _split_attention
        attention = kind(real, G, H // Hkv, T)
        layers = [(weights, *attention(k, v)) for weights, (k, v) in zip(blocks, prompt_kv)]
        # cos/sin of every decode position at once (T, rows, 1, D), by the model's own rotary module
        position = positions[:, -1:].repeat_interleave(G, dim=0)
        cos, sin = core.rotary_emb(embed[:1], position + torch.arange(T, device=position.device))
        cos, sin = cos.transpose(0, 1).unsqueeze(2).contiguous(), sin.transpose(0, 1).unsqueeze(2).contiguous()

        def step(tokens, t):
            x = F.embedding(tokens[:, 0], embed)
            for weights, write, attend in layers:

                def attend_t(q, k, v, write=write, attend=attend):
                    write(t, k, v)
                    return attend(t, q)

                x = layer(x, cos[t], sin[t], weights, attend_t)
            return head(norm(x, final_norm))

        return step


def _one_call_attention(prompt_mask, G: int, n_rep: int, T: int):
    """layer(prompt keys, prompt values) -> (write(t, k, v), attend(t, q) -> (rows, H·D)): the
    softmax attention of each row's query heads over its group's prompt and its own completion,
    as ONE attention call per group and KV head: the G rows' n_rep query heads together
    (transformers' ``pack_gqa`` for G rows) against [prompt | the G rows' completions], the
    other rows' completion keys masked. The keys/values are written in place, time-major
    (position P − 1 + t of row g at P − 1 + t·G + g). prompt keys/values (Q, Hkv, P − 1, D);
    prompt_mask (Q, P − 1): the prompt's real tokens. Its cost grows with G·T (the masked keys),
    hence ``ONE_CALL_KEYS``."""
    torch = require("torch")
    Q, n0 = prompt_mask.shape
    rows, n = Q * G, G * n_rep
    own = torch.eye(G, dtype=torch.bool).repeat_interleave(n_rep, 0).repeat(1, T)  # query (g, r) -> keys (t, g)
    mask = torch.cat([prompt_mask[:, None, :].expand(Q, n, n0), own.expand(Q, n, T * G)], dim=-1)
    mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))[:, None]  # (Q, 1, G·n_rep, P − 1 + T·G)

    def layer(keys, values):
        Hkv, D = keys.shape[1], keys.shape[-1]
        k, v = keys.new_empty(Q, Hkv, n0 + T * G, D), values.new_empty(Q, Hkv, n0 + T * G, D)
        k[:, :, :n0], v[:, :, :n0] = keys, values

        def write(t, k_t, v_t):  # (rows, Hkv, D)
            k[:, :, n0 + t * G : n0 + (t + 1) * G] = k_t.view(Q, G, Hkv, D).transpose(1, 2)
            v[:, :, n0 + t * G : n0 + (t + 1) * G] = v_t.view(Q, G, Hkv, D).transpose(1, 2)

        def attend(t, q):  # (rows, H, D)
            L = n0 + (t + 1) * G
            q = q.reshape(Q, G, Hkv, n_rep, D).transpose(1, 2).reshape(Q, Hkv, n, D)
            a = _flash(q, k[:, :, :L], v[:, :, :L], mask[..., :L], D)[0]
            return a.reshape(Q, Hkv, G, n_rep, D).transpose(1, 2).reshape(rows, Hkv * n_rep * D)

        return write, attend

    return layer


def _split_attention(prompt_mask, G: int, n_rep: int, T: int):
    """``_one_call_attention``'s layer for long completions: the prompt part as one attention per
    group and KV head (the G rows' query heads together), each row's completion part on its own,
    combined by their log-sum-exps ℓ_p, ℓ_c: a = a_p·σ(ℓ_p − ℓ_c) + a_c·(1 − σ(ℓ_p − ℓ_c)), the
    one softmax over all keys."""
    torch = require("torch")
    Q, n0 = prompt_mask.shape
    rows, n = Q * G, G * n_rep
    additive = torch.zeros(prompt_mask.shape).masked_fill(~prompt_mask, float("-inf"))[:, None, None, :]
    # a prompt with no real token before its last: no prompt part (the kernel returns ℓ_p = 0 there)
    empty = torch.where(prompt_mask.any(-1), 0.0, float("-inf"))[:, None, None]

    def layer(keys, values):
        Hkv, D = keys.shape[1], keys.shape[-1]
        kp, vp = keys.contiguous(), values.contiguous()
        kc, vc = keys.new_empty(rows, Hkv, T, D), values.new_empty(rows, Hkv, T, D)

        def write(t, k_t, v_t):
            kc[:, :, t], vc[:, :, t] = k_t, v_t

        def attend(t, q):
            q = q.reshape(rows, Hkv, n_rep, D)
            shared = q.view(Q, G, Hkv, n_rep, D).transpose(1, 2).reshape(Q, Hkv, n, D)
            a_p, lse_p = _flash(shared, kp, vp, additive, D)
            a_c, lse_c = _flash(q, kc[:, :, : t + 1], vc[:, :, : t + 1], None, D)
            a_p = a_p.reshape(Q, Hkv, G, n_rep, D).transpose(1, 2).reshape(rows, Hkv, n_rep, D)
            lse_p = (lse_p + empty).view(Q, Hkv, G, n_rep).transpose(1, 2).reshape(rows, Hkv, n_rep, 1)
            return torch.lerp(a_c, a_p, torch.sigmoid(lse_p - lse_c.unsqueeze(-1))).reshape(rows, -1)

        return write, attend

    return layer


def _flash(q, k, v, mask, D: int):
    """(softmax(q·kᵀ/√D + mask)·v, its log-sum-exp): torch's CPU flash attention, which
    ``scaled_dot_product_attention`` calls but without returning the log-sum-exp."""
    torch = require("torch")
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, False, attn_mask=mask, scale=D**-0.5
    )


def _stacked_lora(bases, terms):
    """(Aᵀ, (s·B)ᵀ) of the adapters of several projections read as one: the A's stacked, the
    s·B's block-diagonal, so x·Aᵀ·(s·B)ᵀ is each projection's x·A_iᵀ·(s_i·B_i)ᵀ side by side."""
    torch = require("torch")
    a_rows = [a.detach() for lora in terms for a, _ in lora]
    b_t = bases[0].weight.new_zeros(sum(a.shape[0] for a in a_rows), sum(m.out_features for m in bases))
    r = out = 0
    for m, lora in zip(bases, terms):
        for a, sb in lora:
            b_t[r : r + a.shape[0], out : out + m.out_features] = sb.detach().t()
            r += a.shape[0]
        out += m.out_features
    return torch.cat(a_rows).t().contiguous(), b_t
