"""``group_gradient_gram``: the exact Gram matrix K_ij = g_i . g_j of a group's per-rollout
gradients from one batched forward and one backward (docs/conventions.md, "Gradient variance
of a query"); the per-layer rules are in ``rules`` and the hooks in ``hooks``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..models import require
from .batch import check_batch, select_params, sequence_logprobs, shared_prompt_length, shared_sequence_logprobs
from .hooks import GramCapture

if TYPE_CHECKING:
    import torch


def group_gradient_gram(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    params: str | Iterable[torch.nn.Parameter] = "all",
    *,
    method: str = "auto",
    share_prompt: bool = True,
) -> np.ndarray:
    """K_ij = g_i . g_j with g_i = grad_theta log pi(y_i | q), one forward + one backward.

    See ``gcpo_analysis.gradvar.rules`` for the per-layer rules (docs/conventions.md, gradient variance). ``params``:
    "all" (every parameter of the model), "lora" (names containing "lora_") or an iterable of
    parameters. Left or right padding; completion_mask marks the scored tokens. ``method``:
    "auto" picks the cheaper of the ghost and materialised forms per weight (a tied weight's uses
    and their cross terms included), "ghost" or "materialise" force one. Returns a
    G x G float64 array. Parameters' ``requires_grad`` flags are restored afterwards and no
    ``.grad`` is written.

    ``share_prompt``: where the rows are one prompt's continuations (the same unpadded tokens up
    to the first scored one) and the model takes a cache, the prompt runs once and each row's own
    gradient is taken back through it (``hooks.GramCapture.prompt_backward``): the same K up to
    float rounding, at one prompt forward instead of G. False runs G full rows.
    """
    torch = require("torch")
    if method not in ("auto", "ghost", "materialise"):
        raise ValueError(f"method must be 'auto', 'ghost' or 'materialise', got {method!r}")
    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:
        import warnings

        with warnings.catch_warnings():  # the pre-5.x name, deprecated where the new one exists
            warnings.simplefilter("ignore", FutureWarning)
            checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if checkpointing:
        raise ValueError("group_gradient_gram does not support gradient checkpointing (hooks would fire twice)")
    selected = select_params(model, params)
    ids, am, cm = check_batch(input_ids, attention_mask, completion_mask)
    G = ids.shape[0]
    flags = {id(p): p.requires_grad for p in model.parameters()}
    sel_ids = {id(p) for p in selected}
    cap = None
    try:
        for p in model.parameters():  # only selected weights need their gradients computed
            p.requires_grad_(id(p) in sel_ids)
        cap = GramCapture(model, selected, G, method)
        P = shared_prompt_length(model, ids, am, cm) if share_prompt else None
        cap.begin(G, shared_prompt=P is not None)
        with torch.enable_grad():
            if P is None:
                loss = sequence_logprobs(model, ids, am, cm).sum()
            else:
                loss = shared_sequence_logprobs(model, ids, am, cm, P, cap.on_shared).sum()
            sources = cap.sources + cap.prompt_sources
            if not sources:
                raise ValueError("no selected parameter takes part in the model's forward pass")
            # Differentiating w.r.t. the outputs of the source modules (those whose input
            # needs no gradient) runs the backward through every hooked output but never
            # forms the summed weight gradients dL/dW, which nobody needs here.
            torch.autograd.grad(loss, sources, allow_unused=True, retain_graph=P is not None)
            if P is not None:
                cap.prompt_backward()
            del loss
            cap.sources.clear()
        cap.flush()
        K = cap.K
    finally:
        if cap is not None:
            cap.remove()
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
    K = 0.5 * (K + K.T)
    return K.numpy()
