"""What every figure shares: the headless backend, the two-format writer, error bars, measure
ticks, human titles, and drawing each figure on its own."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: figures are files, never windows
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..frames import write_figure  # noqa: E402
from ..stats.gap_result import MEASURE_LABELS  # noqa: E402


def save_figure(fig, path) -> list[Path]:
    """Write ``fig`` as <path>.png (150 dpi) and <path>.svg; return the two paths."""
    stem = Path(path)
    if stem.suffix in (".png", ".svg", ".pdf"):
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    write_figure(fig, out[0], dpi=150, bbox_inches="tight")
    write_figure(fig, out[1], bbox_inches="tight")
    return out


def _label(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    out["label"] = out["measure"].map(lambda m: MEASURE_LABELS.get(m, m))
    return out


def _yerr(y, lo, hi) -> list:
    """matplotlib's [below, above] error lengths of a CI [lo, hi] around y, clipped at 0: a bound
    equal to its estimate (few V > 0 groups, --n-boot 1) can sit a rounding error past it, and a
    negative length is an error that would cost the figure."""
    y, lo, hi = (np.asarray(v, dtype=float) for v in (y, lo, hi))
    return [np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)]


def _errorbars(ax, x, y, lo, hi, color):
    ax.errorbar(
        x,
        y,
        yerr=_yerr(y, lo, hi),
        fmt="none",
        ecolor="black",
        capsize=3,
        lw=1,
    )


def _measure_ticks(ax, labels):
    """Measure names under a panel, slanted so that seven of them never overlap."""
    ax.set_xticks(np.arange(len(labels)), labels, rotation=30, ha="right", rotation_mode="anchor")
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_xlabel("")


def _mark_reference(ax, labels, ref):
    """Write 'reference' where the reference measure's (undefined) Delta would be."""
    ref_label = MEASURE_LABELS.get(ref, ref)
    if ref_label in list(labels):
        ax.annotate(
            "reference",
            (list(labels).index(ref_label), 0),
            ha="center",
            va="bottom",
            xytext=(0, 4),
            textcoords="offset points",
            fontsize=8,
            color="dimgrey",
        )


_NAMES = {
    "narrativeqa": "NarrativeQA",
    "qasper": "Qasper",
    "hotpotqa": "HotpotQA",
    "math500": "MATH500",
    "aime24": "AIME24",
    "olympiadbench": "OlympiadBench",
    "lipschitz=True": "Simulated: gradients follow the embedding (Lipschitz)",
    "lipschitz=False": "Simulated: gradients unrelated to the embedding",
    "grad_var": "gradient variance V(q)",
    "success_rate": "success rate",
    "success": "success rate",
}


def _human(name: str) -> str:
    """A title from an identifier: 'narrativeqa' -> 'NarrativeQA', 'lipschitz=True' -> a sentence."""
    return _NAMES.get(str(name), str(name))


def draw_each(figures: dict) -> dict[str, str]:
    """Draw each figure (name -> a callable, or None to skip) on its own: one that fails is named
    in a warning and skipped, so a figure never costs the others, the tables or the summary.
    Returns {name: why} for the figures not drawn."""
    import warnings

    failed = {}
    for name, draw in figures.items():
        if draw is None:
            continue
        try:
            draw()
        except Exception as err:  # noqa: BLE001 - any plotting error: this figure only
            failed[name] = f"{type(err).__name__}: {err}"
            warnings.warn(f"figure {name!r} not drawn ({failed[name]}); the tables are unaffected", stacklevel=2)
        finally:
            plt.close("all")
    return failed
