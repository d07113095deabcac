"""Rank correlations among many columns at once, and rank partial correlations given several
controls, with bootstrap resamples (the size controls of ``stats.vparts``: N, completion length, cap share).

The Spearman matrix R of columns Z (N, p) is the Pearson matrix of their average ranks. The rank
partial correlation of columns u and v given the columns S is the Pearson correlation of the
residuals of rank u and rank v after least squares on (1, rank S); from R it is

    rho(u, v | S) = (R_uv - R_uS R_SS^-1 R_Sv) / sqrt((1 - R_uS R_SS^-1 R_Su)(1 - R_vS R_SS^-1 R_Sv)),

and its two-sided p is the t-test with df = N - 2 - |S| (the same t as that of rank u's
coefficient in OLS(rank v ~ 1 + rank S + rank u); tested against statsmodels and against the
residuals of numpy's lstsq). ``spearman_matrices`` computes R on every bootstrap resample from
draw counts (the exact average ranks of ``rank._rank_from_counts``), all columns in one pass,
so a table of many measures and controls costs one ranking per column per resample.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

from .rank import _rank_from_counts, _rank_plan


def spearman_matrices(Z: ArrayLike, idx: np.ndarray | None = None, chunk: int = 64) -> np.ndarray:
    """(B, p, p) Spearman matrices of the columns of Z (N, p) on the resamples idx (B, N) of its
    rows; idx None is the sample itself (B = 1). A column constant in a resample has NaN in its
    row and column there."""
    Z = np.asarray(Z, float)
    if Z.ndim != 2:
        raise ValueError(f"Z must be (N, p), got shape {Z.shape}")
    N, p = Z.shape
    idx = np.arange(N)[None] if idx is None else np.asarray(idx)
    if idx.ndim != 2 or idx.shape[1] != N:
        raise ValueError(f"idx must have shape (B, N={N}), got {idx.shape}")
    plans = [_rank_plan(Z[:, j]) for j in range(p)]
    out = np.empty((len(idx), p, p))
    for s in range(0, len(idx), chunk):
        ib = idx[s : s + chunk]
        b = ib.shape[0]
        counts = np.bincount((ib * b + np.arange(b)[:, None]).ravel(), minlength=b * N).reshape(N, b)
        counts = counts.astype(np.int64)
        # twice the centred ranks (integers): sum_n c_n r_n r_n^T is exact in int64
        R = np.stack([_rank_from_counts(plan, counts, N) for plan in plans], axis=2)  # (N, b, p)
        S = _moments(counts[:, :, None] * R, R, N)
        d = np.sqrt(np.einsum("bpp->bp", S))
        with np.errstate(invalid="ignore", divide="ignore"):
            M = S / (d[:, :, None] * d[:, None, :])
        M[np.broadcast_to((d == 0)[:, :, None] | (d == 0)[:, None, :], M.shape)] = np.nan
        out[s : s + b] = M
    return out


def _moments(CR: np.ndarray, R: np.ndarray, N: int) -> np.ndarray:
    """(b, p, p) sum_n CR[n] R[n]^T of the integer arrays CR, R (N, b, p), as float.

    Every term and partial sum is an integer of at most N * N * (2N)^2 = 4 N^4 (counts <= N,
    |2 r - (N + 1)| < 2N): below 2^53 the float64 matmul (BLAS) adds them exactly, in any order,
    so it gives the exact int64 sum's bytes much faster than the integer einsum it replaces there.
    """
    if 4 * float(N) ** 4 < 2.0**53:
        return np.matmul(CR.transpose(1, 2, 0).astype(float), R.transpose(1, 0, 2).astype(float))
    return np.einsum("nbp,nbq->bpq", CR, R).astype(float)


def partial_from_matrix(R: np.ndarray, u: int, v: int, controls: Sequence[int]) -> np.ndarray:
    """rho(u, v | controls) from Spearman matrices R (B, p, p) (module docstring); NaN where a
    needed entry is NaN or the controls are collinear. No controls: R_uv."""
    R = np.asarray(R, float)
    c = list(controls)
    if not c:
        return R[:, u, v].copy()
    sub = R[:, [u, v] + c][:, :, [u, v] + c]
    bad = ~np.isfinite(sub).all(axis=(1, 2))
    sub = np.where(bad[:, None, None], np.eye(sub.shape[1]), sub)
    Rss, Rsx = sub[:, 2:, 2:], sub[:, 2:, :2]
    with np.errstate(invalid="ignore", divide="ignore"):
        fit = np.einsum("bkx,bky->bxy", Rsx, np.linalg.pinv(Rss, hermitian=True) @ Rsx)
        res = sub[:, :2, :2] - fit  # the residual covariance of (u, v)
        out = res[:, 0, 1] / np.sqrt(res[:, 0, 0] * res[:, 1, 1])
    collinear = (res[:, 0, 0] <= 1e-12) | (res[:, 1, 1] <= 1e-12)
    out[bad | collinear] = np.nan
    return out


def partial_p(rho: float, n: int, k: int) -> float:
    """Two-sided p of a partial correlation with k controls: t = rho sqrt(df / (1 - rho^2)),
    df = n - 2 - k."""
    df = n - 2 - k
    if not np.isfinite(rho) or df < 1:
        return float("nan")
    if abs(rho) >= 1:
        return 0.0
    t = rho * np.sqrt(df / (1 - rho * rho))
    return float(2 * sps.t.sf(abs(t), df))


def residual_partial(u: ArrayLike, v: ArrayLike, controls: ArrayLike) -> float:
    """Reference: Pearson of the residuals of rank u and rank v after numpy lstsq on
    (1, rank controls) -- the definition the fast path above is tested against."""
    ru, rv = sps.rankdata(u), sps.rankdata(v)
    C = np.asarray(controls, float)
    C = C[:, None] if C.ndim == 1 else C
    X = np.column_stack([np.ones(len(ru))] + [sps.rankdata(C[:, j]) for j in range(C.shape[1])])
    eu = ru - X @ np.linalg.lstsq(X, ru, rcond=None)[0]
    ev = rv - X @ np.linalg.lstsq(X, rv, rcond=None)[0]
    return float(np.corrcoef(eu, ev)[0, 1])
