"""The columns of the two frames (docs/conventions.md, "The frames") and the one missing-column
check: what a rollouts or groups frame must have, what describes the policy, what a measure may
not be named."""

from __future__ import annotations

import numpy as np
import pandas as pd

ROLLOUT_REQUIRED = ("query_id", "rollout_id", "completion", "answer", "reward")
ROLLOUT_NUMERIC = ("reward", "token_entropy", "logprob", "ratio_var")
GROUP_REQUIRED = ("query_id", "G")
# the columns that describe pi_theta at temperature 1 (docs/conventions.md, "The frames")
POLICY_COLUMNS = ("token_entropy", "logprob")
# columns only gcpo train's own loop writes: a frame with them and no temperature column is one of
# its frames from before the convention, whose POLICY_COLUMNS were at the sampling temperature
TRAINER_COLUMNS = ("advantage", "reward_failed")
# rollouts columns that cannot be negative, and why: refused naming the row, never averaged in
NONNEGATIVE_ROLLOUT_COLUMNS = {
    "token_entropy": "a mean per-token entropy",
    "ratio_var": "a variance of the policy ratio",
    "n_tokens": "a completion length",
}
# Columns of the two frames that are not measures: a measure (a groups column named as the
# measure, its weight w_<name>) may not take one of these names, nor a name with one of the
# prefixes (w_: every measure's weight; train_, grad_var_: the training study's and V's parts),
# or it would overwrite that column. token_entropy is both a rollouts column and the
# measure that averages it.
RESERVED_COLUMNS = frozenset(
    ROLLOUT_REQUIRED
    + ("references", "logprob", "temperature", "n_tokens", "success", "dataset", "step", "ratio_var")
    + TRAINER_COLUMNS
    + GROUP_REQUIRED
    + ("mean_reward", "success_rate", "n_clusters", "grad_var", "grad_norm2_mean", "t_generate", "t_gradvar")
    + ("grad_cos_abs_mean", "n_tokens_mean", "cap_share", "adv_all_zero", "phase", "prompt", "task", "G_eff")
)
RESERVED_PREFIXES = ("w_", "train_", "grad_var_", "t_")


def reserved_column(name: str) -> str | None:
    """Why ``name`` may not be a measure's column (a frame column or prefix of one), else None."""
    if name in RESERVED_COLUMNS:
        return f"{name!r} is a column of the rollouts or groups frame"
    for prefix in RESERVED_PREFIXES:
        if name.startswith(prefix):
            return f"names starting with {prefix!r} are reserved for the frames' {prefix}* columns"
    return None


# groups columns that are shares of the group's rollouts
SHARE_GROUP_COLUMNS = ("success_rate",)


def show_value(value) -> str:
    """repr of a cell as a user wrote it (1, not np.int64(1))."""
    return repr(value.item() if isinstance(value, np.generic) else value)


class FrameError(ValueError):
    """A frame that does not follow docs/conventions.md's frames; the message names column and row."""


def check_columns(df: pd.DataFrame, required, kind: str, source: str | None, has=None) -> None:
    """A FrameError naming the ``required`` columns a ``kind`` frame (from ``source``) lacks and
    listing the ones it has; ``has``: the columns to list as the file's (default ``df``'s), where
    ``df`` holds derived ones. The one missing-column check of the frames gcpo reads."""
    where = f" in {source}" if source else ""
    missing = [c for c in required if c not in df.columns]
    if missing:
        listed = list(df.columns if has is None else has)
        raise FrameError(f"{kind} frame{where} is missing required column(s) {missing}; it has {listed}")
