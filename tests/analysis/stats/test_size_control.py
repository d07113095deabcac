"""Gradient size, controlled (gcpo_analysis.stats.size_control), Holm's correction in the study's
tables, the domain-true table names and `gcpo study --restat` on a study folder."""

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from gcpo_analysis import stats as S
from gcpo_analysis.stats.size_control import holm, partial_spearman, size_control
from gcpo_analysis.study.output import paper_table_names

ROOT = Path(__file__).resolve().parents[3]


def _residual_partial(u, v, s):
    """Independent partial rank correlation: residualise the ranks on (1, rank s) with lstsq."""
    ru, rv, rs = (sps.rankdata(a) for a in (u, v, s))
    A = np.column_stack([np.ones(len(rs)), rs])
    eu = ru - A @ np.linalg.lstsq(A, ru, rcond=None)[0]
    ev = rv - A @ np.linalg.lstsq(A, rv, rcond=None)[0]
    return np.corrcoef(eu, ev)[0, 1]


def _planted(n=600, seed=0):
    """s = gradient size; V = s * exp(z) with z independent of s; u_size tracks s only,
    u_signal tracks z only (the norm-free part of V)."""
    rng = np.random.default_rng(seed)
    s = rng.lognormal(0, 1, n)
    z = rng.normal(0, 0.7, n)
    V = s * np.exp(z)
    return pd.DataFrame(
        dict(
            query_id=np.arange(n),
            grad_var=V,
            grad_norm2_mean=s,
            u_size=s * np.exp(rng.normal(0, 0.1, n)),
            u_signal=z + rng.normal(0, 0.1, n),
        )
    )


@pytest.mark.parametrize("ties", [False, True])
def test_partial_spearman_matches_lstsq_residuals_and_t_test(ties):
    rng = np.random.default_rng(1)
    n = 80
    s = rng.normal(size=n)
    u = s + rng.normal(size=n)
    v = 0.5 * s + 0.3 * u + rng.normal(size=n)
    if ties:
        u, s = np.round(u), np.round(s * 2)
    rho, p = partial_spearman(u, v, s)
    assert rho == pytest.approx(_residual_partial(u, v, s), abs=1e-12)
    t = rho * np.sqrt((n - 3) / (1 - rho**2))  # the partial correlation's t-test, df = N - 3
    assert p == pytest.approx(2 * sps.t.sf(abs(t), n - 3), rel=1e-9)


@pytest.mark.slow
def test_planted_size_tracker_has_partial_rho_near_zero():
    df = _planted()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = S.gap_study(df, measures=("u_size", "u_signal"), reference="u_signal", trim=0, n_boot=300)
    t = res.size_control.set_index(["subset", "statistic", "measure"])
    plain = res.spearman.set_index("measure")
    assert plain.loc["u_size", "rho"] > 0.6  # looks like it tracks V...
    assert abs(t.loc[("all", "partial", "u_size"), "rho"]) < 0.1  # ...but only through the size
    assert t.loc[("all", "partial", "u_size"), "ci_low"] < 0 < t.loc[("all", "partial", "u_size"), "ci_high"]
    assert abs(t.loc[("all", "ratio", "u_size"), "rho"]) < 0.1
    assert t.loc[("all", "norm", "u_size"), "rho"] > 0.95
    assert t.loc[("all", "partial", "u_signal"), "rho"] > 0.6  # the norm-free signal survives
    assert t.loc[("all", "ratio", "u_signal"), "rho"] > 0.9
    # the paired delta: reference u_signal minus u_size, CI clear of 0
    assert t.loc[("all", "partial", "u_size"), "delta_ci_low"] > 0.4
    assert np.isnan(t.loc[("all", "partial", "u_signal"), "delta"])


@pytest.mark.slow
def test_bootstrap_ci_equals_a_plain_loop_and_v_zero_rows():
    df = _planted(60, seed=3)
    df.loc[:14, "grad_var"] = 0.0  # 15 groups with V = 0: ratio 0 there
    X = df[["u_size", "u_signal"]].to_numpy()
    y, s = df["grad_var"].to_numpy(), df["grad_norm2_mean"].to_numpy()
    B = 200
    table = size_control(X, ["u_size", "u_signal"], y, s, "u_signal", np.random.default_rng(7), n_boot=B)
    idx = np.random.default_rng(7).integers(0, 60, size=(B, 60))  # the first draw is the pooled subset's
    loop = np.array([_residual_partial(X[i, 0], y[i], s[i]) for i in idx])
    row = table.set_index(["subset", "statistic", "measure"]).loc[("all", "partial", "u_size")]
    assert (row.ci_low, row.ci_high) == pytest.approx(tuple(np.quantile(loop, [0.025, 0.975])), abs=1e-10)
    ratio = np.where(y > 0, y / s, 0.0)
    assert row.n == 60
    got = table.set_index(["subset", "statistic", "measure"]).loc[("all", "ratio", "u_signal"), "rho"]
    assert got == pytest.approx(sps.spearmanr(X[:, 1], ratio).statistic)
    assert set(table.loc[table.subset == "v_zero", "statistic"]) == {"norm"}
    assert (table.loc[table.subset == "v_pos", "n"] == 45).all()


@pytest.mark.slow
def test_zero_or_negative_norm():
    df = _planted(40)
    df.loc[3, ["grad_norm2_mean", "grad_var"]] = 0.0
    with pytest.warns(UserWarning, match="1 group.*= 0 or non-finite"):
        res = S.gap_study(df, measures=("u_size",), reference="u_size", trim=0, n_boot=50)
    assert (res.size_control["n_dropped_norm"] == 1).all()
    assert res.size_control.set_index(["subset", "statistic"]).loc[("all", "partial"), "n"] == 39
    df.loc[5, "grad_norm2_mean"] = -1.0
    with pytest.raises(ValueError, match="negative at row 5"):
        S.gap_study(df, measures=("u_size",), reference="u_size", trim=0, n_boot=50)
    with pytest.warns(UserWarning, match="gradient-size control is skipped"):
        res = S.gap_study(
            _planted(40).drop(columns="grad_norm2_mean"), measures=("u_size",), reference="u_size", trim=0, n_boot=50
        )
    assert res.size_control is None


def _holm_by_hand(p):
    """Holm's step-down: sort ascending, multiply the k-th smallest (k = 0..m-1) by m - k,
    carry the running maximum, cap at 1."""
    order = np.argsort(p)
    out, running = np.empty(len(p)), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - k) * p[i]))
        out[i] = running
    return out


def test_holm_against_hand_worked_values_statsmodels_and_a_loop():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # by hand: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> max(0.06, 0.04) = 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    got = holm([0.01, np.nan, 0.04])  # NaN is not a hypothesis: the family has 2
    assert got[0] == pytest.approx(0.02) and np.isnan(got[1]) and got[2] == pytest.approx(0.04)
    rng = np.random.default_rng(0)
    for k in range(6):  # few: statsmodels' Holm branch runs gc.collect() on every call
        q = rng.uniform(0, 0.2, rng.integers(2, 9))
        if k % 2:  # ties, and p large enough that the clip at 1 bites
            q = np.concatenate([q, q[:2], [0.7, 0.7]])
        np.testing.assert_array_equal(holm(q), multipletests(q, method="holm")[1])  # the same bytes
        assert holm(q) == pytest.approx(_holm_by_hand(q))
    assert holm([0.02, 0.02, 0.5]) == pytest.approx([0.06, 0.06, 0.5])  # ties
    with pytest.raises(ValueError, match="lie in"):
        holm([0.1, 1.5])


@pytest.mark.slow
def test_every_multi_measure_table_has_holm_next_to_raw():
    rng = np.random.default_rng(2)
    n = 120
    df = _planted(n)
    for m in ("token_entropy", "se", "cd", "bot"):
        df[m] = df["grad_var"] * np.exp(rng.normal(0, 1.5, n))
    df["success_rate"] = rng.uniform(0, 1, n)
    df.loc[: n // 4, "grad_var"] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = S.gap_study(df, measures=("token_entropy", "se", "cd", "bot"), n_boot=100)
    pairs = [
        (res.spearman, "p", None),
        (res.success, "p", None),
        (res.decomposition, "rho_pos_p", None),
        (res.bootstrap, "p_le_0", None),
        (res.retrieval_bootstrap, "p_le_0", "metric"),
        (res.size_control, "p", ["subset", "statistic"]),
    ]
    for table, col, by in pairs:
        cols = list(table.columns)
        assert cols[cols.index(col) + 1] == f"{col}_holm"
        parts = [table] if by is None else [g for _, g in table.groupby(by)]
        for part in parts:
            assert part[f"{col}_holm"].to_numpy() == pytest.approx(_holm_by_hand(part[col].to_numpy()))


def test_table_names_follow_the_domain():
    assert paper_table_names("asdiv") == {"target": "table4_grad_var", "success": "table3_success_rate"}
    assert paper_table_names("math500")["target"] == "table4_grad_var"
    assert paper_table_names("narrativeqa") == {"target": "spearman_grad_var", "success": "spearman_success_rate"}
    assert paper_table_names("asdiv", target="success_rate")["target"] == "spearman_success_rate"


@pytest.mark.slow
def test_paper_tables_written_under_the_domain_name(tmp_path):
    from gcpo_analysis.study.output import _write_paper_tables

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = S.gap_study(
            _planted(60).assign(success_rate=np.linspace(0, 1, 60)),
            measures=("u_size", "u_signal"),
            reference="u_signal",
            trim=0,
            n_boot=20,
            name="asdiv",
        )
    (tmp_path / "spearman_grad_var.md").write_text("stale")
    _write_paper_tables(res, tmp_path)  # the dataset is the result's name
    assert {p.name for p in tmp_path.iterdir()} >= {
        "table4_grad_var.md",
        "table4_grad_var.csv",
        "table3_success_rate.csv",
        "size_control.md",
    }
    assert not (tmp_path / "spearman_grad_var.md").exists()
    assert "p (Holm)" in (tmp_path / "table4_grad_var.md").read_text()


@pytest.mark.slow
def test_restat_rewrites_a_study_folder_from_its_frames(tmp_path, capsys):
    dataset = "narrativeqa"
    src = ROOT / "figures" / "default_study"
    folder = tmp_path / "run"
    (folder / "tables").mkdir(parents=True)
    shutil.copy(src / "groups.parquet", folder / "groups.parquet")
    card = json.loads((src / "run_card.json").read_text())
    card["settings"]["dataset"] = dataset
    (folder / "run_card.json").write_text(json.dumps(card))
    blob = json.loads((src / "tables" / "gap_study.json").read_text())
    blob["settings"]["n_boot"] = 200  # fast; everything else as committed
    (folder / "tables" / "gap_study.json").write_text(json.dumps(blob))
    stale = "table4_grad_var"  # an older version's name for a NarrativeQA run
    (folder / "tables" / f"{stale}.md").write_text("old")
    before = (folder / "groups.parquet").read_bytes()
    from gcpo_analysis.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["study", "--restat", str(folder)]) == 0
    std = capsys.readouterr()  # progress is logged: the gcpo command shows it on stderr, not stdout
    assert "[study]" not in std.out
    assert f"[study] re-scored {folder}" in std.err and f"[study] removed {folder / 'tables' / stale}.md" in std.err
    assert (folder / "groups.parquet").read_bytes() == before
    names = paper_table_names(dataset)
    assert (folder / "tables" / f"{names['target']}.md").exists()
    assert (folder / "tables" / f"{names['success']}.csv").exists()
    assert not (folder / "tables" / f"{stale}.md").exists()
    for f in ("tables/size_control.csv", "tables/size_control.md", "figures/size_control.png", "summary.md"):
        assert (folder / f).exists(), f
    out = json.loads((folder / "run_card.json").read_text())
    assert "restat" in out and "all/partial/cd" in out["size_control"]
    direct = S.gap_study(
        pd.read_parquet(folder / "groups.parquet"),
        n_boot=200,
        trim=0.02,
        measures=blob["settings"]["measures"],
        name=dataset,
    )
    saved = pd.read_csv(folder / "tables" / "spearman.csv")
    pd.testing.assert_frame_equal(saved, direct.spearman, check_dtype=False)
    back = S.GapStudyResult.load(folder / "tables")  # the new table round-trips through gap_study.json
    pd.testing.assert_frame_equal(back.size_control, direct.size_control, check_dtype=False)
    assert "## size_control" in (folder / "summary.md").read_text()
    assert out["spearman"]["rd"]["p_holm"] == pytest.approx(direct.spearman.set_index("measure").loc["rd", "p_holm"])
