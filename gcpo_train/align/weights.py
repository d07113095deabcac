"""The per-group frame of a snapshot: what each group-level modulator weighs every group by.

ω(q) comes from the functions the trainer calls (``gcpo_analysis.measures``): the features of
every group are prepared once by ``prepare_groups`` (one embedding call, one batched clustering,
with the union of the modulators' needs and the run's embedder and judge), with the per-rollout
entropies and log-probabilities of the gradient pass (as the loop passes them), and each
modulator's ``group_weight`` is taken at the run's settings (``modulator_params``). eg_spo, r2vpo
and empo weigh rollouts, not groups (``Modulator.no_weight``): they have no ω(q) and are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def group_level_modulators() -> list[str]:
    """The registered modulators that weigh a whole group (``Modulator.weight`` set), in order."""
    from gcpo_analysis.measures.modulators import MODULATORS

    return [name for name, m in MODULATORS.items() if m.weight is not None]


def pool_weights(parts: list[dict], train) -> pd.DataFrame:
    """One row per group part (``run.run_snapshot``): position, role, query, reward mean and
    spread, ‖g_q‖², completion length and ``w_<modulator>`` for every group-level modulator."""
    from gcpo_analysis.measures.modulators import MODULATORS, group_weight
    from gcpo_analysis.measures.prepare import prepare_groups
    from gcpo_train.modulation import modulator_params

    names = group_level_modulators()
    needs = frozenset().union(*(MODULATORS[n].needs for n in names))
    settings = train.modulation_settings()
    texts = [p["texts"] if train.full_completion else p["answers"] for p in parts]
    groups, _ = prepare_groups(
        texts,
        [np.asarray(p["rewards"]) for p in parts],
        needs,
        embedder=settings.embedder,
        judge=settings.judge,
        nli_threshold=settings.nli_threshold,
        embedding_dtype=np.float64,
        answers=[p["answers"] for p in parts],
        token_entropy=[p["token_entropy"] for p in parts],
        logprobs=[p["seq_logprob"] for p in parts],
        n_tokens=[p["n_tokens"] for p in parts],
    )
    params = modulator_params(settings)
    rows = []
    for p, group in zip(parts, groups):
        group.grad_norm2 = float(p["grad_norm2"])  # the study has each group's gradient (inv_grad_norm)
        r = np.asarray(p["rewards"], dtype=float)
        row = {
            "position": int(p["position"]),
            "role": p["role"],
            "query_id": p["query_id"],
            "reward_mean": float(r.mean()),
            "reward_spread": float(r.std()),
            "live": bool(np.ptp(r) > 0),
            "grad_norm2": float(p["grad_norm2"]),
            "completion_tokens": float(np.mean(p["n_tokens"])),
            "seconds": float(p["seconds_generate"] + p["seconds_gradient"]),
        }
        for name in names:
            w, _ = group_weight(
                name, group, alpha_base=settings.alpha_base, r_min=settings.r_min, r_max=settings.r_max, **params
            )
            row[f"w_{name}"] = float(w)
        rows.append(row)
    return pd.DataFrame(rows)
