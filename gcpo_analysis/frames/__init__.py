"""The two data frames every part of gcpo passes around (docs/conventions.md, "How data flows").

rollouts frame (long, one row per rollout)
    required: query_id, rollout_id, completion, answer, reward
    optional: references (list[str]), token_entropy (mean per-token entropy),
              logprob (sum of token log-probabilities), temperature (the sampling
              temperature), n_tokens, success (bool), dataset, step,
              ratio_var (Var_t of the policy ratio, for R2VPO)
    token_entropy and logprob describe the policy pi_theta itself, at temperature 1 (softmax of
    the raw logits), whatever temperature the rollouts were sampled at; ``gcpo study`` and
    ``gcpo train`` both write them so (``check_logprob_convention`` warns on a frame that may
    not).
groups frame (one row per query)
    required: query_id, G
    optional: one column per measure (token_entropy, se, kle, cd, bot, rd, ...), weights
              (w_cd, w_bot, w_rd, ...), n_clusters, success_rate, mean_reward, grad_var

Both round-trip through Parquet and JSONL. A bad frame is refused with a message that
names the column and the row.

The package: ``schema`` (the columns), ``validate`` (the checks), ``files`` (reading and the
atomic writers). Import from ``gcpo_analysis.frames``.
"""

from __future__ import annotations

from .files import (
    CSV_NA_STRINGS,
    CSV_TEXT_COLUMNS,
    TABLE_FLOAT_FORMAT,
    read_frame,
    read_table,
    write_figure,
    write_frame,
    write_json,
    write_table,
    write_text,
)
from .schema import (
    GROUP_REQUIRED,
    NONNEGATIVE_ROLLOUT_COLUMNS,
    POLICY_COLUMNS,
    RESERVED_COLUMNS,
    RESERVED_PREFIXES,
    ROLLOUT_NUMERIC,
    ROLLOUT_REQUIRED,
    SHARE_GROUP_COLUMNS,
    TRAINER_COLUMNS,
    FrameError,
    check_columns,
    reserved_column,
    show_value,
)
from .validate import (
    check_logprob_convention,
    id_order,
    map_rollout_columns,
    message_text,
    note_logprob_convention,
    prompt_key,
    text_column,
    validate_groups,
    validate_rollouts,
)

__all__ = [
    "CSV_NA_STRINGS",
    "CSV_TEXT_COLUMNS",
    "FrameError",
    "GROUP_REQUIRED",
    "NONNEGATIVE_ROLLOUT_COLUMNS",
    "POLICY_COLUMNS",
    "RESERVED_COLUMNS",
    "RESERVED_PREFIXES",
    "ROLLOUT_NUMERIC",
    "ROLLOUT_REQUIRED",
    "SHARE_GROUP_COLUMNS",
    "TABLE_FLOAT_FORMAT",
    "TRAINER_COLUMNS",
    "check_columns",
    "check_logprob_convention",
    "id_order",
    "map_rollout_columns",
    "message_text",
    "note_logprob_convention",
    "prompt_key",
    "read_frame",
    "read_table",
    "reserved_column",
    "show_value",
    "text_column",
    "validate_groups",
    "validate_rollouts",
    "write_figure",
    "write_frame",
    "write_json",
    "write_table",
    "write_text",
]
