"""Redraw the committed figures from committed outputs; no model is loaded, nothing is re-run.

    .venv/bin/python scripts/redraw_figures.py                 # figures/default_study + notebook 02
    .venv/bin/python scripts/redraw_figures.py --study figures/cpu_large --no-simulated

For each study folder: reads ``tables/gap_study.json`` (the statistics the study saved, so the
figures show exactly the committed tables) and writes ``figures/{figure1,correlations,
decomposition}.{png,svg}`` inside it. ``figures/default_study``'s Figure 1 and heatmap are also
copied to ``figures/figure1.*`` and ``figures/correlations.*``. Then, unless ``--no-simulated``,
executes ``notebooks/02_gap_proofs.ipynb`` with ``FIGURES_DIR=figures`` (the simulated figures,
seeded, about a minute on 2 cores). After a re-analysis (``gcpo study --from-rollouts``) copy its
``tables/`` into the study folder first, or point ``--study`` at the re-analysis folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def redraw_study(folder: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    from gcpo_analysis import plots
    from gcpo_analysis.stats import GapStudyResult

    result = GapStudyResult.load(folder / "tables")
    figs = folder / "figures"
    written = []
    written += plots.save_figure(plots.figure1({result.name: result}), figs / "figure1")
    written += plots.save_figure(plots.correlation_heatmap(result), figs / "correlations")
    if result.decomposition is not None:
        written += plots.save_figure(plots.decomposition(result), figs / "decomposition")
    else:
        print(f"[redraw] {folder}: no decomposition table (saved before it existed); skipped", file=sys.stderr)
    plt.close("all")
    return written


def redraw_simulated(figures_dir: Path) -> None:
    import nbclient
    import nbformat

    notebook = ROOT / "notebooks" / "02_gap_proofs.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    os.environ["FIGURES_DIR"] = str(figures_dir.resolve())
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=900, resources={"metadata": {"path": str(notebook.parent)}}
    ).execute()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--study",
        action="append",
        type=Path,
        help="study folder holding tables/gap_study.json (repeatable; default: figures/default_study)",
    )
    p.add_argument("--no-simulated", action="store_true", help="skip notebook 02's simulated figures")
    args = p.parse_args(argv)
    studies = args.study or [ROOT / "figures" / "default_study"]
    for folder in studies:
        for path in redraw_study(folder):
            print(f"[redraw] wrote {path}")
        if folder.resolve() == (ROOT / "figures" / "default_study").resolve():
            for name in ("figure1.png", "figure1.svg", "correlations.png", "correlations.svg"):
                shutil.copyfile(folder / "figures" / name, ROOT / "figures" / name)
                print(f"[redraw] copied {name} to figures/")
    if not args.no_simulated:
        redraw_simulated(ROOT / "figures")
        print(
            "[redraw] wrote figures/{fig1_gap_study_simulated,correlation_heatmap_simulated,simulation_gaps}.{png,svg}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
