"""Rank statistics of the gap study (App. D): Spearman rho with p, the paired bootstrap of
rho differences vectorised over resamples (exact average ranks from draw counts), and the
retrieval metrics AUC and precision@top. Pure numpy/scipy on arrays; ``gcpo_analysis.stats``
builds the study's frames on top and ``gcpo_analysis.stats.decomposition`` reuses them.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats as sps


# --------------------------------------------------------------------------- Spearman
def spearman(u: ArrayLike, v: ArrayLike) -> tuple[float, float]:
    """Spearman rho = Pearson correlation of average ranks, with its two-sided p (App. D).

    Without ties this equals 1 - 6 sum d^2 / (N (N^2 - 1)). A constant input gives (nan, nan)
    and a warning (rho is undefined there).
    """
    u = np.asarray(u, float)
    v = np.asarray(v, float)
    if u.shape != v.shape or u.ndim != 1:
        raise ValueError(f"spearman needs two 1-d arrays of equal length, got {u.shape} and {v.shape}")
    if len(u) < 3:
        raise ValueError(f"spearman needs at least 3 rows, got N={len(u)}")
    if np.ptp(u) == 0 or np.ptp(v) == 0:
        warnings.warn("constant input: Spearman rho is undefined, reported as NaN", stacklevel=2)
        return float("nan"), float("nan")
    res = sps.spearmanr(u, v)
    return float(res.statistic), float(res.pvalue)


def _rank_plan(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort order of x and the flags marking the first value of each tie group."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    return order, np.r_[True, xs[1:] != xs[:-1]]


def _rank_from_counts(plan: tuple[np.ndarray, np.ndarray], counts: np.ndarray, N: int) -> np.ndarray:
    """Twice the centred average ranks, 2 r - (N + 1), of every item inside each resample.

    ``counts`` (N, b) holds how often each original item is drawn in each of b resamples. The
    c_j copies of item j sit at ranks L_j + 1 .. L_j + c_j, L_j the draws of strictly smaller
    values; copies and equal values are ties, so the average rank is L_g + (S_g + 1) / 2 for
    the tie group g of x_j (S_g its draws). This equals rankdata(x[idx], axis=1) without
    sorting B x N values (hand-written: no library ranks count-weighted samples). Twice the
    centred rank is an integer, so the moments below are exact integer sums. Layout (N, b)
    keeps the gathers and the cumsum contiguous.
    """
    order, new = plan
    sc = counts[order]
    csum = np.cumsum(sc, axis=0, dtype=counts.dtype)
    if new.all():  # no ties in x: L_j = csum_j - c_j, S_j = c_j
        r2 = 2 * csum - sc - N
    else:
        starts = np.flatnonzero(new)
        ends = np.r_[starts[1:], len(order)] - 1
        below = np.zeros((len(starts), counts.shape[1]), dtype=counts.dtype)
        below[1:] = csum[starts[1:] - 1]
        inside = csum[ends] - below
        r2 = (2 * below + inside - N)[np.cumsum(new) - 1]
    out = np.empty_like(r2)
    out[order] = r2
    return out


def bootstrap_rhos(X: ArrayLike, y: ArrayLike, idx: np.ndarray, chunk: int = 64) -> np.ndarray:
    """Spearman rho of every column of X with y on each resample: X (N, M), y (N,), idx (B, N).

    rho_b = Pearson(rank(x[idx_b]), rank(y[idx_b])) with average ranks, i.e. what
    ``bootstrap_rhos_loop`` computes with scipy per resample. Vectorised through draw counts
    (``_rank_from_counts``); the mean rank of N draws is (N + 1)/2 whatever the ties, so only
    the moments sum c rx ry, sum c rx^2, sum c ry^2 are needed, summed exactly in integers.
    A resample in which a column (or y) is constant gives NaN for that column.
    """
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    idx = np.asarray(idx)
    if X.ndim == 1:
        X = X[:, None]
    N = X.shape[0]
    if y.shape != (N,):
        raise ValueError(f"y must have shape ({N},), got {y.shape}")
    if idx.ndim != 2 or idx.shape[1] != N:
        raise ValueError(f"idx must have shape (B, N={N}), got {idx.shape}")
    B = idx.shape[0]
    out = np.empty((B, X.shape[1]))
    plans = [_rank_plan(X[:, j]) for j in range(X.shape[1])]
    plan_y = _rank_plan(y)
    for s in range(0, B, chunk):
        ib = idx[s : s + chunk]
        b = ib.shape[0]
        counts = np.bincount((ib * b + np.arange(b)[:, None]).ravel(), minlength=b * N).reshape(N, b)
        # c * (2r)^2 must fit: int32 is twice as fast, int64 when it could overflow
        dt = np.int32 if int(counts.max()) * N * N < 2**31 else np.int64
        counts = counts.astype(dt)
        ry = _rank_from_counts(plan_y, counts, N)
        cy = counts * ry
        syy = (cy * ry).sum(axis=0, dtype=np.int64).astype(float)
        for j, plan in enumerate(plans):
            rx = _rank_from_counts(plan, counts, N)
            cx = counts * rx
            sxy = (cx * ry).sum(axis=0, dtype=np.int64).astype(float)
            sxx = (cx * rx).sum(axis=0, dtype=np.int64).astype(float)
            with np.errstate(invalid="ignore", divide="ignore"):
                r = sxy / np.sqrt(sxx * syy)
            r[(sxx == 0) | (syy == 0)] = np.nan
            out[s : s + b, j] = r
    return out


def bootstrap_rhos_loop(X: ArrayLike, y: ArrayLike, idx: np.ndarray, progress: bool = False) -> np.ndarray:
    """Reference for ``bootstrap_rhos``: a plain loop of scipy.stats.spearmanr per resample."""
    from tqdm.auto import tqdm

    X = np.asarray(X, float)
    if X.ndim == 1:
        X = X[:, None]
    y = np.asarray(y, float)
    out = np.empty((len(idx), X.shape[1]))
    for b, ib in enumerate(tqdm(np.asarray(idx), desc="bootstrap (loop)", disable=not progress)):
        yb = y[ib]
        for j in range(X.shape[1]):
            xb = X[ib, j]
            out[b, j] = np.nan if np.ptp(xb) == 0 or np.ptp(yb) == 0 else sps.spearmanr(xb, yb).statistic
    return out


def _percentile_ci(samples: np.ndarray, level: float) -> tuple[float, float]:
    s = samples[np.isfinite(samples)]
    if len(s) == 0:
        return float("nan"), float("nan")
    a = (1 - level) / 2
    lo, hi = np.quantile(s, [a, 1 - a])
    return float(lo), float(hi)


def _paired_frame(rhos: np.ndarray, names: list[str], reference: str, level: float, point: np.ndarray) -> pd.DataFrame:
    """delta = the full-sample point estimate; CI and p_le_0 from the resampled differences."""
    if reference not in names:
        raise ValueError(f"reference measure {reference!r} is not among {names}")
    r = names.index(reference)
    rows = []
    for j, name in enumerate(names):
        if j == r:
            continue
        delta = rhos[:, r] - rhos[:, j]
        ok = np.isfinite(delta)
        lo, hi = _percentile_ci(delta, level)
        rows.append(
            dict(
                reference=reference,
                measure=name,
                delta=float(point[r] - point[j]),
                ci_low=lo,
                ci_high=hi,
                p_le_0=float(np.mean(delta[ok] <= 0)) if ok.any() else np.nan,
            )
        )
    return pd.DataFrame(rows, columns=["reference", "measure", "delta", "ci_low", "ci_high", "p_le_0"])


def _point_rhos(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return bootstrap_rhos(X, y, np.arange(len(y))[None])[0]


def _draw_idx(N: int, n_boot: int, seed: int | np.random.Generator | None) -> np.ndarray:
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return rng.integers(0, N, size=(n_boot, N))


def paired_bootstrap(
    measures: dict,
    target: ArrayLike,
    reference: str = "bot",
    n_boot: int = 10_000,
    seed: int | None = 0,
    level: float = 0.95,
    idx: np.ndarray | None = None,
) -> pd.DataFrame:
    """Paired bootstrap of Delta = rho(reference, V) - rho(u, V) over queries (App. D).

    Every resample draws N queries with replacement (one (B, N) index matrix, ``idx`` or drawn
    with ``np.random.default_rng(seed)``) and uses the same draw for every measure, so the
    differences are paired. Returns one row per u != reference: the mean Delta, the percentile
    CI at ``level`` and p_le_0 = fraction of resamples with Delta <= 0.
    """
    names = list(measures)
    X = np.column_stack([np.asarray(measures[n], float) for n in names])
    y = np.asarray(target, float)
    idx = _draw_idx(len(y), n_boot, seed) if idx is None else np.asarray(idx)
    return _paired_frame(bootstrap_rhos(X, y, idx), names, reference, level, _point_rhos(X, y))


def paired_bootstrap_loop(
    measures: dict,
    target: ArrayLike,
    reference: str = "bot",
    n_boot: int = 10_000,
    seed: int | None = 0,
    level: float = 0.95,
    idx: np.ndarray | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Plain-loop twin of ``paired_bootstrap`` (scipy.spearmanr per resample), for tests and bench."""
    names = list(measures)
    X = np.column_stack([np.asarray(measures[n], float) for n in names])
    y = np.asarray(target, float)
    idx = _draw_idx(len(y), n_boot, seed) if idx is None else np.asarray(idx)
    return _paired_frame(bootstrap_rhos_loop(X, y, idx, progress), names, reference, level, _point_rhos(X, y))


# --------------------------------------------------------------------------- retrieval
def top_labels(target: ArrayLike, top_frac: float = 0.1) -> np.ndarray:
    """H = top ``top_frac`` of queries by the target: k = round(top_frac N) and every value
    >= the k-th largest is positive (ties at the cut all join H, so |H| may exceed k).

    Raises ValueError naming N when H or its complement would be empty.
    """
    y = np.asarray(target, float)
    N = len(y)
    if not 0 < top_frac < 1:
        raise ValueError(f"top_frac must lie in (0, 1), got {top_frac}")
    k = int(round(top_frac * N))
    if k < 1:
        raise ValueError(f"N={N} rows are too few for a top-{top_frac:.0%} split (round({top_frac} N) = 0)")
    thr = np.sort(y)[::-1][k - 1]
    labels = y >= thr
    if labels.all():
        raise ValueError(f"N={N}: the top-{top_frac:.0%} split has no negatives (the target is tied at the cut)")
    return labels


def precision_at_top(u: ArrayLike, labels: ArrayLike, top_frac: float = 0.1) -> float:
    """Precision@top_frac = |H ∩ Top-k(u)| / k, k = round(top_frac N) (App. D).

    Tie rule: the queries tied with u at the cut share the remaining slots, each counting
    with the fraction of slots left; this is the expected precision under random tie-breaking
    (a constant u gives the base rate |H| / N).
    """
    u = np.asarray(u, float)
    labels = np.asarray(labels, bool)
    k = int(round(top_frac * len(u)))
    if k < 1:
        raise ValueError(f"N={len(u)} rows are too few for precision@{top_frac:.0%}")
    thr = np.sort(u)[::-1][k - 1]
    above = u > thr
    tied = u == thr
    slots = k - above.sum()
    hits = labels[above].sum() + slots * labels[tied].mean()
    return float(hits / k)


def retrieval(u: ArrayLike, target: ArrayLike, top_frac: float = 0.1) -> tuple[float, float]:
    """(AUC, precision@top_frac) of u for H = top ``top_frac`` by the target (App. D).

    AUC = P(u(q+) > u(q-)) + P(tie)/2 via sklearn.metrics.roc_auc_score.
    """
    from sklearn.metrics import roc_auc_score

    labels = top_labels(target, top_frac)
    return float(roc_auc_score(labels, np.asarray(u, float))), precision_at_top(u, labels, top_frac)
