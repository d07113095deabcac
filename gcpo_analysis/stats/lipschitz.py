"""The Lipschitz assumption, measured: do a group's gradients follow its answer embeddings?

The anisotropic gap (paper Section 2, Appendix C) rests on the semantic-gradient Lipschitz
assumption ||g_i - g_j|| <= L_g ||e_i - e_j||: rollouts whose answers sit close in the embedding
space have close score-function gradients g_i = grad_theta log pi(y_i | q). The study keeps each
group's Gram matrix K_ij = g_i . g_j (``collect.gram_frame``, before any advantage weighting), so
for every pair of rollouts of a group

    gradient distance   d_g(i, j) = ||g_i - g_j||^2 = K_ii + K_jj - 2 K_ij
    embedding distance  d_e(i, j) = 1 - cos(e_i, e_j)   (= ||e_i - e_j||^2 / 2 for unit e)

with e_i the embedding the measures use (``measures.prepare.prepare_groups``: the extracted
answer for QA, the full completion for math). What is reported (``summarise``):

- per group: Spearman rho(d_g, d_e) over its G(G-1)/2 pairs (scipy.stats.spearmanr). Pooled:
  the mean of the per-group rho, with a percentile bootstrap over groups (groups are the
  independent units; pairs of one group share rollouts).
- pooled over all pairs: Spearman after dividing each group's d_g by its group mean, and
  d_e by its group mean too. Gradient norms differ by an order of magnitude between queries,
  so raw d_g would rank groups by their gradient size, not pairs by their distance. Under the
  assumption with a query-dependent constant, d_g = L_q^2 d_e (up to noise), both normalised
  distances are equal, so this pooled rho is the within-group question with every pair weighted
  equally; the variant with only d_g normalised (``grad_norm_only``) is reported beside it.
  Its CI is a bootstrap over groups (the scipy p-value would treat dependent pairs as independent).
- same-cluster against different-cluster pairs (clusters of the measures' judge), on the
  normalised d_g: the ratio of the mean different-cluster distance to the mean same-cluster
  distance over groups that have both kinds of pair (Lipschitz: > 1), with a bootstrap CI over
  groups, and the AUC = P(d_g(different) > d_g(same)) from scipy's Mann-Whitney U, pooled over
  pairs, again with a bootstrap CI over groups.
- gradient size held out: d_g mixes the gradients' directions with their sizes (||g_i||^2 grows
  with a completion's length and surprise). The per-group Spearman of the gradients' cosine
  distance 1 - K_ij / sqrt(K_ii K_jj) against d_e (``mean_rho_direction``) asks whether the
  directions alone follow the embedding.

Groups where a statistic is undefined are excluded from it and counted by reason in the summary:
G < 3 (fewer than 3 pairs), constant embedding distances (e.g. all answers equal), constant
gradient distances, and for the cluster comparison one cluster (no different-cluster pair) or
all singletons (no same-cluster pair). Nothing is dropped silently.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats

N_BOOT = 2000
LEVEL = 0.95
_SNAP = 12  # decimals: identical embeddings give d_e = 0 exactly, not float noise that ranks ties


# --------------------------------------------------------------------------- arrays
def gradient_distances(K: ArrayLike) -> np.ndarray:
    """(G, G) ||g_i - g_j||^2 = K_ii + K_jj - 2 K_ij from a Gram matrix (float error below 0 is
    clipped to 0: a squared distance is never negative)."""
    K = np.asarray(K, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"Gram matrix must be square, got shape {K.shape}")
    if not np.isfinite(K).all():
        raise ValueError("Gram matrix has non-finite entries")
    d = np.diag(K)
    return np.clip(d[:, None] + d[None, :] - 2.0 * K, 0.0, None)


def embedding_distances(E: ArrayLike) -> np.ndarray:
    """(G, G) 1 - cos(e_i, e_j); rows are normalised here (float64), a zero row is an error."""
    E = np.asarray(E, dtype=np.float64)
    if E.ndim != 2:
        raise ValueError(f"embeddings must be (G, d), got shape {E.shape}")
    norms = np.linalg.norm(E, axis=1)
    if not np.all(norms > 0) or not np.isfinite(E).all():
        bad = int(np.flatnonzero(~(norms > 0) | ~np.isfinite(E).all(1))[0])
        raise ValueError(f"embedding row {bad} is zero or not finite")
    U = E / norms[:, None]
    return np.clip(np.round(1.0 - U @ U.T, _SNAP), 0.0, 2.0)


def group_pairs(K: ArrayLike, E: ArrayLike, clusters: ArrayLike | None = None) -> pd.DataFrame:
    """One row per pair i < j of a group: i, j, grad_dist, emb_dist, grad_norm (d_g over its
    group mean; NaN when that mean is 0), emb_norm, same_cluster (None without clusters)."""
    K = np.asarray(K, dtype=np.float64)
    E = np.asarray(E)
    if len(E) != len(K):
        raise ValueError(f"{len(E)} embeddings for a {len(K)} x {len(K)} Gram matrix")
    i, j = np.triu_indices(len(K), 1)
    dg, de = gradient_distances(K)[i, j], embedding_distances(E)[i, j]
    norms = np.sqrt(np.clip(np.diag(K), 0.0, None))
    with np.errstate(invalid="ignore", divide="ignore"):  # a zero gradient has no direction: NaN
        cos = np.where(norms[i] * norms[j] > 0, K[i, j] / (norms[i] * norms[j]), np.nan)
    out = pd.DataFrame({"i": i, "j": j, "grad_dist": dg, "emb_dist": de, "grad_cos_dist": 1.0 - cos})
    with np.errstate(invalid="ignore", divide="ignore"):
        out["grad_norm"] = dg / dg.mean() if len(dg) and dg.mean() > 0 else np.nan
        out["emb_norm"] = de / de.mean() if len(de) and de.mean() > 0 else np.nan
    if clusters is not None:
        c = np.asarray(clusters)
        if len(c) != len(K):
            raise ValueError(f"{len(c)} cluster labels for a group of {len(K)}")
        out["same_cluster"] = c[i] == c[j]
    return out


def group_stats(pairs: pd.DataFrame, G: int, n_clusters: int | None = None) -> dict:
    """Per-group row: rho, p and why rho is NaN (``reason``); the normalised same- and
    different-cluster means and why they are missing (``cluster_reason``)."""
    row = {"G": G, "n_pairs": len(pairs), "rho": np.nan, "p": np.nan, "reason": ""}
    dg, de = pairs["grad_dist"].to_numpy(), pairs["emb_dist"].to_numpy()
    row["grad_dist_mean"] = float(dg.mean()) if len(dg) else np.nan
    row["emb_dist_mean"] = float(de.mean()) if len(de) else np.nan
    if len(pairs) < 3:
        row["reason"] = f"G = {G}: fewer than 3 pairs"
    elif np.ptp(de) == 0:
        row["reason"] = "constant embedding distances (e.g. all answers equal)"
    elif np.ptp(dg) == 0:
        row["reason"] = "constant gradient distances"
    else:
        res = stats.spearmanr(dg, de)
        row["rho"], row["p"] = float(res.statistic), float(res.pvalue)
    row["rho_direction"], row["direction_reason"] = np.nan, row["reason"]
    dc = pairs["grad_cos_dist"].to_numpy() if "grad_cos_dist" in pairs.columns else np.full(len(pairs), np.nan)
    if not row["reason"]:
        if not np.isfinite(dc).all():
            row["direction_reason"] = "a zero gradient: no direction"
        elif np.ptp(dc) == 0:
            row["direction_reason"] = "constant gradient directions"
        else:
            row["rho_direction"] = float(stats.spearmanr(dc, de).statistic)
    row.update(n_clusters=n_clusters, n_same=0, n_diff=0, same_mean=np.nan, diff_mean=np.nan, cluster_reason="")
    if "same_cluster" not in pairs.columns:
        row["cluster_reason"] = "no clusters"
        return row
    same = pairs["same_cluster"].to_numpy(bool)
    row["n_same"], row["n_diff"] = int(same.sum()), int((~same).sum())
    if len(pairs) == 0:
        row["cluster_reason"] = f"G = {G}: no pair"
    elif not (~same).any():
        row["cluster_reason"] = "one cluster: no different-cluster pair"
    elif not same.any():
        row["cluster_reason"] = "all singletons: no same-cluster pair"
    elif pairs["grad_norm"].isna().any():
        row["cluster_reason"] = "all gradients equal: distances cannot be normalised"
    else:
        gn = pairs["grad_norm"].to_numpy()
        row["same_mean"], row["diff_mean"] = float(gn[same].mean()), float(gn[~same].mean())
    return row


# --------------------------------------------------------------------------- pooling
def _spearman(x: np.ndarray, y: np.ndarray, rank_x: np.ndarray | None = None) -> float:
    """Spearman rho: Pearson of the average ranks (what scipy.stats.spearmanr computes; rankdata
    and corrcoef directly, as the bootstrap calls it thousands of times). ``rank_x``: x's ranks
    when the caller has them already."""
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan
    return float(np.corrcoef(stats.rankdata(x) if rank_x is None else rank_x, stats.rankdata(y))[0, 1])


def _auc(diff: np.ndarray, same: np.ndarray, p_value: bool = False) -> float | tuple[float, float]:
    """AUC = P(d_g(different) > d_g(same)) + 0.5 P(tie) = U / (n_diff n_same) with Mann-Whitney's
    U = R_diff - n_diff (n_diff + 1) / 2 from the average ranks of both samples together; with
    ``p_value``, (AUC, p) from scipy.stats.mannwhitneyu (its p treats the pairs as independent)."""
    if len(diff) == 0 or len(same) == 0:
        return (np.nan, np.nan) if p_value else np.nan
    if p_value:
        res = stats.mannwhitneyu(diff, same, alternative="two-sided", method="asymptotic")
        return float(res.statistic / (len(diff) * len(same))), float(res.pvalue)
    r = stats.rankdata(np.concatenate([diff, same]))[: len(diff)]
    return float((r.sum() - len(diff) * (len(diff) + 1) / 2) / (len(diff) * len(same)))


def _ratio(diff_means: np.ndarray, same_means: np.ndarray) -> float:
    s = same_means.mean() if len(same_means) else np.nan
    return float(diff_means.mean() / s) if s > 0 else np.nan


def _ci(samples: ArrayLike, level: float = LEVEL) -> tuple[float, float]:
    s = np.asarray(samples, dtype=float)
    s = s[np.isfinite(s)]
    if len(s) == 0:
        return np.nan, np.nan
    a = (1 - level) / 2
    return float(np.quantile(s, a)), float(np.quantile(s, 1 - a))


def _stack(arrays: dict, qids: np.ndarray, idx: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The named pair columns of the groups ``qids[idx]`` (with repeats), concatenated."""
    chosen = qids if idx is None else qids[idx]
    return {
        k: np.concatenate([arrays[q][k] for q in chosen]) if len(chosen) else np.array([])
        for k in ("grad_norm", "emb_norm", "emb_dist", "same")
    }


def _pooled(
    arrays: dict,
    qids: np.ndarray,
    idx: np.ndarray | None = None,
    *,
    rhos: bool = True,
    auc: bool = True,
    p_value: bool = False,
) -> dict:
    """Pooled-over-pairs statistics of the chosen groups: both rhos and/or the AUC (and its p)."""
    a = _stack(arrays, qids, idx)
    out = {}
    if rhos:
        rank_g = stats.rankdata(a["grad_norm"]) if len(a["grad_norm"]) >= 3 else None  # ranked once for both
        out["pooled"] = _spearman(a["grad_norm"], a["emb_norm"], rank_g)
        out["pooled_g"] = _spearman(a["grad_norm"], a["emb_dist"], rank_g)
    if auc:
        same = a["same"].astype(bool)
        res = _auc(a["grad_norm"][~same], a["grad_norm"][same], p_value=p_value)
        out["auc"], out["auc_p"] = res if isinstance(res, tuple) else (res, np.nan)  # a tuple with p_value
    return out


def summarise(
    pairs: pd.DataFrame, per_group: pd.DataFrame, *, n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL
) -> pd.DataFrame:
    """The summary frame: one row per statistic with estimate, CI (percentile bootstrap over
    groups, ``n_boot`` resamples), p (only where a valid one exists), n_groups used and notes
    (the excluded groups, counted by reason). See the module docstring for the definitions."""
    rho_ok = per_group[per_group["rho"].notna()]
    cl_ok = per_group[per_group["same_mean"].notna() & per_group["diff_mean"].notna()]
    if "same_cluster" not in pairs.columns:
        pairs = pairs.assign(same_cluster=False)
    arrays = {
        q: {
            "grad_norm": p["grad_norm"].to_numpy(float),
            "emb_norm": p["emb_norm"].to_numpy(float),
            "emb_dist": p["emb_dist"].to_numpy(float),
            "same": p["same_cluster"].to_numpy(bool),
        }
        for q, p in pairs.groupby("query_id", sort=False)
    }
    q_rho, q_cl = rho_ok["query_id"].to_numpy(), cl_ok["query_id"].to_numpy()
    rho_values = rho_ok["rho"].to_numpy(float)
    dir_values = per_group["rho_direction"].dropna().to_numpy(float)
    diff_m, same_m = cl_ok["diff_mean"].to_numpy(float), cl_ok["same_mean"].to_numpy(float)
    rng = np.random.default_rng(seed)
    boot = {k: np.full(n_boot, np.nan) for k in ("mean_rho", "pooled", "pooled_g", "ratio", "auc", "direction")}
    for b in range(n_boot):
        if len(dir_values):
            boot["direction"][b] = dir_values[rng.integers(0, len(dir_values), len(dir_values))].mean()
        if len(q_rho):
            idx = rng.integers(0, len(q_rho), len(q_rho))
            boot["mean_rho"][b] = rho_values[idx].mean()
            pooled = _pooled(arrays, q_rho, idx, auc=False)
            boot["pooled"][b], boot["pooled_g"][b] = pooled["pooled"], pooled["pooled_g"]
        if len(q_cl):
            idx = rng.integers(0, len(q_cl), len(q_cl))
            boot["ratio"][b] = _ratio(diff_m[idx], same_m[idx])
            boot["auc"][b] = _pooled(arrays, q_cl, idx, rhos=False)["auc"]
    pooled = _pooled(arrays, q_rho, auc=False)
    clustered = _pooled(arrays, q_cl, rhos=False, p_value=True)
    rho_excl = _reasons(per_group, "reason")
    cl_excl = _reasons(per_group, "cluster_reason")
    nan = np.nan
    rows = [
        (
            "mean_rho",
            "mean of per-group Spearman rho(d_g, d_e)",
            rho_values.mean() if len(q_rho) else nan,
            boot["mean_rho"],
            nan,
            len(rho_ok),
            rho_excl,
        ),
        (
            "median_rho",
            "median of per-group rho (no CI)",
            np.median(rho_values) if len(q_rho) else nan,
            None,
            nan,
            len(rho_ok),
            rho_excl,
        ),
        (
            "frac_rho_positive",
            "share of groups with rho > 0 (no CI)",
            (rho_values > 0).mean() if len(q_rho) else nan,
            None,
            nan,
            len(rho_ok),
            rho_excl,
        ),
        (
            "pooled_rho",
            "Spearman over all pairs, d_g and d_e each / group mean",
            pooled["pooled"],
            boot["pooled"],
            nan,
            len(rho_ok),
            rho_excl,
        ),
        (
            "pooled_rho_grad_norm_only",
            "Spearman over all pairs, d_g / group mean, raw d_e",
            pooled["pooled_g"],
            boot["pooled_g"],
            nan,
            len(rho_ok),
            rho_excl,
        ),
        (
            "mean_rho_direction",
            "mean of per-group Spearman rho(1 - cos(g_i, g_j), d_e): gradient size held out",
            dir_values.mean() if len(dir_values) else nan,
            boot["direction"],
            nan,
            len(dir_values),
            _reasons(per_group, "direction_reason"),
        ),
        (
            "cluster_ratio",
            "mean different-cluster d_g / mean same-cluster d_g (d_g / group mean)",
            _ratio(diff_m, same_m),
            boot["ratio"],
            nan,
            len(cl_ok),
            cl_excl,
        ),
        (
            "cluster_auc",
            "AUC P(d_g different > d_g same), Mann-Whitney U (p treats pairs as independent)",
            clustered.get("auc", nan),
            boot["auc"],
            clustered.get("auc_p", nan),
            len(cl_ok),
            cl_excl,
        ),
    ]
    out = []
    for stat, desc, est, samples, p, n, excl in rows:
        lo, hi = _ci(samples, level) if samples is not None and n_boot else (nan, nan)
        out.append(
            dict(
                statistic=stat,
                estimate=float(est),
                ci_low=lo,
                ci_high=hi,
                p=p,
                n_groups=n,
                n_excluded=len(per_group) - n,
                excluded=excl,
                description=desc,
            )
        )
    frame = pd.DataFrame(out)
    frame.attrs["lipschitz"] = {
        "n_boot": n_boot,
        "seed": seed,
        "level": level,
        "n_groups": int(len(per_group)),
        "n_pairs": int(len(pairs)),
    }
    return frame


def _reasons(per_group: pd.DataFrame, column: str) -> str:
    counts = per_group.loc[per_group[column] != "", column].value_counts()
    return "; ".join(f"{n} x {r}" for r, n in counts.items())


# --------------------------------------------------------------------------- frames
def lipschitz_pairs(grams: dict, embeddings: dict, clusters: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(pairs, per_group) from {query_id: K}, {query_id: (G, d) embeddings} and optionally
    {query_id: (G,) labels}, rows in rollout-id order. Every query must have all three."""
    pair_parts, rows = [], []
    for qid, K in grams.items():
        if qid not in embeddings:
            raise ValueError(f"query {qid!r} has a Gram matrix but no embeddings")
        labels = None if clusters is None else clusters[qid]
        p = group_pairs(K, embeddings[qid], labels)
        p.insert(0, "query_id", qid)
        pair_parts.append(p)
        n_cl = None if labels is None else int(len(np.unique(labels)))
        rows.append({"query_id": qid, **group_stats(p, len(K), n_cl), "grad_norm2_mean": float(np.mean(np.diag(K)))})
    if not rows:
        raise ValueError("no groups")
    return pd.concat(pair_parts, ignore_index=True), pd.DataFrame(rows)
