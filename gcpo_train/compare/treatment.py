"""What a comparison's arms actually did to the updates, read back from a comparison folder's
committed rollouts and logs (issue 35):

* **ω per group** (``omega_groups``, ``omega_frame``): Ã = ω·A for a group-level modulator, so
  ω = Σ_i Ã_i A_i / Σ_i A_i² with A the plain GRPO advantages (groups whose rewards are all equal
  have A = 0 and no ω); a TRL run's rollouts carry ω as the column ``weight``. A is made with the
  comparison's own ``eps`` (its config's, as the trainer made Ã), so plain GRPO reads ω = 1.
* **Effective treatment** (``effective_treatment``): AdamW normalises a uniform rescaling of a
  step's loss away (up to ε and gradient clipping; ``gcpo proofs``' Adam-invariance check), so
  what can reach the update is the within-step relative weight ω / mean_step(ω) (its p5–p95 over
  all groups of all seeds), and clipping: the share of steps whose pre-clip gradient norm exceeds
  ``max_grad_norm``. The mean ω is reported beside them.
* **Coupling** (``coupling``): the arms of one seed sample each group from the same seed
  (common random numbers), so at step 1 their completions are identical and later differences
  come from the updates alone. The share of identical completions (same step, query and rollout
  index) per step, averaged over seeds, says how long a pair stays paired; ``first_below`` gives
  the first step at which it falls below a level (90%, 50%).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.vocab import EPS
from gcpo_train.compare.layout import arm_seed_folder, finished_seeds


def omega_groups(rollouts: pd.DataFrame, eps: float = EPS) -> pd.DataFrame:
    """(step, query_id, omega) of every group of a rollouts frame with unequal rewards: its
    ``weight`` column where it has one (TRL runs), else read back from ``advantage`` with the
    GRPO advantages of ``eps`` (the config's: the trainer's)."""
    from gcpo_analysis.measures.advantages import grpo_advantages

    rows = []
    for (_, query), g in rollouts.groupby(["step", "query_id"], sort=False):
        A = grpo_advantages(g["reward"].to_numpy(float), eps)
        if not np.any(A != 0):
            continue
        if "weight" in g:
            omega = float(g["weight"].iloc[0])
        else:
            omega = float(np.dot(g["advantage"].to_numpy(float), A) / np.dot(A, A))
        rows.append((int(g["step"].iloc[0]), str(query), omega))
    return pd.DataFrame(rows, columns=["step", "query_id", "omega"])


def _rollout_files(out: Path, arm: str, seed: int) -> list[Path]:
    return sorted((arm_seed_folder(out, arm, seed) / "rollouts").glob("step_*.parquet"))


def omega_frame(out, arm: str, eps: float | None = None) -> pd.DataFrame:
    """(seed, step, query_id, omega) of every group of every seed of ``arm`` in folder ``out``,
    with the GRPO advantages of ``eps``: the comparison config's (compare.json's config.eps,
    what the trainer used); None is the trainer's default (``TrainConfig.eps``), what a config
    without an eps trained with."""
    import pyarrow.parquet as pq

    eps = EPS if eps is None else eps
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a number >= 0 (the config's eps in {Path(out) / 'compare.json'}), got {eps!r}")
    parts = []
    for seed in finished_seeds(out, arm):
        for f in _rollout_files(out, arm, seed):
            omega = "weight" if "weight" in pq.read_schema(f).names else "advantage"
            frame = omega_groups(pd.read_parquet(f, columns=["step", "query_id", "reward", omega]), float(eps))
            parts.append(frame.assign(seed=seed))
    if not parts:
        return pd.DataFrame(columns=["seed", "step", "query_id", "omega"])
    return pd.concat(parts, ignore_index=True)[["seed", "step", "query_id", "omega"]]


def relative_weights(omega: pd.DataFrame) -> np.ndarray:
    """ω / mean_step(ω) of every group, the mean over that seed's step's groups with an ω."""
    if omega.empty:
        return np.array([])
    mean = omega.groupby(["seed", "step"])["omega"].transform("mean")
    return (omega["omega"] / mean).to_numpy(float)


def clipped_share(out, arm: str, max_grad_norm: float) -> float:
    """Share of logged steps (all seeds of ``arm``) whose pre-clip gradient norm exceeds
    ``max_grad_norm``; NaN where no log or no clipping (max_grad_norm ≤ 0)."""
    from gcpo_train.runfiles.runlog import read_log

    norms = []
    for seed in finished_seeds(out, arm):
        log = arm_seed_folder(out, arm, seed) / "log.jsonl"
        if log.exists():
            norms += [r["grad_norm"] for r in read_log(log) if r.get("grad_norm") is not None]
    if not norms or not max_grad_norm or max_grad_norm <= 0:
        return float("nan")
    return float(np.mean(np.asarray(norms, float) > max_grad_norm))


def effective_treatment(out, arm: str, omega: pd.DataFrame, max_grad_norm: float) -> dict:
    """{"omega_mean", "rel_omega_p5", "rel_omega_p95", "clipped_share"} of one arm."""
    rel = relative_weights(omega)
    return {
        "omega_mean": float(omega["omega"].mean()) if len(omega) else float("nan"),
        "rel_omega_p5": float(np.quantile(rel, 0.05)) if rel.size else float("nan"),
        "rel_omega_p95": float(np.quantile(rel, 0.95)) if rel.size else float("nan"),
        "clipped_share": clipped_share(out, arm, max_grad_norm),
    }


def identical_share(a: pd.DataFrame, b: pd.DataFrame) -> pd.Series:
    """Per step, the share of (query_id, rollout_id) whose completions are identical in the two
    rollouts frames (the rows both have)."""
    keys = ["step", "query_id", "rollout_id"]
    both = a[keys + ["completion"]].merge(b[keys + ["completion"]], on=keys, suffixes=("_a", "_b"))
    same = both["completion_a"] == both["completion_b"]
    return same.groupby(both["step"]).mean().rename("identical")


def coupling(out, arm: str, reference: str) -> pd.DataFrame:
    """(step, identical, seeds): the share of identical completions between ``arm`` and
    ``reference`` at each step, averaged over the seeds both have."""
    columns = ["step", "query_id", "rollout_id", "completion"]
    curves = []
    for seed in sorted(set(finished_seeds(out, arm)) & set(finished_seeds(out, reference))):
        files = {f.name: f for f in _rollout_files(out, arm, seed)}
        ref = {f.name: f for f in _rollout_files(out, reference, seed)}
        shared = sorted(set(files) & set(ref))
        if not shared:
            continue
        a = pd.concat([pd.read_parquet(files[n], columns=columns) for n in shared], ignore_index=True)
        b = pd.concat([pd.read_parquet(ref[n], columns=columns) for n in shared], ignore_index=True)
        curves.append(identical_share(a, b))
    if not curves:
        return pd.DataFrame(columns=["step", "identical", "seeds"])
    table = pd.concat(curves, axis=1)
    return pd.DataFrame(
        {"step": table.index.astype(int), "identical": table.mean(axis=1).to_numpy(), "seeds": table.count(axis=1)}
    ).reset_index(drop=True)


def first_below(curve: pd.DataFrame, level: float) -> int | None:
    """The first step whose share of identical completions is below ``level`` (None: never)."""
    below = curve[curve["identical"] < level]
    return int(below["step"].min()) if len(below) else None
