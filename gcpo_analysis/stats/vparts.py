"""What V is made of (our addition, not the paper's): V = N + C, the size controls,
and the one confirmatory contrast, on a groups frame.

V(q) = N(q) + C(q) (``gradvar.variance_parts``, docs/conventions.md "V = N + C"): N = (1/G)(1 - 1/G)
sum_i A_i^2 ||g_i||^2 is what V would be with orthogonal per-rollout gradients, C = -(1/G^2)
sum_{i != j} A_i A_j g_i . g_j is the geometry. The paper's anisotropic argument (nearby answers
-> nearby gradients) can act on V only through C. Tables, each on the pooled groups ("all") and
within V > 0 ("v_pos"), with 95% percentile bootstrap CIs over groups (one draw per subset,
shared by every statistic and measure):

* ``v_parts``: the share C/V (median, 5% and 95% quantiles over the V > 0 groups), the median
  |C|/V, and Spearman rho of V with N, C, s = mean||g||^2, the mean completion length and the
  share of completions that hit the token cap;
* ``v_parts_measures``: per measure u, rho(u, V), rho(u, N), rho(u, C) and the partial
  rho(u, C | N), with p and Holm over the measures of one (subset, statistic);
* ``size_controls``: per measure, the rank partial rho(u, V | controls) for the control sets of
  ``CONTROL_SETS`` (s alone as before, N, length, cap share, and together), p from the t-test with
  df = n - 2 - |controls|, Holm over the measures of one (subset, controls);
* ``confirmatory``: the contrast fixed in advance (``CONFIRMATORY``): within V > 0, Delta rho =
  rho(BoT, t) - rho(u, t) for u in (SE, token entropy) and t in (V, C); the p of each is the
  two-sided bootstrap p = 2 min(P*(Delta <= 0), P*(Delta >= 0)), and Holm runs over these four
  only. Every other table is exploratory.

Partial correlations: ``stats.partial`` (Spearman matrices on each resample; tested against
lstsq residuals). A control column missing from the frame (an older study without the
per-rollout lengths) drops the control sets that use it, with a warning and a note in the table.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from .partial import partial_from_matrix, partial_p, spearman_matrices
from .rank import _percentile_ci
from .size_control import add_holm

V, N_COL, C_COL, S_COL = "grad_var", "grad_var_norm", "grad_var_cross", "grad_norm2_mean"
LEN_COL, CAP_COL = "n_tokens_mean", "cap_share"
CONTROL_SETS = {
    "s": (S_COL,),
    "N": (N_COL,),
    "length": (LEN_COL,),
    "cap": (CAP_COL,),
    "length+cap": (LEN_COL, CAP_COL),
    "N+length+cap": (N_COL, LEN_COL, CAP_COL),
    "s+length+cap": (S_COL, LEN_COL, CAP_COL),
}
CONFIRMATORY = (("bot", "se"), ("bot", "token_entropy"))
CONFIRMATORY_TARGETS = (V, C_COL)
SUBSETS = {"all": "all groups", "v_pos": "V > 0"}


def _ci(x: np.ndarray, level: float) -> tuple[float, float]:
    return _percentile_ci(np.asarray(x, float), level)


def nanquantile_rows(X: np.ndarray, q: float) -> np.ndarray:
    """``np.nanquantile(X, q, axis=1)``, the same numbers, without numpy's row-by-row
    ``apply_along_axis`` (10,000 resamples: seconds): the rows are sorted (NaN last) and those
    with the same count n of non-NaN values go through ``np.quantile`` on their first n columns
    together. A row with no value gives NaN."""
    X = np.asarray(X, float)
    out = np.full(len(X), np.nan)
    counts = (~np.isnan(X)).sum(axis=1)
    S = np.sort(X, axis=1)
    for n in np.unique(counts[counts > 0]):
        rows = counts == n
        out[rows] = np.quantile(S[rows, :n], q, axis=1)
    return out


def _row(est: float, boot: np.ndarray, level: float, **kw: object) -> dict:
    lo, hi = _ci(boot, level)
    return dict(kw, estimate=float(est), ci_low=lo, ci_high=hi)


class _Frame:
    """The columns of one subset as a matrix, with its Spearman matrices (sample and resamples)."""

    def __init__(self, frame: pd.DataFrame, columns: list[str], idx: np.ndarray):
        self.col = {c: j for j, c in enumerate(columns)}
        self.Z = frame[columns].to_numpy(float)
        self.n = len(frame)
        self.R0 = spearman_matrices(self.Z)
        self.RB = spearman_matrices(self.Z, idx)

    def partial(self, u: str, v: str, controls: tuple[str, ...] = ()) -> tuple[float, np.ndarray]:
        j = [self.col[c] for c in controls]
        return float(partial_from_matrix(self.R0, self.col[u], self.col[v], j)[0]), partial_from_matrix(
            self.RB, self.col[u], self.col[v], j
        )


def _share_rows(frame: pd.DataFrame, idx: np.ndarray, subset: str, level: float) -> list[dict]:
    """C/V quantiles over the V > 0 groups of ``frame`` (C/V is undefined at V = 0)."""
    # V from the parts (= the frame's V up to float error when K is the one V came from; a Gram
    # rebuilt later from the rollouts can differ a little, and the share must add up)
    c = frame[C_COL].to_numpy(float)
    v = frame[N_COL].to_numpy(float) + c
    pos = frame[V].to_numpy(float) > 0
    share = np.where(pos & (v > 0), c / np.where(v > 0, v, 1), np.nan)
    rows = []
    for name, q, fn in (
        ("share_C_over_V_median", 0.5, np.nanmedian),
        ("share_C_over_V_q05", 0.05, None),
        ("share_C_over_V_q95", 0.95, None),
        ("abs_C_over_V_median", 0.5, "abs"),
    ):
        x = np.abs(share) if fn == "abs" else share
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a resample without V > 0 rows
            est = np.nanquantile(x, q) if np.isfinite(x).any() else np.nan
            boot = nanquantile_rows(x[idx], q) if np.isfinite(x).any() else np.full(len(idx), np.nan)
        rows.append(_row(est, boot, level, subset=subset, statistic=name, n=int(np.isfinite(x).sum())))
    return rows


def v_parts_tables(
    groups: pd.DataFrame,
    measures: list[str],
    rng: np.random.Generator,
    n_boot: int = 10_000,
    level: float = 0.95,
) -> dict[str, pd.DataFrame]:
    """The tables of the module docstring for one groups frame (already trimmed or not)."""
    if V not in groups.columns:
        raise ValueError(f"the groups frame has no {V!r} column")
    has_parts = N_COL in groups.columns and C_COL in groups.columns
    if not has_parts:
        warnings.warn(
            "no grad_var_norm / grad_var_cross columns (the study kept no Gram matrices; "
            "scripts/recompute_grams.py rebuilds them): only the size controls without N are reported",
            stacklevel=2,
        )
    controls = [c for c in (S_COL, LEN_COL, CAP_COL) if c in groups.columns]
    sets = {k: cs for k, cs in CONTROL_SETS.items() if all(c in groups.columns for c in cs)}
    if len(sets) < len(CONTROL_SETS):
        warnings.warn(
            f"control set(s) {sorted(set(CONTROL_SETS) - set(sets))} skipped: column(s) missing from the groups frame",
            stacklevel=2,
        )
    cols = list(dict.fromkeys(measures + [V] + ([N_COL, C_COL] if has_parts else []) + controls))
    ok = np.isfinite(groups[cols].to_numpy(float)).all(axis=1)
    if (~ok).any():
        warnings.warn(f"{int((~ok).sum())} group(s) with a non-finite value left out of V = N + C", stacklevel=2)
    base = groups.loc[ok, cols].reset_index(drop=True)
    out: dict[str, list] = {"v_parts": [], "v_parts_measures": [], "size_controls": [], "confirmatory": []}
    for subset, mask in (("all", np.ones(len(base), bool)), ("v_pos", base[V].to_numpy(float) > 0)):
        frame = base[mask].reset_index(drop=True)
        if len(frame) < 5:
            warnings.warn(
                f"V = N + C: {len(frame)} group(s) in {SUBSETS[subset]!r}, too few; not reported", stacklevel=2
            )
            continue
        idx = rng.integers(0, len(frame), size=(n_boot, len(frame)))
        F = _Frame(frame, cols, idx)
        if has_parts and subset == "v_pos":  # C/V is defined on V > 0 only
            out["v_parts"] += _share_rows(frame, idx, subset, level)
        for other in ([N_COL, C_COL] if has_parts else []) + controls:
            est, boot = F.partial(V, other)
            out["v_parts"].append(_row(est, boot, level, subset=subset, statistic=f"rho(V, {other})", n=F.n))
        stats: dict[str, tuple[str, tuple[str, ...]]] = {"rho(u, V)": (V, ())}
        if has_parts:
            stats.update({"rho(u, N)": (N_COL, ()), "rho(u, C)": (C_COL, ()), "rho(u, C | N)": (C_COL, (N_COL,))})
        for stat, (target, ctrl) in stats.items():
            for m in measures:
                est, boot = F.partial(m, target, ctrl)
                out["v_parts_measures"].append(
                    _row(
                        est,
                        boot,
                        level,
                        subset=subset,
                        statistic=stat,
                        measure=m,
                        p=partial_p(est, F.n, len(ctrl)),
                        n=F.n,
                    )
                )
        for name, cs in sets.items():
            for m in measures:
                est, boot = F.partial(m, V, cs)
                out["size_controls"].append(
                    _row(
                        est, boot, level, subset=subset, controls=name, measure=m, p=partial_p(est, F.n, len(cs)), n=F.n
                    )
                )
        if subset == "v_pos":
            for target in [t for t in CONFIRMATORY_TARGETS if t in F.col]:
                for ref, u in CONFIRMATORY:
                    if ref not in F.col or u not in F.col:
                        continue
                    e_r, b_r = F.partial(ref, target)
                    e_u, b_u = F.partial(u, target)
                    d = b_r - b_u
                    d = d[np.isfinite(d)]
                    p = float(min(1.0, 2 * min(np.mean(d <= 0), np.mean(d >= 0)))) if len(d) else np.nan
                    out["confirmatory"].append(
                        _row(e_r - e_u, d, level, target=target, contrast=f"{ref} - {u}", p=p, n=F.n)
                    )
    tables = {}
    order = {
        "v_parts": ["subset", "statistic", "estimate", "ci_low", "ci_high", "n"],
        "v_parts_measures": ["subset", "statistic", "measure", "estimate", "p", "ci_low", "ci_high", "n"],
        "size_controls": ["subset", "controls", "measure", "estimate", "p", "ci_low", "ci_high", "n"],
        "confirmatory": ["target", "contrast", "estimate", "p", "ci_low", "ci_high", "n"],
    }
    for key, rows in out.items():
        tables[key] = pd.DataFrame(rows, columns=order[key])
    tables["v_parts_measures"] = add_holm(tables["v_parts_measures"], "p", by=["subset", "statistic"])
    tables["size_controls"] = add_holm(tables["size_controls"], "p", by=["subset", "controls"])
    tables["confirmatory"] = add_holm(tables["confirmatory"], "p")
    return tables


def trim_note(groups: pd.DataFrame, kept: pd.DataFrame, trim: float) -> pd.DataFrame:
    """The trim as a share of all groups and of the V > 0 groups (a zero-inflated V: the trim
    removes only V > 0 groups, so it bites harder there than its nominal share says)."""
    v_all, v_kept = groups[V].to_numpy(float), kept[V].to_numpy(float)
    n_pos, n_pos_kept = int((v_all > 0).sum()), int((v_kept > 0).sum())
    removed = len(groups) - len(kept)
    row = dict(
        trim=trim,
        n_groups=len(groups),
        n_removed=removed,
        share_of_all=removed / len(groups) if len(groups) else np.nan,
        n_v_pos=n_pos,
        n_v_pos_removed=n_pos - n_pos_kept,
        share_of_v_pos=(n_pos - n_pos_kept) / n_pos if n_pos else np.nan,
        removed_v_over_median_v_pos=(
            float(np.max(v_all) / np.median(v_all[v_all > 0])) if removed and n_pos else np.nan
        ),
    )
    return pd.DataFrame([row])


def v_structure(
    groups: pd.DataFrame, measures: list[str], trim: float, n_boot: int = 10_000, seed: int = 0, level: float = 0.95
) -> dict[str, pd.DataFrame]:
    """``v_parts_tables`` on the trimmed frame (``gap.trim_top``, the study's trim) and on the
    untrimmed one, stacked with a ``frame`` column first; plus ``trim`` (``trim_note``). Each
    frame draws from its own ``default_rng(seed)``, so the two are computed alike."""
    from .gap import trim_top

    kept = trim_top(groups, V, trim)
    parts: dict[str, list[pd.DataFrame]] = {}
    for label, frame in (("trimmed", kept), ("untrimmed", groups)):
        for key, table in v_parts_tables(frame, measures, np.random.default_rng(seed), n_boot, level).items():
            parts.setdefault(key, []).append(table.assign(frame=label)[["frame"] + list(table.columns)])
    out = {key: pd.concat(tables, ignore_index=True) for key, tables in parts.items()}
    out["trim"] = trim_note(groups, kept, trim)
    return out
