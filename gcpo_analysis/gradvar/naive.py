"""The naive reference the Gram is tested and benchmarked against: G separate backward passes,
each gradient flattened, then their Gram in float64."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..models import require
from .batch import check_batch, select_params, sequence_logprobs

if TYPE_CHECKING:
    import torch


def naive_group_gradients(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    params: str | Iterable[torch.nn.Parameter] = "all",
) -> torch.Tensor:
    """Reference: G separate backward passes, each sequence alone without its padding.

    Returns a (G, P) float32 CPU tensor of flattened gradients g_i (tied weights counted once,
    their gradient being the sum of both uses). Memory G * P floats: for tests and the bench.
    """
    torch = require("torch")
    selected = select_params(model, params)
    ids, am, cm = check_batch(input_ids, attention_mask, completion_mask)
    dev = next(model.parameters()).device
    P = sum(p.numel() for p in selected)
    out = torch.empty(ids.shape[0], P, dtype=torch.float32)
    flags = {id(p): p.requires_grad for p in model.parameters()}
    sel_ids = {id(p) for p in selected}
    try:
        for p in model.parameters():
            p.requires_grad_(id(p) in sel_ids)
        for i in range(ids.shape[0]):
            keep = am[i]
            seq = ids[i][keep][None].to(dev)
            cmi = cm[i][keep][None].to(dev)
            with torch.enable_grad():
                lp = sequence_logprobs(model, seq, torch.ones_like(seq), cmi).sum()
                grads = torch.autograd.grad(lp, selected, allow_unused=True)
            off = 0
            for p, g in zip(selected, grads):
                n = p.numel()
                out[i, off : off + n] = 0 if g is None else g.detach().reshape(-1).float().cpu()
                off += n
    finally:
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
    return out


def flat_gram(grads: torch.Tensor, chunk: int = 1 << 22) -> np.ndarray:
    """Gram of the rows of a (G, P) tensor, accumulated in float64 over column chunks."""
    torch = require("torch")
    G, P = grads.shape
    K = torch.zeros(G, G, dtype=torch.float64)
    for c0 in range(0, P, chunk):
        block = grads[:, c0 : c0 + chunk].double()
        K += block @ block.T
    return K.numpy()


def naive_gram(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    params: str | Iterable[torch.nn.Parameter] = "all",
) -> np.ndarray:
    """The reference Gram: ``flat_gram(naive_group_gradients(...))``."""
    return flat_gram(naive_group_gradients(model, input_ids, attention_mask, completion_mask, params))
