"""How much of the Lipschitz check's rho(d_g, d_e) is completion length, word overlap or gradient
size? (``tables/lipschitz_confounds.{md,csv}`` of a study with Grams.)

Per group, over its G(G-1)/2 pairs, with d_g = ||g_i - g_j||^2 from the Gram matrix and
d_e = 1 - cos(e_i, e_j) of the measures' embeddings (``stats.lipschitz``):

- the Spearman rho of d_g and of d_e with the length gap |n_i - n_j| (tokens) and with the
  word-set Jaccard distance 1 - |W_i & W_j| / |W_i | W_j| of the embedded texts (lower-cased,
  split on whitespace);
- the rank partial correlation of d_g and d_e given each of them, and given the summed squared
  norms ||g_i||^2 + ||g_j||^2 (ranks of d_g and d_e residualised on [1, rank z] by least
  squares, then Pearson).

A statistic is undefined (NaN, left out of its mean) in a group where one of its inputs is
constant; ``n_groups`` says how many groups each mean has. The summary is the mean over groups
with a percentile bootstrap over groups (groups are the independent units). The partial
correlation is written here (numpy lstsq), as ``stats.partial`` does for the study's frames:
it is three lines on arrays of pairs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from .lipschitz import LEVEL, N_BOOT, embedding_distances, gradient_distances

COLUMNS = (
    "rho_g_e",
    "rho_g_length",
    "rho_e_length",
    "rho_g_jaccard",
    "rho_e_jaccard",
    "partial_given_length",
    "partial_given_jaccard",
    "partial_given_norms",
)


def _rho(x: np.ndarray, y: np.ndarray) -> float:
    return np.nan if np.ptp(x) == 0 or np.ptp(y) == 0 else float(stats.spearmanr(x, y).statistic)


def rank_partial(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> float:
    """Rank partial correlation of x and y given z (NaN when any of them is constant)."""
    if np.ptp(x) == 0 or np.ptp(y) == 0 or np.ptp(z) == 0:
        return np.nan
    Z = np.column_stack([np.ones(len(z)), stats.rankdata(z)])
    res = [v - Z @ np.linalg.lstsq(Z, v, rcond=None)[0] for v in (stats.rankdata(x), stats.rankdata(y))]
    return float(np.corrcoef(*res)[0, 1])


def jaccard_distances(texts: list[str]) -> np.ndarray:
    """(G, G) word-set Jaccard distances; two texts without words are equal (distance 0; the
    ad hoc script this replaces gave them 1)."""
    words = [set(t.lower().split()) for t in texts]
    G = len(words)
    d = np.zeros((G, G))
    for a in range(G):
        for b in range(a + 1, G):
            union = words[a] | words[b]
            d[a, b] = d[b, a] = 1 - len(words[a] & words[b]) / len(union) if union else 0.0
    return d


def group_confounds(K: np.ndarray, E: np.ndarray, n_tokens: np.ndarray, texts: list[str]) -> dict[str, float]:
    """The eight per-group statistics of ``COLUMNS`` for one group."""
    i, j = np.triu_indices(len(K), 1)
    dg = gradient_distances(K)[i, j]
    de = embedding_distances(E)[i, j]
    n = np.asarray(n_tokens, float)
    dn = np.abs(n[i] - n[j])
    dj = jaccard_distances(texts)[i, j]
    norms = np.diag(np.asarray(K, float))
    sums = norms[i] + norms[j]
    return dict(
        rho_g_e=_rho(dg, de),
        rho_g_length=_rho(dg, dn),
        rho_e_length=_rho(de, dn),
        rho_g_jaccard=_rho(dg, dj),
        rho_e_jaccard=_rho(de, dj),
        partial_given_length=rank_partial(dg, de, dn),
        partial_given_jaccard=rank_partial(dg, de, dj),
        partial_given_norms=rank_partial(dg, de, sums),
    )


def summarise_confounds(per_group: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """statistic, mean, ci_low, ci_high, n_groups: the mean over the groups where a statistic is
    defined, with a percentile bootstrap over those groups (one generator, columns in order)."""
    rng = np.random.default_rng(seed)
    alpha = (1 - LEVEL) / 2
    out = []
    for c in COLUMNS:
        v = per_group[c].dropna().to_numpy()
        boot = [v[rng.integers(0, len(v), len(v))].mean() for _ in range(n_boot)] if len(v) else [np.nan]
        low, high = np.quantile(boot, [alpha, 1 - alpha]) if len(v) else (np.nan, np.nan)
        out.append(dict(statistic=c, mean=v.mean() if len(v) else np.nan, ci_low=low, ci_high=high, n_groups=len(v)))
    return pd.DataFrame(out)
