"""gcpo_analysis.plots and notebooks/02_gap_proofs.ipynb (executed headlessly)."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib.figure
import numpy as np
import pandas as pd
import pytest

from gcpo_analysis import plots
from gcpo_analysis.stats import gap_study
from gcpo_analysis.theory.simulate import entropy_filter_effect, simulate_study

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02_gap_proofs.ipynb"


@pytest.fixture(scope="module")
def study():
    _, groups = simulate_study(n_queries=120, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gap_study(groups, measures=("se", "cd", "bot", "rd"), n_boot=100, name="sim"), groups


def _written(stem: Path):
    return [stem.with_suffix(".png"), stem.with_suffix(".svg")]


def test_figure1_and_heatmap_write_png_and_svg(study, tmp_path):
    res, _ = study
    fig = plots.figure1({"A": res, "B": res}, path=tmp_path / "fig1")
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) >= 8
    fig = plots.correlation_heatmap(res, path=tmp_path / "heat")
    assert isinstance(fig, matplotlib.figure.Figure)
    for stem in ("fig1", "heat"):
        for f in _written(tmp_path / stem):
            assert f.stat().st_size > 1000
    assert (tmp_path / "heat.svg").read_text().lstrip().startswith("<?xml")


def test_ablation_and_simulation_plots(study, tmp_path):
    res, groups = study
    frame = pd.DataFrame(
        {"alpha": [0.2, 0.4, 0.6] * 4, "f1": np.linspace(0.3, 0.5, 12), "method": ["GCPO"] * 6 + ["SE"] * 6}
    )
    assert isinstance(plots.ablation_plot(frame, path=tmp_path / "abl"), matplotlib.figure.Figure)
    with pytest.raises(ValueError, match="'acc'"):
        plots.ablation_plot(frame, y="acc")
    rho = res.spearman.assign(setting="lipschitz=True")
    fig = plots.simulation_gaps_plot(rho, entropy_filter_effect(groups), path=tmp_path / "sim")
    assert isinstance(fig, matplotlib.figure.Figure)
    assert all(f.exists() for s in ("abl", "sim") for f in _written(tmp_path / s))


@pytest.mark.notebook
def test_notebook_runs_and_writes_figures(tmp_path, monkeypatch):
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "stored with outputs"
    monkeypatch.setenv("FIGURES_DIR", str(tmp_path))
    monkeypatch.setenv("GCPO_N_BOOT", "200")
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    for stem in ("fig1_gap_study_simulated", "correlation_heatmap_simulated", "simulation_gaps"):
        assert all(f.exists() for f in _written(tmp_path / stem)), stem
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 3  # shown inline, not only written
