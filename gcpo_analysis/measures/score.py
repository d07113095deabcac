"""Score rollout groups: the rollouts frame in, the groups frame out (docs/conventions.md).

One batched embedding call for all groups (identical texts embedded once), one batched judge
call per greedy clustering round for all groups, then the measures vectorised over groups of
equal size. The judge and embedder used are recorded in ``groups.attrs['gcpo']``.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from ..frames import validate_rollouts
from .dispersion import (
    ALPHA_BASE,
    R_MAX,
    R_MIN,
    barycentric_transport_batch,
    check_alpha_base,
    cosine_dispersion_batch,
    geometry_weight,
    rd_weight,
    reward_dispersion_batch,
)

# measure -> what it needs computed: 'emb' embeddings, 'clu' clusters
MEASURES = {
    "token_entropy": set(),
    "pe": set(),
    "se": {"clu"},
    "se_lw": {"clu"},
    "kle": {"emb"},
    "cd": {"emb"},
    "bot": {"emb", "clu"},
    "rd": set(),
}
# measures read from a rollouts column instead
MEASURE_COLUMNS = {"token_entropy": "token_entropy", "pe": "logprob", "se_lw": "logprob"}
DEFAULT_MEASURES = ("token_entropy", "se", "se_lw", "kle", "cd", "bot", "rd")
# query-level baseline weights written next to the measures (from the modulator registry):
# measure -> (modulator, weight column)
BASELINE_WEIGHTS = {"se": ("se", "w_se"), "se_lw": ("se", "w_se_lw"), "kle": ("kle", "w_kle")}


def parse_measures(measures) -> list[str]:
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


def score_groups(
    rollouts: pd.DataFrame,
    measures=DEFAULT_MEASURES,
    *,
    embedder=None,
    judge="embedding",
    threshold: float = 0.35,
    use_full_completion: bool = False,
    alpha_base: float = ALPHA_BASE,
    r_min: float = R_MIN,
    r_max: float = R_MAX,
    progress: bool = True,
) -> pd.DataFrame:
    """The groups frame: one row per query with every requested measure and weight.

    Columns: query_id, G, the measures (token_entropy = mean over rollouts of the mean
    per-token entropy; pe = predictive entropy -(1/G) sum log p(y_i); se = semantic entropy,
    likelihood-weighted when ``logprob`` is present, with mean token log-probabilities when
    ``n_tokens`` is too (``modulators.se_logweights``); kle; cd; bot; rd), the weights w_cd, w_bot
    = clip(1 - alpha_G u^2, 0, 1), w_rd = 1 + alpha_G RD, the Seed-GRPO/KLE weights w_se, w_kle,
    n_clusters, mean_reward, success_rate (when ``success`` is present). Rollouts are ordered by
    rollout_id inside each group, which fixes the greedy clustering's order.

    ``judge``: a judge object or a spec for ``make_judge`` ('embedding', 'lexical', 'math',
    'nli:<model>'); the default 'embedding' is the offline MiniLM-similarity judge (the paper
    uses roberta-large-mnli: pass judge='nli' where it is installed).
    """
    from .modulators import GroupRollouts, modulate

    from ..rewards import math_fallbacks

    measures = parse_measures(measures)
    check_alpha_base(alpha_base)
    fallbacks_before = math_fallbacks()
    df = validate_rollouts(rollouts)
    for m in measures:
        col = MEASURE_COLUMNS.get(m)
        if col and col not in df.columns:
            raise ValueError(f"measure {m!r} needs the rollouts column {col!r}, which is missing")
    text_col = "completion" if use_full_completion else "answer"
    df = df.sort_values(["query_id", "rollout_id"], kind="stable")
    order = pd.unique(rollouts["query_id"])  # keep the caller's query order
    grouped = {q: g for q, g in df.groupby("query_id", sort=False)}
    groups = [grouped[q] for q in order]
    texts = [g[text_col].tolist() for g in groups]
    rewards = [g["reward"].to_numpy(float) for g in groups]
    sizes = np.array([len(g) for g in groups])

    needs = set().union(*(MEASURES[m] for m in measures))
    meta = {"measures": measures, "alpha_base": alpha_base, "r_min": r_min, "r_max": r_max,
            "text": text_col, "threshold": threshold}
    span = float(df["reward"].max() - df["reward"].min())
    if "rd" in measures and span <= 0.5 * (r_max - r_min):
        # 0/1 rewards under the default [0, 2] range give RD = 0.5 where it should be 1
        meta["reward_range_warning"] = (
            f"the observed rewards span {span:g}, at most half of the declared range [{r_min:g}, {r_max:g}]: "
            f"RD is normalised by that range; set r_max (--r-max) to your rewards' range")
        warnings.warn(meta["reward_range_warning"], stacklevel=2)
    embeddings = clusters = None
    judge_embeds = isinstance(judge, str) and judge.strip().lower() == "embedding"
    if "emb" in needs or ("clu" in needs and judge_embeds):
        from .embed import make_embedder

        embedder = make_embedder(embedder)  # one model shared by the measures and the judge
    if "emb" in needs:
        embeddings = embedder.encode_groups(texts)
        meta["embedder"] = embedder.describe()
    if "clu" in needs:
        from .clustering import batched_greedy_clusters
        from .judges import make_judge

        judge = make_judge(judge, embedder=embedder) if judge_embeds else make_judge(judge)
        clusters, stats = batched_greedy_clusters(texts, judge, threshold=threshold, progress=progress)
        meta["judge"] = judge.describe()
        meta["clustering"] = stats

    out = pd.DataFrame({"query_id": order, "G": sizes})
    out["mean_reward"] = [r.mean() for r in rewards]
    if "success" in df.columns:
        out["success_rate"] = [g["success"].astype(float).mean() for g in groups]
    if clusters is not None:
        out["n_clusters"] = [len(np.unique(c)) for c in clusters]

    # vectorised measures: one call per distinct group size
    for G in np.unique(sizes):
        idx = np.flatnonzero(sizes == G)
        if "rd" in measures:
            rd = reward_dispersion_batch(np.stack([rewards[i] for i in idx]), r_min, r_max)
            out.loc[idx, "rd"] = rd
            out.loc[idx, "w_rd"] = rd_weight(rd, int(G), alpha_base)
        if "cd" in measures:
            cd = cosine_dispersion_batch(np.stack([embeddings[i] for i in idx]))
            out.loc[idx, "cd"] = cd
            out.loc[idx, "w_cd"] = geometry_weight(cd, int(G), alpha_base)
        if "bot" in measures:
            bot = barycentric_transport_batch(
                np.stack([embeddings[i] for i in idx]), np.stack([clusters[i] for i in idx])
            )
            out.loc[idx, "bot"] = bot
            out.loc[idx, "w_bot"] = geometry_weight(bot, int(G), alpha_base)

    if "token_entropy" in measures:
        out["token_entropy"] = [g["token_entropy"].mean() for g in groups]
    if "pe" in measures:
        from .entropy import predictive_entropy

        out["pe"] = [predictive_entropy(g["logprob"].to_numpy(float)) for g in groups]
    for name in ("se", "se_lw", "kle"):
        if name not in measures:
            continue
        modulator, weight_col = BASELINE_WEIGHTS[name]
        values, weights = [], []
        for i, g in enumerate(groups):
            likelihood = name == "se_lw"  # se: discrete (empirical cluster mass, BoT's Pi_k)
            group = GroupRollouts(
                rewards=rewards[i],
                embeddings=None if embeddings is None else embeddings[i],
                clusters=None if clusters is None else clusters[i],
                logprobs=g["logprob"].to_numpy(float) if likelihood else None,
                n_tokens=g["n_tokens"].to_numpy(float) if likelihood and "n_tokens" in g.columns else None,
            )
            _, info = modulate(modulator, group, alpha_base=alpha_base, r_min=r_min, r_max=r_max)
            values.append(info[modulator])
            weights.append(info["w_" + modulator])
        out[name] = values
        out[weight_col] = weights
    if "se" in measures:
        meta["se"] = "discrete: C_k = |k| / G (empirical cluster mass, the mass BoT uses)"
    if "se_lw" in measures:
        norm = "mean token log-probability (logprob / n_tokens)" if "n_tokens" in df.columns else "sequence log-probability"
        meta["se_lw"] = f"likelihood-weighted: C_k = sum_(i in k) p_i / sum_i p_i, p_i from the {norm}"
    if (sizes == 1).any():
        warnings.warn(
            f"{int((sizes == 1).sum())} group(s) have G = 1: no dispersion, measures 0 and weights 1",
            stacklevel=2,
        )
    meta["alpha_G"] = {int(G): (0.0 if G == 1 else alpha_base / math.log(G)) for G in np.unique(sizes)}
    # Answers over the math grader's guards were compared as strings: say how many.
    after = math_fallbacks()
    meta["math_fallbacks"] = {k: after[k] - fallbacks_before.get(k, 0) for k in after
                              if after[k] != fallbacks_before.get(k, 0)}
    if meta["math_fallbacks"]:
        warnings.warn(f"math judge: {meta['math_fallbacks']} comparison(s) fell back to string "
                      f"equality (answers over the grader's size/cost guards)", stacklevel=2)
    out.attrs["gcpo"] = meta
    return out
