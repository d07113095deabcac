"""What flows between the phases of one training step (``GRPOTrainer.train_step``).

generate → ``Rollouts`` (queries, token batch) → reward (fills rewards, answers) → log-probs
before the update → ``BeforeUpdate`` → modulate (advantages) → update → ``UpdateStats`` → the
log row and the rollouts frame. Plain containers: the phases are the trainer's methods.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass
class Rollouts:
    """One step's groups on this process: Q queries × G rollouts, rows query-major."""
    queries: pd.DataFrame
    batch: object                            # policy.GroupBatch: token ids, masks, texts
    positions: list = None                   # each query's place among the step's queries (all processes)
    rewards: np.ndarray = None               # (Q·G,)
    answers: list = None                     # extracted answers (QA) or boxed answers (math)
    reward_failed: np.ndarray = None         # (Q·G,) the reward function raised: reward set to 0
    math_fallbacks: int = 0                  # answers the math grader compared as strings


@dataclass
class BeforeUpdate:
    """Per-token and per-rollout quantities of the policy before the update. Each is None unless
    something reads it (``GRPOTrainer._logprobs_before_update``)."""
    n_tokens: np.ndarray                     # (B,) completion tokens, at least 1
    old_logp: object = None                  # (B, T) log π_old(y_t), no grad
    ref_logp: object = None                  # (B, T) log π_ref(y_t), no grad
    token_entropy: np.ndarray = None         # (B,) mean per-token entropy H_t of each rollout
    seq_logprob: np.ndarray = None           # (B,) Σ_t log π(y_t): the sequence log-probability
    ratio_var: np.ndarray = None             # (B,) Var_t π_θ/π_ref (R²VPO)

    def set_rollout_stats(self, logp, token_entropy, mask) -> None:
        """Per-rollout mean token entropy and sequence log-probability from (B, T) tensors."""
        from .loss import per_rollout_mean

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
