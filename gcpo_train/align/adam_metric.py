"""The update-alignment study in Adam's metric: the trainer does not step along the gradient but
along AdamW's preconditioned one, so the cosine that matters for training may be the one after the
preconditioner (a study's Gram is plain Euclidean, ``rows.gram_of``).

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

from gcpo_analysis.study.alignment_metric import ADAM_SUFFIX  # the suffix restat pairs twins by
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
    p = np.asarray(precond, float)
    if gradient_rows.shape(path)[1] != p.size:
        raise ValueError(f"{path}: rows of {gradient_rows.shape(path)[1]} numbers, a preconditioner of {p.size}")
    return gradient_rows.gram_of(path, rows, block, scale=p)


def trained_sizes(checkpoint: str | Path) -> list[int]:
    """Numbers per trained parameter, in ``named_parameters`` order (the checkpoint's
    ``trainable.pt``, written in that order by ``checkpoint.trainable_state``)."""
    from gcpo_train.runfiles.checkpoint import safe_load

    path = Path(checkpoint) / "trainable.pt"
    if not path.is_file():
        raise ValueError(f"{checkpoint}: no trainable.pt (not a checkpoint folder)")
    return [int(t.numel()) for t in safe_load(path).values()]


def adam_frame(groups, K_adam: np.ndarray, name: str, r_min: float, r_max: float):
    """The groups frame of the snapshot in Adam's metric: every weight as in the Euclidean frame
    (ω is what the trainer computes, from the raw gradient's norm where it needs one: the field's
    weightings are written as ``w_`` columns from ``grad_norm2_raw``), ``grad_norm2`` the metric's
    ‖P g_q‖² (the Gram's diagonal, which ``alignment_match`` checks)."""
    from gcpo_analysis.measures.field_weights import frame_weights

    frame = groups.copy()
    frame["snapshot"] = name
    frame["grad_norm2_raw"] = frame["grad_norm2"].to_numpy(float)
    field = frame_weights(frame["reward_spread"].to_numpy(float), frame["grad_norm2_raw"].to_numpy(float), r_min, r_max)
    for key, w in field.items():
        if f"w_{key}" not in frame.columns:
            frame[f"w_{key}"] = w
    frame["grad_norm2"] = np.diag(K_adam).copy()
    return frame


def write_adam_snapshot(out: str | Path, snapshot: str, block: int = 16) -> str:
    """File the finished snapshot ``snapshot`` of the study ``out`` again in Adam's metric, as
    ``<snapshot>_adam``: the Gram K^P from its kept gradient file (``--keep-gradients``) and its
    checkpoint's ``optimizer.pt``, the groups frame with the same weights (``adam_frame``) and a
    card that records the preconditioner. The raw Gram is formed again from the same file and must
    equal the snapshot's (rtol 1e-9): the gradients are that snapshot's. Returns the new name; the
    tables are written by ``gcpo align --restat out``."""
    import json

    from gcpo_analysis.frames import write_frame, write_text
    from gcpo_analysis.study.alignment import check_snapshot, load_snapshot, snapshot_paths

    out = Path(out)
    paths = snapshot_paths(out, snapshot)
    if not paths["card"].is_file():
        raise ValueError(f"--adam-metric {snapshot}: no finished snapshot of that name in {out} ({paths['card']})")
    if snapshot.endswith(ADAM_SUFFIX):
        raise ValueError(f"--adam-metric {snapshot}: already a snapshot in Adam's metric")
    card = json.loads(paths["card"].read_text())
    checkpoint = card.get("checkpoint")
    if checkpoint is None:
        raise ValueError(
            f"--adam-metric {snapshot}: a snapshot of the base policy (no checkpoint); Adam's state is empty at step 0"
        )
    gradients = out / "work" / snapshot / "gradients.npy"
    if not gradients.is_file():
        raise ValueError(
            f"--adam-metric {snapshot}: {gradients} is gone; rerun the snapshot with --keep-gradients "
            f"(Adam's metric needs the group gradients, not only their Gram)"
        )
    groups, K = load_snapshot(out, snapshot)
    rows = groups["position"].astype(int).tolist()
    K_raw = gradient_rows.gram_of(gradients, rows, block)
    if not np.allclose(K_raw, K, rtol=1e-9, atol=1e-12 * float(np.abs(K).max())):
        raise ValueError(f"{gradients}: its Gram is not snapshot {snapshot}'s ({paths['gram']}): another run's file?")
    state_path = Path(checkpoint) / "optimizer.pt"
    if not state_path.is_file():
        raise ValueError(f"{checkpoint}: no optimizer.pt (Adam's metric needs the optimizer state of a checkpoint)")
    from gcpo_train.runfiles.checkpoint import safe_load

    state = safe_load(state_path)  # read once: the preconditioner, the card and the frozen-v check
    P = adam_preconditioner(state, trained_sizes(checkpoint))
    K_adam = metric_gram(gradients, rows, P, block)
    name = snapshot + ADAM_SUFFIX
    train = card.get("train_config", {})
    frame = adam_frame(groups, K_adam, name, float(train.get("r_min", 0.0)), float(train.get("r_max", 2.0)))
    new = snapshot_paths(out, name)
    check_snapshot(frame, K_adam, f"the groups of snapshot {name}", f"the Gram of snapshot {name}")
    group = state["param_groups"][0]
    steps = sorted({float(s["step"]) for s in state["state"].values()})
    live = [k for k, n2 in zip(rows, groups["grad_norm2"].to_numpy(float)) if n2 > 0]
    frozen = frozen_v_check(gradients, live, state, P)
    np.save(new["gram"], K_adam, allow_pickle=False)
    write_frame(frame, new["groups"])
    q = np.quantile(P, [0.0, 0.05, 0.5, 0.95, 1.0])
    card.update(
        snapshot=name,
        metric="adam",
        euclidean_snapshot=snapshot,
        preconditioner={
            "formula": "P = 1 / (sqrt(exp_avg_sq / (1 - beta2^t)) + eps), frozen at the checkpoint",
            "optimizer_state": str(state_path),
            "adam_step": steps,
            "betas": [float(b) for b in group["betas"]],
            "eps": float(group["eps"]),
            "p_quantiles_0_5_50_95_100": [float(x) for x in q],
        },
        frozen_v_check=frozen,
        clipping=(
            "the trainer clips a batch's gradient by one scalar min(1, max_grad_norm / norm): no cosine "
            "changes, so the clipped cosines are these"
        ),
    )
    write_text(new["card"], json.dumps(card, indent=1, sort_keys=True) + "\n")
    return name


def frozen_v_check(path: Path, live: list[int], state: dict, P: np.ndarray, n: int = 50, batch: int = 4) -> dict:
    """How much freezing v at the checkpoint moves the update's direction: for ``n`` random batches
    of ``batch`` live groups (seeded), the batch's own step would update v to β₂v + (1 − β₂)g_B²
    (g_B the batch's mean group gradient) and the bias correction to step t + 1; the cosine between
    P g_B and P' g_B is reported (its median and minimum). 1 means the frozen metric is the
    step's own."""
    if len(live) < batch:
        return {"n_batches": 0, "note": f"fewer than {batch} groups with a gradient"}
    groups = state["param_groups"][0]
    beta2, eps = float(groups["betas"][1]), float(groups["eps"])
    # in the parameter groups' order, as adam_preconditioner builds P
    per = state["state"]
    order = [i for g in state["param_groups"] for i in g["params"]]
    v = np.concatenate([per[i]["exp_avg_sq"].detach().double().cpu().numpy().ravel() for i in order])
    t = float(next(iter(state["state"].values()))["step"])
    rng = np.random.default_rng([len(live), 2026])
    cosines = []
    for _ in range(n):
        members = sorted(rng.choice(live, size=batch, replace=False).tolist())
        g = gradient_rows.read_rows(path, members).astype(np.float64).mean(0)
        P_next = 1.0 / (np.sqrt((beta2 * v + (1.0 - beta2) * g * g) / (1.0 - beta2 ** (t + 1))) + eps)
        a, b = P * g, P_next * g
        cosines.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    return {"n_batches": n, "batch_size": batch, "cos_median": float(np.median(cosines)), "cos_min": min(cosines)}
