"""Policy loading, LoRA wrapping, the KL reference, and batched group generation.

Reference policy (the β·KL anchor): with LoRA it is the base model with the adapters switched
off (``with model.disable_adapter():``) — no second copy in memory. With full fine-tuning a
frozen deep copy is kept, which doubles the weight memory (e.g. +3 GB for a 1.5B model in
bf16; +0.5 GB for SmolLM2-135M in float32).
"""

from __future__ import annotations

import contextlib
import copy

from gcpo_analysis.models import require

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


def eos_ids_of(tokenizer, model) -> list[int]:
    ids: set[int] = set()
    for src in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if src is None:
            continue
        ids.update(src if isinstance(src, (list, tuple)) else [src])
    return sorted(int(i) for i in ids)
