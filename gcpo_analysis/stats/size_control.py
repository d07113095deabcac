"""Gradient size, controlled (our addition to the gap study, not the paper's), and Holm's
correction for the study's tables.

V(q) (``grad_var``) is the variance of the advantage-weighted per-rollout gradients, so it grows
with their size as well as with how much they disagree. The groups frame also holds
s(q) = mean_i ||g_i||^2 (``grad_norm2_mean``, the mean diagonal of the group's Gram matrix K of
the per-rollout gradients of the sequence log-probabilities, before the advantage weighting).
An uncertainty measure u that merely tracks s(q) correlates with V without saying anything
about the learning signal. For every measure u, on the pooled groups ("all") and within V > 0
("v_pos"), we report

* ``partial``: the rank partial correlation rho(u, V | s): rank u, V and s; regress the ranks
  of u and of V on (1, rank s); Pearson of the two residuals. With one control this equals
  (r_uV - r_us r_Vs) / sqrt((1 - r_us^2)(1 - r_Vs^2)), the r's Spearman correlations; its
  p-value is the t-test of the rank-u coefficient in OLS(rank V ~ 1 + rank s + rank u)
  (statsmodels; the same t as the partial correlation's, df = N - 3);
* ``ratio``: Spearman rho(u, V / s), the norm-free variance. A V = 0 group has ratio 0
  (its advantages are 0, whatever its gradients); within V = 0 the ratio is constant, so it
  is not reported there;
* ``norm``: Spearman rho(u, s), also within V = 0 ("v_zero"), where a correlation with s
  cannot be a correlation with any learning signal.

Each with a 95% percentile bootstrap CI over groups; one draw per subset is shared by every
measure, so ``delta`` = stat(reference) - stat(u) is a paired comparison with its own CI. The
bootstrap is vectorised with ``rank_stats.bootstrap_rhos`` (exact average ranks of every
resample) and the closed form of the partial correlation.

s(q) = 0 means every rollout's gradient is 0 (V is then 0 too) and V / s is undefined: such
rows, and rows with a non-finite s, are left out of these statistics with a warning and
counted in ``n_dropped_norm``; a negative s is impossible (a mean of squared norms) and is an
error naming the row.

Holm. ``holm`` gives the values of ``statsmodels.stats.multitest.multipletests(method="holm")``
(tested against it) without calling it: statsmodels' Holm branch runs ``gc.collect()`` on every
call, which costs up to a second in a process that holds torch, and a study calls it once per
table family. Every table that lists several measures gets Holm-adjusted p-values beside the
raw ones, the family being
the measures of one table (one (subset, statistic) here, one metric in the retrieval bootstrap).
NaN p-values (a constant measure) stay NaN and do not count as hypotheses.
"""

from __future__ import annotations

import warnings
from typing import overload

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from .rank import _percentile_ci, bootstrap_rhos

NORM_COLUMN = "grad_norm2_mean"
SIZE_COLUMNS = [
    "subset",
    "statistic",
    "measure",
    "rho",
    "p",
    "p_holm",
    "ci_low",
    "ci_high",
    "delta",
    "delta_ci_low",
    "delta_ci_high",
    "n",
    "n_dropped_norm",
]
STATISTICS = {"partial": "rho(u, V | mean|g|^2)", "ratio": "rho(u, V / mean|g|^2)", "norm": "rho(u, mean|g|^2)"}
SUBSETS = {"all": "all groups", "v_pos": "V > 0", "v_zero": "V = 0"}


# --------------------------------------------------------------------------- Holm
def holm(pvalues: ArrayLike) -> np.ndarray:
    """Holm step-down adjusted p-values of the finite entries: sorted ascending, the k-th smallest
    (k = 0..m-1) times m - k, the running maximum, capped at 1 (the values of statsmodels
    ``multipletests(method="holm")``; module docstring for why it is not called). NaN entries
    stay NaN and are not counted in the family."""
    p = np.asarray(pvalues, float)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if (p[ok] < 0).any() or (p[ok] > 1).any():
        raise ValueError(f"p-values must lie in [0, 1], got {p[ok][(p[ok] < 0) | (p[ok] > 1)][:3].tolist()}")
    if ok.any():
        q = p[ok]
        order = np.argsort(q, kind="stable")  # tied p-values get the same adjusted value in any order
        adjusted = np.empty(len(q))
        adjusted[order] = np.minimum(1.0, np.maximum.accumulate(q[order] * np.arange(len(q), 0, -1)))
        out[ok] = adjusted
    return out


@overload
def add_holm(table: pd.DataFrame, p: str = ..., by: list[str] | None = ..., name: str | None = ...) -> pd.DataFrame: ...
@overload
def add_holm(table: None, p: str = ..., by: list[str] | None = ..., name: str | None = ...) -> None: ...
def add_holm(
    table: pd.DataFrame | None, p: str = "p", by: list[str] | None = None, name: str | None = None
) -> pd.DataFrame | None:
    """Insert ``name`` (default ``p + "_holm"``) right after column ``p``: Holm within each
    ``by`` group (None: the whole table is one family)."""
    if table is None or p not in table.columns:
        return table
    name = name or f"{p}_holm"
    table = table.drop(columns=[name], errors="ignore")
    adj = pd.Series(np.nan, index=table.index)
    groups = [(None, table)] if not by else table.groupby(by, sort=False)
    for _, part in groups:
        adj.loc[part.index] = holm(part[p].to_numpy(float))
    table.insert(list(table.columns).index(p) + 1, name, adj.to_numpy())
    return table


# --------------------------------------------------------------------------- partial rho
def partial_from_rhos(r_uv, r_us, r_vs):
    """(r_uV - r_us r_Vs) / sqrt((1 - r_us^2)(1 - r_Vs^2)), elementwise; NaN where undefined."""
    r_uv, r_us, r_vs = (np.asarray(a, float) for a in (r_uv, r_us, r_vs))
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.sqrt((1 - r_us**2) * (1 - r_vs**2))
        out = (r_uv - r_us * r_vs) / den
    return np.where(den > 1e-12, out, np.nan)


def partial_spearman(u: ArrayLike, v: ArrayLike, s: ArrayLike) -> tuple[float, float]:
    """Rank partial correlation rho(u, v | s) and its two-sided p (module docstring)."""
    import statsmodels.api as sm
    from scipy.stats import rankdata

    ru, rv, rs = (rankdata(np.asarray(a, float)) for a in (u, v, s))
    n = len(ru)
    if n < 4:
        raise ValueError(f"a partial correlation with one control needs N >= 4 rows, got {n}")
    if np.ptp(ru) == 0 or np.ptp(rv) == 0 or np.ptp(rs) == 0:
        return float("nan"), float("nan")
    rho = float(partial_from_rhos(np.corrcoef(ru, rv)[0, 1], np.corrcoef(ru, rs)[0, 1], np.corrcoef(rv, rs)[0, 1]))
    if not np.isfinite(rho):
        return float("nan"), float("nan")
    fit = sm.OLS(rv, np.column_stack([np.ones(n), rs, ru])).fit()
    return rho, float(fit.pvalues[2])


def _spearman_p(u: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    from scipy.stats import spearmanr

    if np.ptp(u) == 0 or np.ptp(v) == 0:
        return float("nan"), float("nan")
    res = spearmanr(u, v)
    return float(res.statistic), float(res.pvalue)


# --------------------------------------------------------------------------- the table
def clean_norm(s: ArrayLike, y: ArrayLike) -> np.ndarray:
    """Mask of the rows usable for the size control (finite s > 0); warns with the count left
    out and refuses a negative s (row named)."""
    s = np.asarray(s, float)
    neg = np.flatnonzero(np.isfinite(s) & (s < 0))
    if len(neg):
        raise ValueError(
            f"{NORM_COLUMN} is negative at row {int(neg[0])} ({s[neg[0]]!r}): "
            "a mean of squared gradient norms cannot be"
        )
    ok = np.isfinite(s) & (s > 0)
    if (~ok).any():
        warnings.warn(
            f"{int((~ok).sum())} group(s) with {NORM_COLUMN} = 0 or non-finite: V / {NORM_COLUMN} "
            "is undefined there; left out of the gradient-size control",
            stacklevel=3,
        )
    return ok


def _subset_rows(
    X: np.ndarray,
    names: list[str],
    y: np.ndarray,
    s: np.ndarray,
    reference: str | None,
    idx: np.ndarray,
    subset: str,
    level: float,
    n_dropped: int,
) -> list[dict]:
    N, M = X.shape
    ratio = y / s
    stats = ("norm",) if subset == "v_zero" else ("partial", "ratio", "norm")
    boot, point = {}, {}
    with warnings.catch_warnings():  # a constant column gives NaN; the table says so
        warnings.simplefilter("ignore")
        point["norm"] = [_spearman_p(X[:, j], s) for j in range(M)]
        boot["norm"] = bootstrap_rhos(X, s, idx)
        if "partial" in stats:
            b_v = bootstrap_rhos(np.column_stack([X, s]), y, idx)  # rho(u, V) and rho(s, V)
            boot["partial"] = partial_from_rhos(b_v[:, :M], boot["norm"], b_v[:, M:])
            point["partial"] = [partial_spearman(X[:, j], y, s) for j in range(M)]
            boot["ratio"] = bootstrap_rhos(X, ratio, idx)
            point["ratio"] = [_spearman_p(X[:, j], ratio) for j in range(M)]
    r = names.index(reference) if reference in names else None
    rows = []
    for stat in stats:
        for j, name in enumerate(names):
            rho, p = point[stat][j]
            lo, hi = _percentile_ci(boot[stat][:, j], level)
            row = dict(
                subset=subset,
                statistic=stat,
                measure=name,
                rho=rho,
                p=p,
                ci_low=lo,
                ci_high=hi,
                n=N,
                n_dropped_norm=n_dropped,
            )
            if r is None or j == r:
                row.update(delta=np.nan, delta_ci_low=np.nan, delta_ci_high=np.nan)
            else:
                row["delta"] = point[stat][r][0] - rho
                row["delta_ci_low"], row["delta_ci_high"] = _percentile_ci(boot[stat][:, r] - boot[stat][:, j], level)
            rows.append(row)
    return rows


def size_control(
    X: np.ndarray,
    names: list[str],
    y: np.ndarray,
    s: np.ndarray,
    reference: str | None,
    rng: np.random.Generator,
    n_boot: int = 10_000,
    level: float = 0.95,
) -> pd.DataFrame:
    """The table of the module docstring (``SIZE_COLUMNS``, Holm within each (subset,
    statistic)) for measures X (N, M) named ``names``, V = y (N,) and s (N,); rows where a
    measure or V is non-finite must already be removed."""
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    ok = clean_norm(s, y)
    n_dropped = int((~ok).sum())
    X, y, s = X[ok], y[ok], np.asarray(s, float)[ok]
    rows = []
    for subset, mask in (("all", np.ones(len(y), bool)), ("v_pos", y > 0), ("v_zero", y == 0)):
        n = int(mask.sum())
        if n < 4:
            warnings.warn(
                f"gradient-size control: {n} group(s) in subset {SUBSETS[subset]!r}, too few; not reported",
                stacklevel=2,
            )
            continue
        idx = rng.integers(0, n, size=(n_boot, n))
        rows += _subset_rows(X[mask], names, y[mask], s[mask], reference, idx, subset, level, n_dropped)
    table = pd.DataFrame(rows, columns=[c for c in SIZE_COLUMNS if c != "p_holm"])
    return add_holm(table, "p", by=["subset", "statistic"])
