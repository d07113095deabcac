"""What flows between the phases of one training step (``GCPOLoopTrainer.train_step``).

generate → ``StepRollouts`` (queries, token batch) → reward (fills rewards, answers) → log-probs
before the update → ``BeforeUpdate`` → modulate (advantages) → update → ``UpdateStats`` → the
log row (``summarize_step``) and the rollouts frame (``rollouts_frame``). Plain containers and
pure functions: the phases themselves are the trainer's methods.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from gcpo_train.sampling.generate import TokenBatch


@dataclass
class StepRollouts:
    """One training step's rollouts on this process: the Q queries, their tokens
    (``policy.TokenBatch``) and, after the reward phase, each rollout's reward and answer;
    Q × G rows, query-major."""

    queries: pd.DataFrame
    batch: TokenBatch  # policy.TokenBatch: token ids, masks, texts
    rewards: np.ndarray | None = None  # (Q·G,)
    answers: list | None = None  # extracted answers (QA) or boxed answers (math)
    reward_failed: np.ndarray | None = None  # (Q·G,) the reward function raised: reward set to 0
    math_fallbacks: int = 0  # answers the math grader compared as strings


@dataclass
class BeforeUpdate:
    """Per-token and per-rollout quantities of the policy before the update. Each is None unless
    something reads it (``GCPOLoopTrainer._logprobs_before_update``)."""

    n_tokens: np.ndarray  # (B,) completion tokens, at least 1
    old_logp: Any = None  # torch.Tensor (B, T) log π_old(y_t) at the sampling temperature (the loss's), no grad
    ref_logp: Any = None  # torch.Tensor (B, T) log π_ref(y_t) at the sampling temperature, no grad
    token_entropy: np.ndarray | None = None  # (B,) mean per-token entropy H_t of π_θ (temperature 1)
    seq_logprob: np.ndarray | None = None  # (B,) Σ_t log π_θ(y_t) at temperature 1: the sequence log-probability
    ratio_var: np.ndarray | None = None  # (B,) Var_t π_θ/π_ref at the sampling temperature, as ρ (R²VPO)

    def set_rollout_stats(self, logp, token_entropy, mask) -> None:
        """Per-rollout mean token entropy and sequence log-probability from (B, T) tensors of π_θ
        at temperature 1 (``logprobs.TokenLogprobs.policy_*``; docs/conventions.md, "The frames")."""
        from gcpo_train.loop.loss import per_rollout_mean

        self.token_entropy = per_rollout_mean(token_entropy, mask).cpu().numpy()
        self.seq_logprob = (logp * mask.to(logp.dtype)).sum(-1).cpu().numpy()


@dataclass
class UpdateStats:
    """One entry per optimizer update (μ of them) and the time spent in them."""

    lr: float
    loss: list = field(default_factory=list)
    kl: list = field(default_factory=list)
    clip_frac: list = field(default_factory=list)
    grad_norm: list = field(default_factory=list)
    time_forward_backward: float = 0.0
    time_step: float = 0.0
    gradvar: list | None = None  # per group {grad_var, grad_norm2_mean} (track_gradvar)
    time_gradvar: float = 0.0  # of time_forward_backward, the hooks' Gram work
    time_gradvar_prompt: float = 0.0  # of time_forward_backward, the per-rollout passes through shared prompts


class StepTimer:
    """``with timer("generate"): ...`` records that phase's seconds in ``timer.seconds``."""

    def __init__(self):
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        yield
        self.seconds[phase] = time.perf_counter() - t0

    def total(self) -> float:
        return time.perf_counter() - self.start


def summarize_step(step: int, parts: list[dict], group_size: int) -> dict:
    """The ``log.jsonl`` row of a step from each process's values (``parts``, in process order;
    one part on a single process), so the row of an N-process run is the row of a 1-process run.

    Per-rollout values (rewards, advantages, KL, clip fraction, token counts) are pooled and
    then averaged; per-group measures and weights are averaged over all groups; counts summed;
    the loss is the sum of the processes' shares (each already divided by the step's counts);
    the grad norm is that of the synced gradient; times are the slowest process's.
    """

    def pooled(key):
        return np.concatenate([np.asarray(p[key], dtype=float) for p in parts])

    rewards = pooled("rewards").reshape(-1, group_size)
    n_tokens, first = pooled("n_tokens"), parts[0]
    seconds = {k: max(p["seconds"][k] for p in parts) for k in first["seconds"]}
    row = {
        "step": step,
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "frac_zero_std": float((rewards.std(axis=1) == 0).mean()),
        "loss": float(sum(p["loss"][0] for p in parts)),
        "kl": float(pooled("kl").mean()),
        "grad_norm": float(first["grad_norm"]),
        "clip_frac": float(pooled("clip_frac").mean()),
        "lr": float(first["lr"]),
        "adv_abs_mean": float(np.abs(pooled("advantages")).mean()),
        "completion_tokens": float(n_tokens.mean()),
        "reward_failures": int(sum(int(np.sum(p["reward_failed"])) for p in parts)),
        "reward_math_fallbacks": int(sum(int(p["math_fallbacks"]) for p in parts)),
    }
    infos = [info for p in parts for info in p["infos"]]
    for key in sorted({k for info in infos for k in info}):
        row[key] = float(np.mean([info[key] for info in infos if key in info]))
    for key in ("cluster_judge_calls", "cluster_pairs_scored"):
        if any(key in p["cluster_stats"] for p in parts):
            row[key] = float(sum(p["cluster_stats"].get(key, 0) for p in parts))
    if first.get("gradvar") is not None:
        row.update(
            gradvar_summary(
                [g for p in parts for g in p["gradvar"]], infos, pooled("advantages").reshape(-1, group_size)
            )
        )
    row.update({f"time_{phase}": s for phase, s in seconds.items() if phase != "total"})
    row.update(time_total=seconds["total"], tokens_per_s=float(n_tokens.sum()) / seconds["total"])
    return row


MIN_GROUPS_FOR_RHO = 5  # a step's Spearman ρ(u, V) is logged only over at least this many groups


def gradvar_summary(gradvar: list[dict], infos: list[dict], advantages: np.ndarray) -> dict:
    """The step's V_train summary for ``log.jsonl``: mean V, the fraction of groups with V = 0
    and with all-zero advantages, and Spearman ρ(u, V) across the step's groups for every
    measure u the modulator reported (null below ``MIN_GROUPS_FOR_RHO`` groups or when u or V
    is constant across them)."""
    from scipy.stats import spearmanr

    v = np.array([g["grad_var"] for g in gradvar], dtype=float)
    row: dict[str, float | None] = {
        "grad_var_mean": float(v.mean()),
        "frac_grad_var_zero": float((v == 0).mean()),
        "frac_adv_all_zero": float((np.abs(advantages) == 0).all(axis=1).mean()),
        "grad_norm2_mean": float(np.mean([g["grad_norm2_mean"] for g in gradvar])),
    }
    if "grad_var_study" in gradvar[0]:  # track_gradvar: full
        study = np.array([g["grad_var_study"] for g in gradvar], dtype=float)
        row["grad_var_study_mean"] = float(study.mean())
        ok = np.ptp(study) > 0 and np.ptp(v) > 0 and len(v) >= MIN_GROUPS_FOR_RHO
        row["rho_grad_var_study_grad_var"] = float(spearmanr(study, v).statistic) if ok else None
    for key in sorted({k for info in infos for k in info}):
        u = np.array([info.get(key, np.nan) for info in infos], dtype=float)
        ok = np.isfinite(u)
        rho = None
        if ok.sum() >= MIN_GROUPS_FOR_RHO and np.ptp(u[ok]) > 0 and np.ptp(v[ok]) > 0:
            rho = float(spearmanr(u[ok], v[ok]).statistic)
        row[f"rho_{key}_grad_var"] = rho
    return row


def group_columns(
    frame: pd.DataFrame, gradvar: list[dict], infos: list[dict], advantages: np.ndarray, group_size: int
) -> pd.DataFrame:
    """Per-group columns, repeated on each rollout of the group: grad_var, grad_norm2_mean,
    adv_all_zero, and every measure the modulator reported (``group_<key>`` where the key is
    already a per-rollout column, e.g. token_entropy)."""
    adv_zero = (np.abs(np.asarray(advantages).reshape(-1, group_size)) == 0).all(axis=1)
    cols = {
        "grad_var": [g["grad_var"] for g in gradvar],
        "grad_norm2_mean": [g["grad_norm2_mean"] for g in gradvar],
        "adv_all_zero": adv_zero,
    }
    for key in ("grad_var_study", "grad_norm2_study"):  # track_gradvar: full
        if key in gradvar[0]:
            cols[key] = [g[key] for g in gradvar]
    for key in sorted({k for info in infos for k in info}):
        cols[key if key not in frame.columns and key not in cols else f"group_{key}"] = [
            info.get(key, np.nan) for info in infos
        ]
    for name, values in cols.items():
        frame[name] = np.repeat(np.asarray(values), group_size)
    return frame


def rollouts_frame(
    step: int,
    rollouts: StepRollouts,
    before: BeforeUpdate,
    advantages: np.ndarray,
    dataset: str,
    temperature: float,
) -> pd.DataFrame:
    """The step's rollouts frame (docs/conventions.md), one row per rollout: ``token_entropy`` and
    ``logprob`` of π_θ itself (temperature 1), ``temperature`` the one the rollouts were sampled at."""
    from gcpo_analysis.rewards import is_success

    queries = rollouts.queries
    assert rollouts.rewards is not None  # scored before the frame is built
    G = len(rollouts.rewards) // max(1, len(queries))
    frame = pd.DataFrame(
        {
            "query_id": np.repeat(queries["query_id"].astype(str).to_numpy(), G),
            "rollout_id": np.tile(np.arange(G), len(queries)),
            "completion": rollouts.batch.texts,
            "answer": rollouts.answers,
            "reward": rollouts.rewards,
            "references": [list(r) for r in np.repeat(queries["references"].to_numpy(), G)],
            "token_entropy": before.token_entropy,
            "logprob": before.seq_logprob,
            "n_tokens": before.n_tokens.astype(int),
            "temperature": float(temperature),
            "advantage": advantages,
            "reward_failed": rollouts.reward_failed,
            "dataset": dataset,
            "step": step,
        }
    )
    tasks = np.repeat(queries["task"].to_numpy(), G)
    frame["success"] = [bool(is_success(task, r)) for task, r in zip(tasks, rollouts.rewards)]
    if before.ratio_var is not None:
        frame["ratio_var"] = before.ratio_var
    return frame
