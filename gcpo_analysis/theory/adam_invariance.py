"""What GCPO can and cannot change under AdamW (``gcpo proofs``).

A group-level modulator multiplies a group's advantages by ω(q). Split a step's ω into its mean
ω̄_t and the within-step relative weights ω/ω̄_t: the mean is a uniform rescaling of the step's
loss, so of its gradient, g_t → c_t g_t. AdamW's update is m̂_t / (√v̂_t + ε) with m and v the
exponential averages of g and g² (torch.optim.AdamW; Loshchilov & Hutter 2019). For a constant
c, m → c·m and √v → c·√v, so with ε = 0 and no gradient clipping the update, and every weight,
is exactly the same (decoupled weight decay does not read g). Three things break it, measured
here on a tiny softmax policy (float64, fixed tokens, 20 steps):

* a per-step c_t that varies (the mean ω of a step moves, 1.06–1.10 on NarrativeQA spans): the
  averages mix steps of different scale — the gap is small when c_t varies little;
* ε > 0 where |g| is near ε (|g| ≈ 1e-8 here, ε = 1e-8);
* gradient clipping at a max norm between the two runs' gradient norms: the clipped run's
  gradient is rescaled to the max norm, the other's is not.

So under AdamW what can reach the weights is the within-step relative weight, and the mean ω only
through clipping, ε and its step-to-step variation.
"""

from __future__ import annotations

import warnings

import numpy as np

STEPS, DIM, VOCAB, BATCH = 20, 6, 5, 16


def _adamw_run(scales, x, tokens, adv, W0, *, eps=0.0, max_norm=None, lr=1e-2, weight_decay=0.01):
    """The weights after len(scales) AdamW steps on loss_t = −mean(c_t · A · log π_W(token | x))."""
    import torch

    W = torch.nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = torch.optim.AdamW([W], lr=lr, eps=eps, weight_decay=weight_decay)
    for t, c in enumerate(scales):
        logp = torch.log_softmax(torch.tensor(x[t]) @ W, dim=-1)
        chosen = logp[torch.arange(BATCH), torch.tensor(tokens[t])]
        loss = -(torch.tensor(c * adv[t]) * chosen).mean()
        opt.zero_grad()
        loss.backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_([W], max_norm)
        opt.step()
    return W.detach().numpy()


def _instance(rng, grad_scale=1.0):
    x = rng.normal(size=(STEPS, BATCH, DIM))
    tokens = rng.integers(0, VOCAB, size=(STEPS, BATCH))
    adv = rng.normal(size=(STEPS, BATCH)) * grad_scale
    W0 = rng.normal(scale=0.3, size=(DIM, VOCAB))
    return x, tokens, adv, W0


def _gap(W_a, W_b, W0) -> float:
    """max |W_a − W_b| relative to the largest move of a weight in run a."""
    return float(np.max(np.abs(W_a - W_b)) / np.max(np.abs(W_a - W0)))


def check_adam_invariance(rng, n, row):
    """Rows of ``gcpo proofs`` (``row`` is proofs._row): the invariance and what breaks it."""
    import importlib.util

    claims = [
        "AdamW ignores a constant rescaling of the advantages (ε = 0, no clipping)",
        "AdamW, per-step mean ω varying in [1.06, 1.10] (ε = 0, no clipping)",
        "AdamW, ε = 1e-8 with |g| near ε breaks the invariance",
        "AdamW, gradient clipping breaks the invariance",
    ]
    where = "torch.optim.AdamW (our addition)"
    if importlib.util.find_spec("torch") is None:
        warnings.warn("gcpo proofs: torch is not installed, the AdamW checks are skipped", stacklevel=2)
        note = "skipped: torch is not installed (pip install 'gcpo[models]')"
        return [row(c, where, 0, float("nan"), False, note) for c in claims]
    n = min(n, 10)  # 20 AdamW steps a run, 5 runs an instance: 10 instances take seconds
    const, varying, eps_gap = [], [], []
    for _ in range(n):
        x, tokens, adv, W0 = _instance(rng)
        base = _adamw_run(np.ones(STEPS), x, tokens, adv, W0)
        c = rng.uniform(0.5, 3.0)
        const.append(_gap(base, _adamw_run(np.full(STEPS, c), x, tokens, adv, W0), W0))
        varying.append(_gap(base, _adamw_run(rng.uniform(1.06, 1.10, STEPS), x, tokens, adv, W0), W0))
        small = _instance(rng, grad_scale=1e-8)
        runs = [_adamw_run(np.full(STEPS, s), *small[:3], small[3], eps=1e-8) for s in (1.0, 2.0)]
        eps_gap.append(_gap(runs[0], runs[1], small[3]))
    # clipping at 1.5x the first step's gradient norm: the x2 run is clipped more often than the x1 run
    clip_gap = []
    for _ in range(n):
        x, tokens, adv, W0 = _instance(rng)
        norm = _grad_norm(x[0], tokens[0], adv[0], W0)
        runs = [
            _adamw_run(np.full(STEPS, s), x, tokens, adv, W0, max_norm=1.5 * norm, weight_decay=0.0) for s in (1.0, 2.0)
        ]
        clip_gap.append(_gap(runs[0], runs[1], W0))

    def breaks(claim, gaps, note):
        """A claim that something breaks the invariance holds when every instance moves by > 1e-3."""
        return row(claim, where, n, min(gaps), min(gaps) > 1e-3, note, max(gaps), float(np.median(gaps)))

    return [
        row(claims[0], where, n, max(const), max(const) <= 1e-10, "exact up to float64 rounding", max(const)),
        row(
            claims[1],
            where,
            n,
            max(varying),
            True,
            "a measured gap, not a violation: worst and median |ΔW| relative to the largest weight move",
            max(varying),
            float(np.median(varying)),
        ),
        breaks(
            claims[2],
            eps_gap,
            "smallest gap over the instances (holds: every instance breaks by > 1e-3); median in 'median'",
        ),
        breaks(
            claims[3],
            clip_gap,
            "max norm 1.5x the first step's gradient norm; the x2 run is clipped, the x1 run less; smallest gap",
        ),
    ]


def _grad_norm(x, tokens, adv, W0) -> float:
    """‖∇ loss‖ at W0 for one step's batch (NumPy, independent of torch's autograd)."""
    logits = x @ W0
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    onehot = np.eye(VOCAB)[tokens]
    grad = -(x.T @ (adv[:, None] * (onehot - p))) / len(tokens)
    return float(np.linalg.norm(grad))
