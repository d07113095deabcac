"""Score rollout groups: the rollouts frame in, the groups frame out (docs/conventions.md).

One batched embedding call for all groups (identical texts embedded once), one batched judge
call per greedy clustering round for all groups, then the measures vectorised over groups of
equal size. The judge and embedder used are recorded in ``groups.attrs['gcpo']``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ..frames import id_order, show_value, validate_rollouts
from ..vocab import (
    CLUSTERS,
    EMBEDDINGS,
    JUDGE,
    NLI_THRESHOLD,
    USE_FULL_COMPLETION,
    full_completion,
)
from .dispersion import ALPHA_BASE, R_MAX, R_MIN, check_alpha_base
from .registry import FEATURE_OF_COLUMN, MEASURE_REGISTRY, RegistryView, default_measures, frame_order

# measure -> what it needs computed, named as Modulator.needs names it (the registry's ``needs``),
# read from the registry at each access (a measure registered later is in it)
MEASURES: RegistryView = RegistryView(MEASURE_REGISTRY, lambda m: set(m.needs))


def parse_measures(measures: str | Iterable[str]) -> list[str]:
    """'cd,bot,rd' or an iterable -> a checked list; 'all' gives every measure."""
    if isinstance(measures, str):
        measures = list(MEASURES) if measures == "all" else [m.strip() for m in measures.split(",") if m.strip()]
    measures = list(dict.fromkeys(measures))
    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise ValueError(f"unknown measure(s) {unknown}; choose from {list(MEASURES)}")
    if not measures:
        raise ValueError("no measure requested")
    return measures


def check_rewards_in_range(df: pd.DataFrame, r_min: float, r_max: float) -> None:
    """Every reward of a rollouts frame inside [r_min, r_max] (``dispersion.as_rewards``' slack of
    1e-9); the error names the first bad one by its row, query and rollout, and the flags."""
    r = df["reward"].to_numpy(float)
    bad = ~((r >= r_min - 1e-9) & (r <= r_max + 1e-9))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"reward {r[row]:g} at row {row} (query_id={show_value(df['query_id'].iloc[row])}, rollout_id="
            f"{show_value(df['rollout_id'].iloc[row])}) lies outside the declared range [{r_min:g}, {r_max:g}]; "
            f"{int(bad.sum())} such row(s). Set --r-min/--r-max (r_min/r_max) to your rewards' range"
        )


def score_groups(
    rollouts: pd.DataFrame,
    measures: str | Iterable[str] | None = None,
    *,
    embedder: Any = None,
    judge: Any = JUDGE,
    nli_threshold: float = NLI_THRESHOLD,
    use_full_completion: bool | None = USE_FULL_COMPLETION,
    alpha_base: float = ALPHA_BASE,
    r_min: float = R_MIN,
    r_max: float = R_MAX,
    progress: bool = True,
) -> pd.DataFrame:
    """The groups frame: one row per query with every requested measure and weight.

    Columns: query_id, G, the measures (token_entropy = mean over rollouts of the mean
    per-token entropy; pe = predictive entropy -(1/G) sum log p(y_i); se = the discrete semantic
    entropy, C_k = |k| / G, whether or not ``logprob`` is present; se_lw = the likelihood-weighted
    SE from ``logprob``, with mean token log-probabilities when ``n_tokens`` is present too
    (``entropy.se_logweights``); kle; cd; bot; rd), the weights w_cd, w_bot
    = clip(1 - alpha_G u^2, 0, 1), w_rd = 1 + alpha_G RD, the Seed-GRPO/KLE weights w_se, w_se_lw, w_kle,
    n_clusters, mean_reward, success_rate (when ``success`` is present). Rollouts are ordered by
    rollout_id inside each group, which fixes the greedy clustering's order.

    ``judge``: a judge object or a spec for ``make_judge`` ('embedding', 'lexical', 'math',
    'nli:<model>'); the default 'embedding' is the offline MiniLM-similarity judge (the paper
    uses roberta-large-mnli: pass judge='nli' where it is installed). ``embedder``: a spec for
    ``make_embedder`` or an object with ``encode``, wrapped in an ``Embedder`` (de-duplicated,
    L2-normalised). ``nli_threshold``: the clustering's entailment threshold.

    Each measure is an entry of ``registry.MEASURE_REGISTRY`` (what it needs, its values over the
    groups of one size, its weight); this function only turns the frame into groups and back.
    """
    from ..rewards import math_fallbacks
    from .prepare import measurement_tools, prepare_groups
    from .weights_checked import checked_weights

    measures = parse_measures(default_measures() if measures is None else measures)
    chosen = [MEASURE_REGISTRY[m] for m in measures]
    check_alpha_base(alpha_base)
    fallbacks_before = math_fallbacks()
    df = validate_rollouts(rollouts)
    for m in chosen:
        for col in m.columns:
            if col not in df.columns:
                raise ValueError(f"measure {m.name!r} needs the rollouts column {col!r}, which is missing")
    if any(m.rewards for m in chosen):  # named by query and row here; the measure sees only positions
        check_rewards_in_range(df, r_min, r_max)
    # auto (None): the full completion when every rollout's dataset is a math one (vocab)
    text_col = "completion" if full_completion(use_full_completion, df.get("dataset")) else "answer"
    df = df.sort_values("rollout_id", kind="stable", key=id_order)  # "2" before "10", as 2 before 10
    order = pd.unique(rollouts["query_id"])  # keep the caller's query order
    grouped = {q: g for q, g in df.groupby("query_id", sort=False)}
    groups = [grouped[q] for q in order]
    texts = [g[text_col].tolist() for g in groups]
    rewards = [g["reward"].to_numpy(float) for g in groups]
    sizes = np.array([len(g) for g in groups])

    needs: set[str] = set().union(*(m.needs for m in chosen))
    read = {c for m in chosen for c in m.columns + m.optional_columns if c in df.columns}
    meta: dict[str, Any] = {
        "measures": measures,
        "alpha_base": alpha_base,
        "r_min": r_min,
        "r_max": r_max,
        "text": text_col,
        "nli_threshold": nli_threshold,
    }
    span = float(df["reward"].max() - df["reward"].min())
    if "rd" in measures and span <= 0.5 * (r_max - r_min):
        # 0/1 rewards under the default [0, 2] range give RD = 0.5 where it should be 1
        meta["reward_range_warning"] = (
            f"the observed rewards span {span:g}, at most half of the declared range [{r_min:g}, {r_max:g}]: "
            f"RD is normalised by that range; set r_max (--r-max) to your rewards' range"
        )
        warnings.warn(meta["reward_range_warning"], stacklevel=2)
    if embedder is not None and not isinstance(embedder, str):
        from .embed import make_embedder

        embedder = make_embedder(embedder)  # the frame's embeddings are always de-duplicated and normalised
    embedder, judge = measurement_tools(needs, embedder, judge)
    columns = {FEATURE_OF_COLUMN[c]: [g[c].to_numpy(float) for g in groups] for c in read}
    prepared, stats = prepare_groups(
        texts,
        rewards,
        needs | set(columns),
        embedder=embedder,
        judge=judge,
        nli_threshold=nli_threshold,
        progress=progress,
        answers=[g["answer"].tolist() for g in groups],
        group_ids=list(order),
        **columns,
    )
    if "token_entropy" in read:
        # prepare_groups holds features in float64; the mean token entropy is taken in the
        # column's own dtype (a trainer frame's float32), as the groups frame always has
        prepared = [
            dataclasses.replace(p, token_entropy=g["token_entropy"].to_numpy()) for p, g in zip(prepared, groups)
        ]
    if EMBEDDINGS in needs:
        meta["embedder"] = embedder.describe()
    if CLUSTERS in needs:
        meta["judge"] = judge.describe()
        meta["clustering"] = {k: v for k, v in stats.items() if k != "texts_cut"}
    meta["texts_cut"] = int(stats.get("texts_cut", 0))  # cut to prepare.MAX_TEXT_CHARS (a warning said so)

    out = pd.DataFrame({"query_id": order, "G": sizes})
    out["mean_reward"] = [r.mean() for r in rewards]
    if "success" in df.columns:
        out["success_rate"] = [g["success"].astype(float).mean() for g in groups]
    if CLUSTERS in needs:
        out["n_clusters"] = [len(np.unique(np.asarray(g.clusters))) for g in prepared]

    # every measure on the groups of each size (cd, bot and rd vectorised over them)
    values: dict[str, np.ndarray] = {}
    for G in np.unique(sizes):
        idx = np.flatnonzero(sizes == G)
        same_size = [prepared[i] for i in idx]
        for m in chosen:
            u = m.compute(same_size, r_min, r_max)
            values.setdefault(m.name, np.empty(len(groups), dtype=np.asarray(u).dtype))[idx] = u
            if m.weight is not None and m.weight_column is not None:
                weights = checked_weights(
                    m.weight(u, int(G), alpha_base), f"measure {m.name!r}", [f"query {order[i]!r}" for i in idx]
                )
                values.setdefault(m.weight_column, np.empty(len(groups)))[idx] = weights
    for name in frame_order():  # every registered measure has a place: none is dropped
        m = MEASURE_REGISTRY[name]
        if name in values:
            out[name] = values[name]
            if m.weight_column is not None:
                out[m.weight_column] = values[m.weight_column]
    if "se" in measures:
        meta["se"] = "discrete: C_k = |k| / G (empirical cluster mass, the mass BoT uses)"
    if "se_lw" in measures:
        norm = (
            "mean token log-probability (logprob / n_tokens)"
            if "n_tokens" in df.columns
            else "sequence log-probability"
        )
        meta["se_lw"] = f"likelihood-weighted: C_k = sum_(i in k) p_i / sum_i p_i, p_i from the {norm}"
    if (sizes == 1).any():
        warnings.warn(
            f"{int((sizes == 1).sum())} group(s) have G = 1: no dispersion, measures 0 and weights 1",
            stacklevel=2,
        )
    meta["alpha_G"] = {int(G): (0.0 if G == 1 else alpha_base / math.log(G)) for G in np.unique(sizes)}
    # Answers over the math grader's guards were compared as strings: say how many.
    after = math_fallbacks()
    meta["math_fallbacks"] = {
        k: after[k] - fallbacks_before.get(k, 0) for k in after if after[k] != fallbacks_before.get(k, 0)
    }
    if meta["math_fallbacks"]:
        warnings.warn(
            f"math judge: {meta['math_fallbacks']} comparison(s) fell back to string equality "
            f"(counted by reason: length, depth, cost, memory, time, worker)",
            stacklevel=2,
        )
    out.attrs["gcpo"] = meta
    return out
