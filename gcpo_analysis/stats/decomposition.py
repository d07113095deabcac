"""Two additions of ours to the gap study (not in the paper): the V = 0 decomposition, and
paired bootstraps of the retrieval metrics (AUC and P@10%).

The V = 0 decomposition. The paper's statistics (App. D) mix two questions. A group whose
rewards are all equal has GRPO advantages 0 and so V(q) = 0 exactly, whatever its answers
look like; Reward Dispersion is 0 there by construction. For each measure u we report apart:

(a) ``auc_pos``: AUC of u for 1[V > 0] over all groups — can u tell which groups carry any
    gradient at all?
(b) ``rho_pos``: Spearman rho(u, V) within the V > 0 groups — can u rank V among the groups
    that have one?
(c) ``delta_rho_pos``: the paired bootstrap Delta = rho(reference, V) - rho(u, V) within V > 0.

Each with a percentile bootstrap CI (rows resampled with replacement; (a) over all groups, (b)
and (c) over the V > 0 groups, one shared draw for every measure so (c) is paired).

The retrieval bootstrap. The paper's retrieval paragraph claims BoT beats CD on AUC for the
top-10% V queries; ``stats.gap_study`` bootstraps only rho. ``paired_retrieval_bootstrap``
redraws the queries, recomputes H = top ``top_frac`` by V in each resample (``stats.top_labels``'s
rule) and both metrics for every measure, and reports Delta = metric(reference) - metric(u).

AUC is computed from average ranks, AUC = (R+ - n+(n+ + 1)/2) / (n+ n-) (the Mann-Whitney form
that ``sklearn.metrics.roc_auc_score`` also equals, ties counting 1/2), vectorised over
resamples with ``scipy.stats.rankdata``; a resample with one class only gives NaN and is left
out of the percentiles (counted in ``n_boot_used``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from .rank import _percentile_ci as _ci
from .rank import bootstrap_rhos, precision_at_top, retrieval, spearman, top_labels

DECOMPOSITION_COLUMNS = [
    "measure",
    "n_pos",
    "n_zero",
    "auc_pos",
    "auc_pos_ci_low",
    "auc_pos_ci_high",
    "rho_pos",
    "rho_pos_p",
    "rho_pos_ci_low",
    "rho_pos_ci_high",
    "delta_rho_pos",
    "delta_rho_pos_ci_low",
    "delta_rho_pos_ci_high",
]
RETRIEVAL_BOOT_COLUMNS = ["metric", "reference", "measure", "delta", "ci_low", "ci_high", "p_le_0", "n_boot_used"]


def auc_batch(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """AUC of each row: scores (B, N), labels (B, N) bool -> (B,), NaN where a row has one class."""
    scores = np.atleast_2d(np.asarray(scores, float))
    labels = np.atleast_2d(np.asarray(labels, bool))
    ranks = sps.rankdata(scores, axis=1)  # average ranks: a tie counts 1/2
    n_pos = labels.sum(axis=1)
    n_neg = labels.shape[1] - n_pos
    r_pos = np.where(labels, ranks, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (r_pos - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return np.where((n_pos > 0) & (n_neg > 0), auc, np.nan)


def top_labels_batch(target: np.ndarray, top_frac: float) -> np.ndarray:
    """``stats.top_labels`` per row: (B, N) -> (B, N) bool (>= the k-th largest, k = round(f N))."""
    y = np.atleast_2d(np.asarray(target, float))
    k = int(round(top_frac * y.shape[1]))
    if k < 1:
        raise ValueError(f"N={y.shape[1]} rows are too few for a top-{top_frac:.0%} split")
    thr = -np.sort(-y, axis=1)[:, k - 1]
    return y >= thr[:, None]


def precision_at_top_batch(scores: np.ndarray, labels: np.ndarray, top_frac: float) -> np.ndarray:
    """``stats.precision_at_top`` per row (expected precision under random tie-breaking)."""
    u = np.atleast_2d(np.asarray(scores, float))
    labels = np.atleast_2d(np.asarray(labels, bool))
    k = int(round(top_frac * u.shape[1]))
    thr = -np.sort(-u, axis=1)[:, k - 1][:, None]
    above, tied = u > thr, u == thr
    slots = k - above.sum(axis=1)
    tied_rate = (labels & tied).sum(axis=1) / tied.sum(axis=1)
    return ((labels & above).sum(axis=1) + slots * tied_rate) / k


def v_zero_decomposition(
    X: np.ndarray,
    names: list[str],
    y: np.ndarray,
    reference: str | None,
    rng: np.random.Generator,
    n_boot: int = 10_000,
    level: float = 0.95,
) -> pd.DataFrame:
    """The (a) / (b) / (c) table of the module docstring for measures X (N, M) named ``names``
    and target y (N,), rows with NaN already removed. One row per measure
    (``DECOMPOSITION_COLUMNS``)."""
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    pos = y > 0
    n_pos, n_zero = int(pos.sum()), int((~pos).sum())
    if n_zero == 0:
        warnings.warn("no group has V = 0: the AUC for 1[V > 0] is undefined (NaN)", stacklevel=2)
    N, M = X.shape
    idx_all = rng.integers(0, N, size=(n_boot, N))
    auc_point = auc_batch(X.T, np.broadcast_to(pos, (M, N)))
    auc_boot = np.stack([auc_batch(X[idx_all, j], pos[idx_all]) for j in range(M)], axis=1)  # (B, M)
    Xp, yp = X[pos], y[pos]
    if n_pos >= 3:
        idx_pos = rng.integers(0, n_pos, size=(n_boot, n_pos))
        rho_boot = bootstrap_rhos(Xp, yp, idx_pos)  # (B, M), one shared draw: paired
    else:
        warnings.warn(f"only {n_pos} group(s) with V > 0: rho within V > 0 is undefined (NaN)", stacklevel=2)
        rho_boot = np.full((n_boot, M), np.nan)
    r = names.index(reference) if reference in names else None
    with warnings.catch_warnings():  # a constant measure has rho NaN; the bootstrap CIs say so
        warnings.simplefilter("ignore")
        point = [spearman(Xp[:, j], yp) if n_pos >= 3 else (np.nan, np.nan) for j in range(M)]
    rows = []
    for j, name in enumerate(names):
        rho, p = point[j]
        row = dict(
            measure=name,
            n_pos=n_pos,
            n_zero=n_zero,
            auc_pos=float(auc_point[j]),
            rho_pos=float(rho),
            rho_pos_p=float(p),
        )
        row["auc_pos_ci_low"], row["auc_pos_ci_high"] = _ci(auc_boot[:, j], level)
        row["rho_pos_ci_low"], row["rho_pos_ci_high"] = _ci(rho_boot[:, j], level)
        if r is None or j == r:
            row.update(delta_rho_pos=np.nan, delta_rho_pos_ci_low=np.nan, delta_rho_pos_ci_high=np.nan)
        else:
            row["delta_rho_pos"] = float(point[r][0] - rho)
            row["delta_rho_pos_ci_low"], row["delta_rho_pos_ci_high"] = _ci(rho_boot[:, r] - rho_boot[:, j], level)
        rows.append(row)
    return pd.DataFrame(rows, columns=DECOMPOSITION_COLUMNS)


def paired_retrieval_bootstrap(
    X: np.ndarray,
    names: list[str],
    y: np.ndarray,
    reference: str,
    idx: np.ndarray,
    top_frac: float = 0.1,
    level: float = 0.95,
) -> pd.DataFrame:
    """Paired bootstrap of Delta = metric(reference) - metric(u) for metric in {auc,
    precision_at_10}: X (N, M), y (N,), idx (B, N) row draws shared by every measure. ``delta``
    is the full-sample difference; CI and p_le_0 (fraction of resamples with Delta <= 0) come
    from the resamples in which H and its complement are both non-empty."""
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    r = names.index(reference)
    labels_b = top_labels_batch(y[idx], top_frac)
    usable = ~labels_b.all(axis=1)
    point: dict[str, list] = {"auc": [], "precision_at_10": []}
    boot: dict[str, list] = {"auc": [], "precision_at_10": []}
    labels = top_labels(y, top_frac)
    for j in range(X.shape[1]):
        auc, prec = retrieval(X[:, j], y, top_frac)
        point["auc"].append(auc)
        point["precision_at_10"].append(precision_at_top(X[:, j], labels, top_frac))
        U = X[idx, j]
        boot["auc"].append(np.where(usable, auc_batch(U, labels_b), np.nan))
        boot["precision_at_10"].append(np.where(usable, precision_at_top_batch(U, labels_b, top_frac), np.nan))
    rows = []
    for metric in ("auc", "precision_at_10"):
        for j, name in enumerate(names):
            if j == r:
                continue
            delta = boot[metric][r] - boot[metric][j]
            ok = np.isfinite(delta)
            lo, hi = _ci(delta, level)
            rows.append(
                dict(
                    metric=metric,
                    reference=reference,
                    measure=name,
                    delta=float(point[metric][r] - point[metric][j]),
                    ci_low=lo,
                    ci_high=hi,
                    p_le_0=float(np.mean(delta[ok] <= 0)) if ok.any() else np.nan,
                    n_boot_used=int(ok.sum()),
                )
            )
    return pd.DataFrame(rows, columns=RETRIEVAL_BOOT_COLUMNS)
