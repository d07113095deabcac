"""App. C's Lipschitz assumption as an inequality: ||g_i - g_j|| <= L ||e_i - e_j||.

``stats.lipschitz`` asks whether gradient distances rank like embedding distances (Spearman);
the inequality can hold at a low rho, and fail at a high one. Here, per pair i < j of a group,

    ratio_raw(i, j) = ||g_i - g_j|| / ||e_i - e_j||,     ||g_i - g_j||^2 = K_ii + K_jj - 2 K_ij,
    ratio(i, j)     = ratio_raw(i, j) / s_q,             s_q = sqrt(mean_i K_ii),

e the unit embeddings the measures use; s_q, the group's RMS gradient norm, makes ratios of
queries with gradients of different sizes comparable (an L that holds for one query's scale).
A group's own constant is L_q = max over its pairs of ratio (the smallest L it satisfies). We
report the quantiles of ratio over all pairs, the quantiles of L_q over groups, and the share of
pairs that break the inequality at L = median_q L_q (a single constant for the typical group).
Pairs with equal embeddings (||e_i - e_j|| = 0: the same answer) but different gradients break
it at every finite L; they are counted apart (``share_pairs_equal_e_unequal_g``) and left out of
the ratio quantiles. 95% percentile bootstrap CIs over groups (pairs of a group share rollouts).
``planted`` runs the same on the simulator's planted Lipschitz (g = L M (e - e_bar) + noise) and
non-Lipschitz gradients (``theory.simulate``), so the numbers have a reference.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd

from .lipschitz import gradient_distances

ZERO = 1e-6  # ||e_i - e_j|| below this is the same embedding (float16 storage rounds to ~1e-3 per entry)
QUANTILES = (0.1, 0.5, 0.9, 0.99)


def pair_ratios(K: np.ndarray, E: np.ndarray) -> pd.DataFrame:
    """One row per pair i < j: grad_dist ||g_i - g_j||, emb_dist ||e_i - e_j|| (rows of E
    normalised), ratio_raw, ratio (over s_q = sqrt(mean diag K)); NaN ratios where emb_dist = 0."""
    K = np.asarray(K, float)
    E = np.asarray(E, float)
    if len(K) != len(E):
        raise ValueError(f"{len(E)} embeddings for a {len(K)} x {len(K)} Gram matrix")
    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    i, j = np.triu_indices(len(K), 1)
    dg = np.sqrt(gradient_distances(K)[i, j])
    de = np.linalg.norm(U[i] - U[j], axis=1)
    scale = float(np.sqrt(np.mean(np.diag(K))))
    with np.errstate(invalid="ignore", divide="ignore"):
        raw = np.where(de > ZERO, dg / np.where(de > ZERO, de, 1), np.nan)
    ratio = raw / scale if scale > 0 else np.full_like(raw, np.nan)
    return pd.DataFrame(dict(i=i, j=j, grad_dist=dg, emb_dist=de, ratio_raw=raw, ratio=ratio))


def _summary(ratios: list[np.ndarray], Lq: np.ndarray, eq: np.ndarray, npairs: np.ndarray) -> dict[str, float]:
    """The statistics over groups: ``ratios`` each group's finite ratios, ``Lq`` its max (NaN if
    none), ``eq`` its count of equal-e unequal-g pairs, ``npairs`` its pair count."""
    fin = np.concatenate(ratios) if ratios else np.array([])
    L_ok = Lq[np.isfinite(Lq)]
    # one np.quantile call per array (the bootstrap calls this thousands of times)
    rq = np.quantile(fin, QUANTILES) if len(fin) else np.full(len(QUANTILES), np.nan)
    out = {f"ratio_q{int(q * 100):02d}": float(v) for q, v in zip(QUANTILES, rq)}
    lq = np.quantile(L_ok, (0.1, 0.5, 0.9)) if len(L_ok) else np.full(3, np.nan)
    out.update({f"L_group_q{int(q * 100):02d}": float(v) for q, v in zip((0.1, 0.5, 0.9), lq)})
    L = out["L_group_q50"]
    # a relative tolerance: a noise-free planted L gives ratios equal to L up to float rounding
    out["share_pairs_break_at_median_L"] = float(np.mean(fin > L * (1 + 1e-9))) if len(fin) else np.nan
    out["share_pairs_equal_e_unequal_g"] = float(eq.sum() / npairs.sum()) if npairs.sum() else np.nan
    return out


def bound_summary(
    grams: dict, embeddings: dict, n_boot: int = 1000, seed: int = 0, level: float = 0.95, column: str = "ratio"
) -> pd.DataFrame:
    """statistic, estimate, ci_low, ci_high, n_groups, n_pairs over the groups of ``grams``
    ({query_id: K}) and ``embeddings`` ({query_id: (G, d)}); ``column`` 'ratio' (normalised) or
    'ratio_raw'."""
    qids = [q for q in grams if len(grams[q]) >= 2]
    parts = [pair_ratios(grams[q], embeddings[q]) for q in qids]
    ratios = [p[column].to_numpy(float)[np.isfinite(p[column].to_numpy(float))] for p in parts]
    Lq = np.array([r.max() if len(r) else np.nan for r in ratios])
    eq = np.array([int(((p["emb_dist"] <= ZERO) & (p["grad_dist"] > 0)).sum()) for p in parts])
    npairs = np.array([len(p) for p in parts])
    point = _summary(ratios, Lq, eq, npairs)
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(n_boot):
        k = rng.integers(0, len(parts), len(parts))
        boot.append(_summary([ratios[i] for i in k], Lq[k], eq[k], npairs[k]))
    a = (1 - level) / 2
    rows = []
    for stat, est in point.items():
        b = np.array([x[stat] for x in boot], float)
        b = b[np.isfinite(b)]
        lo, hi = np.quantile(b, [a, 1 - a]) if len(b) else (np.nan, np.nan)
        rows.append(
            dict(
                statistic=stat,
                estimate=est,
                ci_low=float(lo),
                ci_high=float(hi),
                n_groups=len(parts),
                n_pairs=int(npairs.sum()),
            )
        )
    return pd.DataFrame(rows)


def planted(n_queries: int = 200, G: int = 8, seed: int = 0, n_boot: int = 200, **kw: Any) -> pd.DataFrame:
    """``bound_summary`` on the simulator's planted Lipschitz and non-Lipschitz gradients
    (``theory.simulate.simulate_study``, same seed), normalised and raw ratios, with ``source``
    and ``ratio`` columns. The planted gradients g = L M (e - e_bar) are Lipschitz with one
    global L on the raw ratio; their scale follows the group's embedding spread, so the
    normalised ratio varies between groups even there (read the two together)."""
    if kw:  # simulator options: computed each time
        return _planted_frame(n_queries, G, seed, n_boot, **kw)
    return _planted_cached(n_queries, G, seed, n_boot).copy()  # the same rows for every study of one seed


def _planted_frame(n_queries: int, G: int, seed: int, n_boot: int, **kw: Any) -> pd.DataFrame:
    from ..theory.simulate import simulate_study

    out = []
    for lip in (True, False):
        _, _, arr = simulate_study(n_queries=n_queries, G=G, lipschitz=lip, seed=seed, return_arrays=True, **kw)
        g, e = arr["gradients"], arr["embeddings"]
        grams = {q: g[q] @ g[q].T for q in range(len(g))}
        emb = {q: e[q] for q in range(len(e))}
        for column in ("ratio", "ratio_raw"):
            t = bound_summary(grams, emb, n_boot=n_boot, seed=seed, column=column)
            out.append(
                t.assign(source="simulated, planted Lipschitz" if lip else "simulated, not Lipschitz", ratio=column)
            )
    return pd.concat(out, ignore_index=True)


_planted_cached = functools.lru_cache(maxsize=8)(_planted_frame)
