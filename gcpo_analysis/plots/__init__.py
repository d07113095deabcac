"""Figures of the paper from tidy frames (seaborn on the Agg backend).

Every function takes frames (or ``GapStudyResult``s), returns a matplotlib Figure and, when
``path`` (a file stem, e.g. ``figures/fig1``) is given, writes ``<stem>.png`` and ``<stem>.svg``.

The figures live in ``study`` (the gap study's) and ``theory`` (the numerical checks'); ``base``
holds what they share. Every public name is importable from here.
"""

from .base import draw_each, plt, save_figure
from .study import (
    STARS_NOTE,
    ablation_plot,
    correlation_heatmap,
    decomposition,
    figure1,
    rho_over_training,
    size_control,
)
from .theory import lipschitz_plot, simulation_gaps_plot

__all__ = [
    "STARS_NOTE",
    "ablation_plot",
    "correlation_heatmap",
    "decomposition",
    "draw_each",
    "figure1",
    "lipschitz_plot",
    "plt",
    "rho_over_training",
    "save_figure",
    "simulation_gaps_plot",
    "size_control",
]
