"""The figures a reviewer reads (legends, reference lines, human titles, the V = 0 decomposition)
and notebook 01 on a fresh clone: no study run yet -> the shipped figures/default_study, said so."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import matplotlib.figure
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from gcpo_analysis import plots
from gcpo_analysis.stats import gap_study
from gcpo_analysis.stats.decomposition import DECOMPOSITION_COLUMNS
from gcpo_analysis.theory.simulate import entropy_filter_effect, simulate_study

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "figures" / "default_study"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def sim():
    _, groups = simulate_study(n_queries=120, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = gap_study(groups, measures=("se", "cd", "bot", "rd"), n_boot=100, name="narrativeqa")
    return res, groups


def _hand_frame():
    """A decomposition frame written by hand with the contract's columns (owners.md)."""
    rows = []
    for i, m in enumerate(("se", "cd", "bot", "rd")):
        d = np.nan if m == "bot" else -0.1 * i
        rows.append(
            dict(
                measure=m,
                n_pos=27,
                n_zero=12,
                auc_pos=0.4 + 0.1 * i,
                auc_pos_ci_low=0.3 + 0.1 * i,
                auc_pos_ci_high=0.6 + 0.1 * i,
                rho_pos=0.2 - 0.1 * i,
                rho_pos_p=0.3,
                rho_pos_ci_low=-0.1 - 0.1 * i,
                rho_pos_ci_high=0.5 - 0.1 * i,
                delta_rho_pos=d,
                delta_rho_pos_ci_low=d - 0.2,
                delta_rho_pos_ci_high=d + 0.2,
            )
        )
    return pd.DataFrame(rows, columns=DECOMPOSITION_COLUMNS)


def _texts(fig):
    out = [t.get_text() for t in fig.texts]
    if fig._suptitle is not None:
        out.append(fig._suptitle.get_text())
    for sub in fig.subfigs:
        out += _texts(sub)
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
        if ax.get_legend() is not None:
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    return out


@pytest.mark.slow
def test_decomposition_draws_the_contract_frame(tmp_path):
    frame = _hand_frame()
    fig = plots.decomposition(frame, path=tmp_path / "decomposition")
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 3
    for suffix in (".png", ".svg"):
        assert (tmp_path / f"decomposition{suffix}").stat().st_size > 1000
    text = " ".join(_texts(fig))
    assert "our addition, not the paper's" in text
    for panel in ("(a) AUC", "(b) Spearman", "(c) paired Δρ = ρ(BoT"):
        assert panel in text, panel
    assert "27 groups with V > 0, 12 with V = 0" in text
    a, b, c = fig.axes
    # one point with a CI per measure in (a), (b); the reference has no Delta and is labelled instead
    assert [len(ax.collections[0].get_segments()) for ax in (a, b, c)] == [4, 4, 3]
    assert "reference" in [t.get_text() for t in c.texts]
    assert [t.get_text() for t in a.get_xticklabels()] == ["SE", "CD", "BoT", "RD"]
    assert any(np.allclose(line.get_ydata(), 0.5) for line in a.lines)  # chance line
    seg = np.array(a.collections[0].get_segments())[:, :, 1]  # CI ends are the frame's
    assert np.allclose(np.sort(seg, axis=1), frame[["auc_pos_ci_low", "auc_pos_ci_high"]].to_numpy())


@pytest.mark.slow
def test_decomposition_names_a_missing_column_and_a_missing_table(sim):
    with pytest.raises(ValueError, match="rho_pos_ci_high"):
        plots.decomposition(_hand_frame().drop(columns="rho_pos_ci_high"))
    res, _ = sim
    fig = plots.decomposition(res)  # the real GapStudyResult path
    assert "NarrativeQA" in fig._suptitle.get_text()
    res_old = type(res)(**{**res.__dict__, "decomposition": None})
    with pytest.raises(ValueError, match="no decomposition table"):
        plots.decomposition(res_old)


@pytest.mark.slow
def test_figure1_legends_reference_line_zero_bars_and_human_titles(sim):
    res, _ = sim
    retrieval = res.retrieval.copy()
    retrieval.loc[retrieval["measure"] == "rd", "precision_at_10"] = 0.0
    res = type(res)(**{**res.__dict__, "retrieval": retrieval})
    fig = plots.figure1({"narrativeqa": res, "lipschitz=True": res})
    text = _texts(fig)
    assert not any("narrativeqa" in t or "lipschitz=" in t for t in text), text
    assert any(t.startswith("NarrativeQA") for t in text)
    axes = fig.subfigs[0].axes
    b, d = axes[1], axes[3]
    assert any(np.allclose(line.get_ydata(), 0.5) for line in b.lines)
    assert "AUC = 0.5 (chance)" in [t.get_text() for t in b.get_legend().get_texts()]
    assert "0" in [t.get_text() for t in b.texts]  # the zero-height bar is annotated
    legend = [t.get_text() for t in d.get_legend().get_texts()]
    assert len(legend) == 2 and legend[0].startswith("MAE ÷ mean V (mean V = ") and legend[1].startswith("Spearman")


@pytest.mark.slow
def test_heatmap_explains_its_stars(sim):
    res, _ = sim
    fig = plots.correlation_heatmap({"lipschitz=False": res})
    assert plots.STARS_NOTE in [t.get_text() for t in fig.texts]
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert rows[0].startswith("Simulated: gradients unrelated to the embedding")


@pytest.mark.slow
def test_simulation_gaps_legend_off_the_bars_tau_and_cis(sim, tmp_path):
    res, groups = sim
    rho = pd.concat([res.spearman.assign(setting=s) for s in ("lipschitz=True", "lipschitz=False")])
    calib = entropy_filter_effect(groups, n_boot=200, seed=0)
    fig = plots.simulation_gaps_plot(rho, calib, path=tmp_path / "sim")
    fig.canvas.draw()
    for ax in fig.axes:  # each legend sits wholly below its axes
        assert ax.get_legend().get_window_extent().y1 <= ax.get_window_extent().y0
    left, right = fig.axes
    assert f"τ = {calib['tau'].iloc[0]:.3g}" in right.get_title()
    assert len(left.collections) == 2 and len(right.collections) == 2  # CIs: one set per bar group
    assert [t.get_text() for t in right.get_xticklabels()] == ["mean RD", "mean V(q)", "mean ‖ĝ‖"]


def test_entropy_filter_bootstrap_matches_a_loop():
    _, groups = simulate_study(n_queries=60, seed=1)
    out = entropy_filter_effect(groups, n_boot=40, seed=3).set_index("subset")
    idx = np.random.default_rng(3).integers(0, len(groups), size=(40, len(groups)))
    rel = {"kept": [], "removed": []}
    for row in idx:
        g = groups.iloc[row]
        tau = g["se"].quantile(0.5)
        rel["kept"].append(g.loc[g["se"] <= tau, "grad_var"].mean() / g["grad_var"].mean())
        rel["removed"].append(g.loc[g["se"] > tau, "grad_var"].mean() / g["grad_var"].mean())
    for subset, values in rel.items():
        assert out.loc[subset, "rel_grad_var_ci_low"] == pytest.approx(np.nanquantile(values, 0.025))
        assert out.loc[subset, "rel_grad_var_ci_high"] == pytest.approx(np.nanquantile(values, 0.975))
        assert out.loc[subset, "rel_grad_var"] == pytest.approx(
            out.loc[subset, "mean_grad_var"] / out.loc["all", "mean_grad_var"]
        )
    assert out.loc["all", "rel_grad_var_ci_low"] == out.loc["all", "rel_grad_var_ci_high"] == 1.0


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.skipif(not (SHIPPED / "groups.parquet").exists(), reason="no shipped figures/default_study")
def test_notebook_01_falls_back_to_the_shipped_study_and_shows_figures_inline(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # a fresh clone: notebooks/ beside figures/default_study, and no runs/study yet
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / "01_gap_study.ipynb", tmp_path / "notebooks")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "default_study").symlink_to(SHIPPED)
    before = {p.name: p.stat().st_mtime_ns for p in (SHIPPED / "figures").iterdir()}
    for var in ("STUDY_DIR", "FIGURES_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GCPO_N_BOOT", "200")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(tmp_path / "notebooks" / "01_gap_study.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "stored with outputs"
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path / "notebooks")}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    notes = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert any("showing the shipped run ../figures/default_study" in n for n in notes), notes
    assert any(o.get("name") == "stderr" and "UserWarning" in o["text"] for o in outputs)  # and a warning
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 4  # figure 1, heatmap, decomposition, size
    written = tmp_path / "runs" / "notebook01"  # the default run folder, not figures/
    for stem in ("figure1", "correlations", "decomposition", "size_control"):
        assert all((written / f"{stem}{s}").exists() for s in (".png", ".svg")), stem
    assert {p.name: p.stat().st_mtime_ns for p in (SHIPPED / "figures").iterdir()} == before
