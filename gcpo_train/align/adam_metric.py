"""The update-alignment study in Adam's metric: the trainer does not step along the gradient but
along AdamW's preconditioned one, so the cosine that matters for training may be the one after the
preconditioner (a study's Gram is plain Euclidean, ``run.gram_of``).

At a checkpoint with AdamW state (``optimizer.pt``: per trained parameter ``exp_avg_sq`` v and
``step`` t; β₂ and ε from its param group), a direction g moves the parameters along P g with

    P = diag(1 / (√(v / (1 − β₂ᵗ)) + ε)),

torch's own denominator (``torch.optim.AdamW``: ``exp_avg_sq / bias_correction2``, square root,
plus ε), frozen at the checkpoint (one step's gradient changes v by a factor 1 − β₂ = 0.001 of
its own square; the first moment's averaging over steps is left out: the study compares batches
of one step). The Gram in that metric is

    K^P_ij = (P g_i)·(P g_j) = Σ_d g_id g_jd P_d²,

and the reference becomes P ḡ: every statistic of ``gcpo_analysis.stats.alignment`` then reads
K^P as it reads K (the weights enter linearly, P is common to every group).

Clipping: the trainer clips the batch gradient's global norm to ``max_grad_norm`` before Adam.
That multiplies the whole batch gradient by one scalar min(1, c/‖ĝ‖), so it changes no cosine
within a batch (P s ĝ ∥ P ĝ): the clipped variant of every cosine here is the unclipped one. It
changes the step's size, and through v the next steps' P, which a single-snapshot study does not
see.

Cost: the group gradients again (the committed snapshots kept only their Gram): 30–48 CPU-minutes
a snapshot of 128 groups, with ``keep_gradients`` so that ``gradients.npy`` stays, plus a
checkpoint with its ``optimizer.pt`` (the base policy has none: Adam's state is empty at step 0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gcpo_train.align import rows as gradient_rows


def adam_preconditioner(state: dict, sizes: list[int]) -> np.ndarray:
    """P (D,) from an AdamW ``state_dict()`` whose params are, in order, the trained parameters
    of ``sizes`` numbers each (``gradients.trainable``'s order, the order of a flattened gradient).
    A parameter with no state (never stepped) or of another size is refused, naming it."""
    groups = state.get("param_groups") or []
    per = state.get("state")
    if not groups or per is None:
        raise ValueError("not an optimizer state_dict (no 'param_groups' / 'state')")
    out: list[np.ndarray] = []
    index = [i for g in groups for i in g["params"]]
    if len(index) != len(sizes):
        raise ValueError(f"the optimizer holds {len(index)} parameters, the model trains {len(sizes)}")
    for g in groups:
        beta2, eps = float(g["betas"][1]), float(g["eps"])
        for i in g["params"]:
            s = per.get(i)
            if s is None or "exp_avg_sq" not in s:
                raise ValueError(f"optimizer parameter {i} has no exp_avg_sq (never stepped): no preconditioner")
            v = np.asarray(s["exp_avg_sq"].detach().double().cpu().numpy(), float).ravel()
            if v.size != sizes[len(out)]:
                raise ValueError(f"optimizer parameter {i} has {v.size} numbers, the model's has {sizes[len(out)]}")
            t = float(s["step"])
            out.append(1.0 / (np.sqrt(v / (1.0 - beta2**t)) + eps))
    return np.concatenate(out)


def load_preconditioner(checkpoint: str | Path, sizes: list[int]) -> np.ndarray:
    """P of a checkpoint folder's ``optimizer.pt``, read with ``torch.load(weights_only=True)``
    (``checkpoint.safe_load``: never unpickled as code)."""
    from gcpo_train.runfiles.checkpoint import safe_load

    path = Path(checkpoint) / "optimizer.pt"
    if not path.is_file():
        raise ValueError(f"{checkpoint}: no optimizer.pt (Adam's metric needs the optimizer state of a checkpoint)")
    return adam_preconditioner(safe_load(path), sizes)


def metric_gram(path: Path, rows: list[int], precond: np.ndarray, block: int = 16) -> np.ndarray:
    """K^P = (X P)(X P)ᵀ of the rows ``rows`` of a study's gradient file (``align.rows``), in
    float64, ``block`` rows at a time (the preconditioner is applied to each row as it is read)."""
    from gcpo_train.align.run import gram_of

    p = np.asarray(precond, float)
    if gradient_rows.shape(path)[1] != p.size:
        raise ValueError(f"{path}: rows of {gradient_rows.shape(path)[1]} numbers, a preconditioner of {p.size}")
    return gram_of(path, rows, block, scale=p)
