"""stats.vparts: the tables of what V is made of against direct computations (quantiles, lstsq residuals,
Holm, the trim counts)."""

import warnings

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.stats.partial import residual_partial
from gcpo_analysis.stats.size_control import holm
from gcpo_analysis.stats.vparts import CONTROL_SETS, trim_note, v_parts_tables, v_structure


def _groups(n=80, seed=0):
    """Zero-inflated V = N + C; u_norm tracks N, u_geom tracks C; lengths drive N."""
    rng = np.random.default_rng(seed)
    length = rng.integers(5, 30, size=n).astype(float)
    pos = rng.random(n) < 0.6
    N = np.where(pos, length * rng.lognormal(0, 0.3, n), 0.0)
    C = np.where(pos, rng.normal(0, 0.05, n) * N, 0.0)
    return pd.DataFrame(
        dict(
            query_id=[f"q{i}" for i in range(n)],
            grad_var=N + C,
            grad_var_norm=N,
            grad_var_cross=C,
            grad_norm2_mean=length * rng.lognormal(0, 0.5, n),
            n_tokens_mean=length,
            cap_share=(length > 25).astype(float),
            bot=N + rng.normal(0, 3, n),
            se=C + rng.normal(0, 0.2, n),
            token_entropy=rng.normal(size=n),
        )
    )


def _tables(g, n_boot=200):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return v_parts_tables(g, ["bot", "se", "token_entropy"], np.random.default_rng(0), n_boot)


def test_share_quantiles_and_rhos_are_the_direct_ones():
    g = _groups()
    t = _tables(g)
    vp = t["v_parts"].set_index(["subset", "statistic"])["estimate"]
    pos = g[g.grad_var > 0]
    share = pos.grad_var_cross / (pos.grad_var_norm + pos.grad_var_cross)
    assert vp[("v_pos", "share_C_over_V_median")] == pytest.approx(np.median(share))
    assert vp[("v_pos", "share_C_over_V_q05")] == pytest.approx(np.quantile(share, 0.05))
    assert vp[("v_pos", "abs_C_over_V_median")] == pytest.approx(np.median(np.abs(share)))
    from scipy.stats import spearmanr

    assert vp[("all", "rho(V, grad_var_norm)")] == pytest.approx(spearmanr(g.grad_var, g.grad_var_norm).statistic)
    assert ("all", "share_C_over_V_median") not in vp.index  # C/V is undefined at V = 0


def test_partials_equal_lstsq_residuals_and_holm_per_family():
    g = _groups(seed=1)
    t = _tables(g)
    sc = t["size_controls"]
    assert set(sc["controls"]) == set(CONTROL_SETS)
    pos = g[g.grad_var > 0]
    for _, r in sc[sc.subset == "v_pos"].iterrows():
        cols = list(CONTROL_SETS[r["controls"]])
        assert r["estimate"] == pytest.approx(residual_partial(pos[r["measure"]], pos.grad_var, pos[cols]), abs=1e-9)
    vm = t["v_parts_measures"]
    row = vm[(vm.subset == "all") & (vm.statistic == "rho(u, C | N)") & (vm.measure == "se")].iloc[0]
    assert row["estimate"] == pytest.approx(residual_partial(g.se, g.grad_var_cross, g.grad_var_norm), abs=1e-9)
    fam = vm[(vm.subset == "all") & (vm.statistic == "rho(u, N)")]
    np.testing.assert_allclose(fam["p_holm"], holm(fam["p"]))
    # the planted structure: bot tracks N, se tracks C given N
    assert row["estimate"] > 0.5
    assert row["ci_low"] <= row["estimate"] <= row["ci_high"]


def test_confirmatory_family_and_its_holm():
    t = _tables(_groups(seed=2))["confirmatory"]
    assert list(t["contrast"]) == ["bot - se", "bot - token_entropy"] * 2
    assert list(t["target"]) == ["grad_var"] * 2 + ["grad_var_cross"] * 2
    np.testing.assert_allclose(t["p_holm"], holm(t["p"]))
    assert ((t["p"] >= 0) & (t["p"] <= 1)).all()


def test_trim_note_counts_and_both_frames():
    g = _groups(n=100, seed=3)
    note = trim_note(g, g.nsmallest(95, "grad_var"), 0.05).iloc[0]
    n_pos = int((g.grad_var > 0).sum())
    assert note["n_removed"] == 5 and note["share_of_all"] == pytest.approx(0.05)
    assert note["n_v_pos"] == n_pos and note["share_of_v_pos"] == pytest.approx(5 / n_pos)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = v_structure(g, ["bot", "se"], 0.05, n_boot=50)
    assert set(out["v_parts"]["frame"]) == {"trimmed", "untrimmed"}
    n = out["size_controls"].groupby("frame")["n"].max()
    assert n["untrimmed"] - n["trimmed"] == 5


def test_without_grams_only_the_size_controls_without_n():
    g = _groups().drop(columns=["grad_var_norm", "grad_var_cross"])
    with pytest.warns(UserWarning, match="grad_var_norm"):
        t = v_parts_tables(g, ["bot"], np.random.default_rng(0), 50)
    assert "N" not in set(t["size_controls"]["controls"]) and "s" in set(t["size_controls"]["controls"])
    assert set(t["v_parts_measures"]["statistic"]) == {"rho(u, V)"}


def test_nanquantile_rows_is_numpys_nanquantile():
    from gcpo_analysis.stats.vparts import nanquantile_rows

    rng = np.random.default_rng(2)
    for n in (1, 7, 40):
        x = rng.normal(size=n)
        x[rng.random(n) < 0.5] = np.nan
        X = x[rng.integers(0, n, (300, n))]
        X[0] = np.nan  # a resample without a value
        for q in (0.05, 0.5, 0.95):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                np.testing.assert_array_equal(nanquantile_rows(X, q), np.nanquantile(X, q, axis=1))
