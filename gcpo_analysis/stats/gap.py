"""The gap study: do uncertainty measures track GRPO's gradient variance? (paper Sec. 2, App. D).

Pure numpy cores, pandas adapters on top. Per measure u and target V (docs/conventions.md, "gap study"):

* Spearman rho(u, V) with its p-value (scipy.stats.spearmanr) and a percentile bootstrap CI;
* retrieval of H = top ``top_frac`` of queries by V: AUC = P(u(q+) > u(q-)) (ties count 1/2,
  sklearn.metrics.roc_auc_score) and precision@10% (App. D, "Identification");
* paired bootstrap over queries of Delta = rho(ref, V) - rho(u, V) (App. D, "Robustness");
* held-out k-fold regression V_hat = b0 + b1 u, MAE and Spearman on the held-out folds;
* our additions: the V = 0 decomposition (``decomposition``), the paired retrieval bootstrap and
  the gradient-size control (``size_control``: rho(u, V | mean||g||^2), rho(u, V / mean||g||^2),
  rho(u, mean||g||^2)); every table that lists several measures carries Holm-adjusted p-values
  (``*_holm``: ``size_control.holm``, the values of statsmodels' ``multipletests(method="holm")``,
  tested against it) beside the raw ones.

Bad-input policy (tested in tests/analysis/stats/test_stats.py):
* NaN/inf in a measure or the target: those rows are dropped for that measure only, with a
  ``warnings.warn`` giving the count; the counts are kept in ``GapStudyResult.dropped``.
* A measure name that is not a column of the frame is an error unless it is one of the known
  measures (``MEASURE_LABELS``), which are skipped with a warning when absent.
* Too few rows for the top-fraction split (need >= 1 positive and >= 1 negative) or for the
  k folds: ValueError naming N.
* A constant measure: rho and p are NaN (with a warning), AUC is 0.5 (every pair is a tie,
  the chance level), precision@10% equals the base rate (the tie rule below), never a crash.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats as sps

from ..measures.registry import default_measures
from .decomposition import paired_retrieval_bootstrap, v_zero_decomposition
from .gap_result import MEASURE_LABELS, GapStudyResult, _raw_columns
from .rank import _paired_frame, _percentile_ci, _point_rhos, bootstrap_rhos, retrieval, spearman
from .size_control import NORM_COLUMN, add_holm, size_control


# --------------------------------------------------------------------------- trimming
def trim_top(groups: pd.DataFrame, column: str = "grad_var", n: float = 20) -> pd.DataFrame:
    """Drop the ``n`` rows with the largest ``column`` (App. D: "remove the top 20 samples").

    ``n`` may be a count (int >= 0) or a fraction in (0, 1), meaning round(n * N) rows.
    Rows whose value is NaN are kept here (the study drops them later, with a warning).
    """
    if column not in groups.columns:
        raise ValueError(f"cannot trim on {column!r}: not a column of the frame ({list(groups.columns)})")
    N = len(groups)
    if 0 < n < 1:
        k = int(round(n * N))
    elif float(n).is_integer() and n >= 0:
        k = int(n)
    else:
        raise ValueError(f"trim n must be a count >= 0 or a fraction in (0, 1), got {n!r}")
    if N - k < 2:
        raise ValueError(f"trimming {k} of N={N} rows leaves {N - k}; at least 2 are needed")
    if k == 0:
        return groups.copy()
    values = pd.to_numeric(groups[column], errors="coerce").to_numpy(float)
    order = np.argsort(np.where(np.isnan(values), -np.inf, values), kind="stable")
    keep = np.sort(order[: N - k])
    return groups.iloc[keep].copy()


# --------------------------------------------------------------------------- held-out
def heldout_regression(u: ArrayLike, target: ArrayLike, k_folds: int = 5, seed: int = 0) -> dict:
    """k-fold held-out fit of V_hat = b0 + b1 u (App. D, "Held-out Gradient Prediction").

    sklearn KFold(shuffle=True, random_state=seed) + LinearRegression; per held-out fold the MAE
    mean|V_hat - V| and Spearman(V_hat, V). Returns the per-fold arrays and their mean/std (ddof 0).
    A fold where V_hat or V is constant has a NaN Spearman (warned).
    """
    from sklearn.linear_model import LinearRegression
    from sklearn.model_selection import KFold

    u = np.asarray(u, float)
    y = np.asarray(target, float)
    N = len(y)
    if N < 3 * k_folds:
        raise ValueError(f"N={N} rows are too few for {k_folds}-fold held-out regression (need >= {3 * k_folds})")
    mae_list: list[float] = []
    rho_list: list[float] = []
    for tr, te in KFold(n_splits=k_folds, shuffle=True, random_state=seed).split(u):
        model = LinearRegression().fit(u[tr, None], y[tr])
        pred = model.predict(u[te, None])
        mae_list.append(float(np.mean(np.abs(pred - y[te]))))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rho = np.nan if np.ptp(pred) == 0 or np.ptp(y[te]) == 0 else sps.spearmanr(pred, y[te]).statistic
        rho_list.append(float(rho))
    maes, rhos = np.array(mae_list), np.array(rho_list)
    if np.isnan(rhos).any():
        warnings.warn(
            f"{int(np.isnan(rhos).sum())} held-out fold(s) have a constant prediction or target: Spearman is NaN there",
            stacklevel=2,
        )
    return dict(
        mae=maes,
        spearman=rhos,
        mae_mean=maes.mean(),
        mae_std=maes.std(),
        spearman_mean=float(np.nanmean(rhos)) if np.isfinite(rhos).any() else np.nan,
        spearman_std=float(np.nanstd(rhos)) if np.isfinite(rhos).any() else np.nan,
    )


def _finite_column(groups: pd.DataFrame, col: str) -> np.ndarray:
    return pd.to_numeric(groups[col], errors="coerce").to_numpy(float)


def _check_study_input(groups: pd.DataFrame, target: str, n_boot: int) -> None:
    """Refuse what would make the statistics silently wrong: every query must be counted once
    (a repeated query_id would narrow the CIs), the target must have a finite value."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1 (bootstrap resamples), got {n_boot!r}")
    if len(groups) == 0:
        raise ValueError("the groups frame is empty: no query matched (check the query ids)")
    if "query_id" in groups.columns:
        ids = groups["query_id"]
        nulls = ids.isna().to_numpy()
        if nulls.any():
            raise ValueError(f"groups frame: query_id is null at row {int(np.flatnonzero(nulls)[0])}")
        dup = ids.duplicated(keep=False).to_numpy()
        if dup.any():
            rows = np.flatnonzero(dup)
            first = ids.iloc[rows[0]]
            first = first.item() if isinstance(first, np.generic) else first
            raise ValueError(
                f"groups frame: query_id {first!r} appears {int((ids == ids.iloc[rows[0]]).sum())} "
                f"times (rows {rows[:5].tolist()}); each query must be counted once"
            )
    if target in groups.columns and not np.isfinite(_finite_column(groups, target)).any():
        raise ValueError(f"target {target!r} has no finite value in the {len(groups)} rows")
    if target in groups.columns:  # a constant target has no ranks: every rho, AUC and CI would be NaN
        y = _finite_column(groups, target)
        values = np.unique(y[np.isfinite(y)])
        if len(values) < 2:
            raise ValueError(
                f"target {target!r} is constant ({values[0]:g}) over the {int(np.isfinite(y).sum())} queries "
                f"with a finite value: no correlation or retrieval statistic can be computed; check the "
                f"target's source (the groups frame's {target} column) or choose another target"
            )


def gap_study(
    groups: pd.DataFrame,
    measures: Sequence[str] | None = None,
    target: str = "grad_var",
    reference: str = "bot",
    trim: float = 0.02,
    n_boot: int = 10_000,
    top_frac: float = 0.1,
    k_folds: int = 5,
    seed: int = 0,
    success_column: str = "success_rate",
    level: float = 0.95,
    name: str = "data",
    norm_column: str = NORM_COLUMN,
) -> GapStudyResult:
    """Run the gap study of App. D on a groups frame (docs/conventions.md "gap study").

    1. drop the ``trim`` queries with the largest target (``trim_top``);
    2. per measure u: Spearman rho(u, V) with p and a bootstrap percentile CI; AUC and
       precision@top_frac for H = top ``top_frac`` by V; k-fold held-out V_hat = b0 + b1 u;
       Spearman with ``success_column`` when it exists (Table 3);
    3. paired bootstrap of Delta = rho(reference, V) - rho(u, V), percentile CIs;
    4. our additions: the V = 0 decomposition, the retrieval bootstrap and, when ``norm_column``
       is a column, the gradient-size control (``gcpo_analysis.stats.size_control``); Holm-adjusted
       p-values beside the raw ones in every table that lists several measures.
    All resamples come from ``np.random.default_rng(seed)``. See the module docstring for the
    bad-input policy.
    """
    _check_study_input(groups, target, n_boot)
    measures = list(default_measures() if measures is None else measures)
    known_missing = [m for m in measures if m not in groups.columns and m in MEASURE_LABELS]
    unknown = [m for m in measures if m not in groups.columns and m not in MEASURE_LABELS]
    if unknown:
        raise ValueError(f"unknown measure(s) {unknown}: not columns of the groups frame {list(groups.columns)}")
    if target not in groups.columns:
        raise ValueError(f"target {target!r} is not a column of the groups frame")
    if known_missing:
        warnings.warn(f"measure(s) {known_missing} are not in the groups frame; skipped", stacklevel=2)
    measures = [m for m in measures if m in groups.columns]
    if not measures:
        raise ValueError("no measure of the study is a column of the groups frame")
    for col in dict.fromkeys(c for c in (success_column, target) if c == "success_rate" and c in groups.columns):
        share = pd.to_numeric(groups[col], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero((share < 0) | (share > 1))  # a rate of 2.0 is refused, not ranked
        if len(bad):
            qid = groups["query_id"].iloc[bad[0]] if "query_id" in groups.columns else "?"
            raise ValueError(
                f"column {col!r} must hold shares in [0, 1], got {float(share[bad[0]])!r} at row {int(bad[0])} "
                f"(query_id={qid!r}); {len(bad)} such row(s)"
            )
    frame = trim_top(groups, target, trim)
    n_trimmed = len(groups) - len(frame)
    y_all = _finite_column(frame, target)
    ok_y = np.isfinite(y_all)
    dropped = {target: int((~ok_y).sum())}
    masks = {}
    for m in measures:
        ok = ok_y & np.isfinite(_finite_column(frame, m))
        masks[m] = ok
        dropped[m] = int((~ok).sum())
        if dropped[m]:
            warnings.warn(f"{dropped[m]} row(s) with a non-finite {m!r} or {target!r} dropped for {m!r}", stacklevel=2)
    rng = np.random.default_rng(seed)

    # Bootstrap draws: one call per distinct row set, so the no-NaN case is a single call
    # whose index matrix serves both the rho CIs and the paired Deltas.
    need: dict[bytes, tuple[np.ndarray, list[str]]] = {}

    def _add(mask, cols):
        key = mask.tobytes()
        entry = need.setdefault(key, (mask, []))
        entry[1].extend(c for c in cols if c not in entry[1])

    for m in measures:
        _add(masks[m], [m])
    if reference in measures:
        for m in measures:
            if m != reference:
                _add(masks[m] & masks[reference], [reference, m])
    elif len(measures) > 1:
        warnings.warn(f"reference {reference!r} is not among the measures; no paired bootstrap", stacklevel=2)
    boot: dict[bytes, dict[str, np.ndarray]] = {}
    for key, (mask, cols) in need.items():
        X = np.column_stack([_finite_column(frame, c)[mask] for c in cols])
        idx = rng.integers(0, int(mask.sum()), size=(n_boot, int(mask.sum())))
        rh = bootstrap_rhos(X, y_all[mask], idx)
        boot[key] = {c: rh[:, j] for j, c in enumerate(cols)}

    rows_s, rows_r, rows_h, rows_c, rows_b = [], [], [], [], []
    has_success = success_column in frame.columns
    if has_success and not np.isfinite(_finite_column(frame, success_column)).any():
        warnings.warn(
            f"column {success_column!r} has no finite value: the success-rate table (Table 3) is skipped", stacklevel=2
        )
        has_success = False
    for m in measures:
        mask = masks[m]
        u, y = _finite_column(frame, m)[mask], y_all[mask]
        N = len(y)
        if N < 3:
            raise ValueError(f"measure {m!r}: N={N} usable rows, too few for the study")
        constant = np.ptp(u) == 0
        if constant:
            warnings.warn(f"measure {m!r} is constant over the N={N} queries: rho is NaN, AUC 0.5", stacklevel=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rho, p = spearman(u, y)
        lo, hi = _percentile_ci(boot[mask.tobytes()][m], level)
        rows_s.append(dict(measure=m, rho=rho, p=p, ci_low=lo, ci_high=hi, n=N))
        try:
            auc, prec = retrieval(u, y, top_frac)
        except ValueError as err:  # a degenerate top split (the target tied at the cut): report the rest
            warnings.warn(
                f"measure {m!r}: AUC and precision skipped ({err}); rho and the other tables are reported", stacklevel=2
            )
            auc, prec = float("nan"), float("nan")
        rows_r.append(dict(measure=m, auc=auc, precision_at_10=prec, n=N))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h = heldout_regression(u, y, k_folds, seed)
        rows_h.append(
            dict(
                measure=m,
                mae_mean=h["mae_mean"],
                mae_std=h["mae_std"],
                spearman_mean=h["spearman_mean"],
                spearman_std=h["spearman_std"],
                n=N,
            )
        )
        if has_success:
            s = _finite_column(frame, success_column)
            ok = np.isfinite(s) & np.isfinite(_finite_column(frame, m))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rs, ps = spearman(_finite_column(frame, m)[ok], s[ok])
            rows_c.append(dict(measure=m, rho=rs, p=ps, n=int(ok.sum())))
        if reference in measures and m != reference:
            pair = boot[(mask & masks[reference]).tobytes()]
            both = mask & masks[reference]
            point = _point_rhos(np.column_stack([_finite_column(frame, c)[both] for c in (reference, m)]), y_all[both])
            rows_b.append(
                _paired_frame(np.column_stack([pair[reference], pair[m]]), [reference, m], reference, level, point)
            )
    bootstrap = pd.concat(rows_b, ignore_index=True) if rows_b else pd.DataFrame(columns=_raw_columns("bootstrap"))
    # Our additions on the rows where the target and every measure are finite (paired draws).
    common = ok_y & np.logical_and.reduce([masks[m] for m in measures])
    Xc = np.column_stack([_finite_column(frame, m)[common] for m in measures])
    decomposition = v_zero_decomposition(
        Xc, measures, y_all[common], reference if reference in measures else None, rng, n_boot=n_boot, level=level
    )
    retrieval_boot = None
    if reference in measures and len(measures) > 1:
        idx = rng.integers(0, int(common.sum()), size=(n_boot, int(common.sum())))
        try:
            retrieval_boot = paired_retrieval_bootstrap(Xc, measures, y_all[common], reference, idx, top_frac, level)
        except ValueError as err:  # the same degenerate split: no paired retrieval bootstrap
            warnings.warn(f"paired retrieval bootstrap skipped ({err})", stacklevel=2)
    size = None  # drawn after every other statistic, so the older tables keep their resamples
    if norm_column in frame.columns:
        size = size_control(
            Xc,
            measures,
            y_all[common],
            _finite_column(frame, norm_column)[common],
            reference if reference in measures else None,
            rng,
            n_boot=n_boot,
            level=level,
        )
    else:
        warnings.warn(f"no {norm_column!r} column: the gradient-size control is skipped", stacklevel=2)
    settings = dict(
        measures=measures,
        target=target,
        reference=reference,
        trim=trim,
        n_boot=n_boot,
        top_frac=top_frac,
        k_folds=k_folds,
        seed=seed,
        success_column=success_column,
        level=level,
        target_mean=float(np.nanmean(y_all)),
        norm_column=norm_column,
        multiple_comparisons="Holm (statsmodels multipletests) over the measures of each table",
        precision_tie_rule="expected precision under random tie-breaking",
        top_rule="target >= k-th largest, k = round(top_frac N)",
    )
    return GapStudyResult(
        spearman=add_holm(pd.DataFrame(rows_s, columns=_raw_columns("spearman"))),
        retrieval=pd.DataFrame(rows_r, columns=_raw_columns("retrieval")),
        bootstrap=add_holm(bootstrap, "p_le_0"),
        heldout=pd.DataFrame(rows_h, columns=_raw_columns("heldout")),
        success=add_holm(pd.DataFrame(rows_c, columns=_raw_columns("success"))) if has_success else None,
        settings=settings,
        n_queries=len(frame),
        n_trimmed=n_trimmed,
        dropped=dropped,
        name=name,
        decomposition=add_holm(decomposition, "rho_pos_p"),
        retrieval_bootstrap=add_holm(retrieval_boot, "p_le_0", by=["metric"]),
        size_control=size,
    )
