"""Per-group columns derived from a study's rollouts and Gram matrices: the parts of
V = N + C (``grad_var_norm``, ``grad_var_cross``; ``gradvar.variance_parts``), how orthogonal the
gradients are (``grad_cos_abs_mean`` = mean over i != j of |K_ij| / sqrt(K_ii K_jj)), and the
completion-length controls (``n_tokens_mean``; ``cap_share``, the share of the group's rollouts
whose completion used the whole ``max_new_tokens`` budget). Derived, so never written back over a
committed groups frame: ``restat`` recomputes them from rollouts.parquet and grams.parquet."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..gradvar import variance_parts
from ..measures.advantages import grpo_advantages

COVARIATES = ["grad_var_norm", "grad_var_cross", "grad_cos_abs_mean", "n_tokens_mean", "cap_share"]


def _cos_abs_mean(K: np.ndarray) -> float:
    d = np.sqrt(np.clip(np.diag(K), 0, None))
    G = len(K)
    if G < 2 or not (d > 0).all():
        return float("nan")
    C = np.abs(K) / np.outer(d, d)
    return float((C.sum() - np.trace(C)) / (G * (G - 1)))


def group_covariates(rollouts: pd.DataFrame, grams: dict | None, max_new_tokens: int | None) -> pd.DataFrame:
    """One row per query of ``rollouts`` (its order): ``COVARIATES`` and query_id. ``grams``
    {query_id: K} or None (then no V parts); ``max_new_tokens`` None: no cap share. Rewards give
    the GRPO advantages, as for V; rollouts are ordered by rollout_id, the Gram's index."""
    df = rollouts.sort_values(["query_id", "rollout_id"], kind="stable")
    by = {q: g for q, g in df.groupby("query_id", sort=False)}
    rows = []
    for q in pd.unique(rollouts["query_id"]):
        g = by[q]
        row: dict = {"query_id": q}
        if grams is not None:
            if q not in grams:
                raise ValueError(f"query {q!r} has no Gram matrix in grams.parquet")
            K = np.asarray(grams[q], float)
            if len(K) != len(g):
                raise ValueError(f"query {q!r}: {len(g)} rollouts but a {len(K)} x {len(K)} Gram matrix")
            row["grad_var_norm"], row["grad_var_cross"] = variance_parts(
                K, grpo_advantages(g["reward"].to_numpy(float))
            )
            row["grad_cos_abs_mean"] = _cos_abs_mean(K)
        if "n_tokens" in g.columns:
            n = g["n_tokens"].to_numpy(float)
            row["n_tokens_mean"] = float(n.mean())
            if max_new_tokens is not None:
                row["cap_share"] = float(np.mean(n >= max_new_tokens))
        rows.append(row)
    return pd.DataFrame(rows)


def with_covariates(groups: pd.DataFrame, rollouts: pd.DataFrame, grams, max_new_tokens) -> pd.DataFrame:
    """``groups`` with the covariates of ``group_covariates`` merged in by query_id (columns
    already in ``groups`` are recomputed, so a frame and its Grams cannot disagree)."""
    from .collect import grams_by_query

    K = grams_by_query(grams) if isinstance(grams, pd.DataFrame) else grams
    cov = group_covariates(rollouts, K, max_new_tokens)
    keep = [c for c in groups.columns if c == "query_id" or c not in cov.columns]
    return groups[keep].merge(cov, on="query_id", how="left", validate="one_to_one")
