"""What a gap study writes from its statistics, and re-scoring a finished study in place.

``paper_table_names``: the paper-layout tables carry the paper's Table 3/4 number only for a
math run (the paper's Tables 3 and 4 are on MATH and OlympiadBench); ``_write_paper_tables``,
``_draw_figures`` and ``_card_statistics`` are what ``study.run_study`` writes after
``stats.gap_study``; ``restat(folder)`` (``gcpo study --restat FOLDER``) re-runs the statistics
of a finished study folder from its groups frame, with the settings it was run with, and
rewrites its tables, figures, summary and card statistics (no model is loaded).
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from pathlib import Path

import pandas as pd

from ..frames import read_frame, write_json, write_table, write_text
from ..provenance import environment, library_versions
from ..vocab import MATH_DATASETS

log = logging.getLogger(__name__)


def paper_table_names(dataset: str, target: str = "grad_var") -> dict[str, str]:
    """File names of the two paper-layout tables. The paper's Tables 3 and 4 (rho with the success
    rate, rho with the gradient variance) are on math (MATH and OlympiadBench), so a table carries
    their number only for a math run (``vocab.MATH_DATASETS``) of the same quantity; otherwise it
    is named for what it holds (``spearman_grad_var``, ``spearman_success_rate``)."""
    math = dataset in MATH_DATASETS
    return {
        "target": "table4_grad_var" if math and target == "grad_var" else f"spearman_{target}",
        "success": "table3_success_rate" if math else "spearman_success_rate",
    }


_ALL_PAPER_NAMES = ("table4_grad_var", "table3_success_rate", "spearman_grad_var", "spearman_success_rate")
_NOTES = {
    "decomposition": "Our addition, not the paper's: (a) AUC of u for 1[V > 0]; (b) Spearman rho(u, V) within the "
    "V > 0 groups; (c) paired bootstrap delta = rho(reference, V) - rho(u, V) within V > 0. "
    "95% percentile bootstrap CIs; rho_pos_p_holm = Holm over the measures.",
    "retrieval_bootstrap": "Our addition: paired bootstrap of AUC and P@10% (H = top 10% by V, recomputed per "
    "resample); delta = reference - u, 95% percentile CIs; p_le_0 = share of resamples "
    "with delta <= 0, p_le_0_holm = Holm over the measures of one metric.",
    "size_control": "Our addition, not the paper's: gradient size, controlled (gcpo_analysis.size_control). "
    "partial = rank partial rho(u, V | mean|g|^2) (p from OLS of rank V on rank s and rank u); "
    "ratio = rho(u, V / mean|g|^2), 0 for V = 0 groups; norm = rho(u, mean|g|^2). Subsets: all = "
    "pooled, v_pos = V > 0, v_zero = V = 0 (norm only). 95% percentile bootstrap CIs (one draw "
    "per subset shared by the measures); delta = reference - u, paired; p_holm = Holm over the "
    "measures of one (subset, statistic).",
}


def _write_paper_tables(result, folder: Path, dataset: str | None = None) -> None:
    """The paper-layout tables (Rho, p and Holm p rows; names from ``paper_table_names``) and
    the annotated markdown of our additions. Files of the other naming left by an older version
    in ``folder`` are removed (said on stdout), so a folder never holds both."""
    dataset = dataset or result.name
    names = paper_table_names(dataset, result.settings.get("target", "grad_var"))
    tables = {names["target"]: result.table4()}
    if result.success is not None:
        tables[names["success"]] = result.table3()
    for name, table in tables.items():
        write_table(table, folder / f"{name}.csv", index=True)  # with the index: the measures name the rows
        write_text(folder / f"{name}.md", table.to_markdown())
    for stale in sorted(set(_ALL_PAPER_NAMES) - set(tables)):
        for path in (folder / f"{stale}.csv", folder / f"{stale}.md"):
            if path.exists():
                path.unlink()
                log.info("removed %s (a table name that does not fit dataset %r)", path, dataset)
    for name, note in _NOTES.items():
        table = getattr(result, name)
        if table is not None:
            write_text(folder / f"{name}.md", note + "\n\n" + table.to_markdown(index=False, floatfmt=".3f") + "\n")


def _draw_figures(result, figs: Path, dataset: str) -> None:
    """Figure 1, the correlation heatmap, the V = 0 decomposition and the size control."""
    import matplotlib.pyplot as plt

    from .. import plots

    figs.mkdir(parents=True, exist_ok=True)
    plots.draw_each(
        {
            "figure1": lambda: plots.figure1({dataset: result}, path=figs / "figure1"),
            "correlations": lambda: plots.correlation_heatmap(result, path=figs / "correlations"),
            "decomposition": (lambda: plots.decomposition(result, path=figs / "decomposition"))
            if result.decomposition is not None
            else None,
            "size_control": (lambda: plots.size_control(result, path=figs / "size_control"))
            if result.size_control is not None
            else None,
        }
    )
    plt.close("all")


def _card_statistics(result) -> dict:
    """The run card's summary of the statistics: rho, p, Holm p and CI per measure."""
    card = {
        "spearman": {
            r.measure: {
                "rho": r.rho,
                "p": r.p,
                "p_holm": r.p_holm,
                "ci": [r.ci_low, r.ci_high],
                "ci_width": r.ci_high - r.ci_low,
            }
            for r in result.spearman.itertuples()
        }
    }
    if result.size_control is not None:
        card["size_control"] = {
            f"{r.subset}/{r.statistic}/{r.measure}": {
                "rho": r.rho,
                "ci": [r.ci_low, r.ci_high],
                "p": r.p,
                "p_holm": r.p_holm,
            }
            for r in result.size_control.itertuples()
        }
    return card


def write_untrimmed(folder: Path, groups: pd.DataFrame, settings: dict, dataset: str) -> None:
    """Every headline table of ``stats.gap_study`` again with trim = 0, in tables/untrimmed/."""
    from ..stats.gap import gap_study

    untrimmed = folder / "tables" / "untrimmed"
    result = gap_study(groups, name=dataset, **dict(settings, trim=0))
    result.save(untrimmed)
    _write_paper_tables(result, untrimmed, dataset)
    write_text(untrimmed / "summary.md", result.to_markdown())


# The settings of the gap study's statistics: what a study and its --restat hand to gap_study.
GAP_KEYS = (
    "measures",
    "target",
    "reference",
    "trim",
    "n_boot",
    "top_frac",
    "k_folds",
    "seed",
    "success_column",
    "level",
)
RESTAT_OVERRIDES = ("trim", "n_boot", "measures")


def restat(folder, overrides: dict | None = None, *, figures: bool = True):
    """Re-score a study folder's statistics in place from its frames; no model is loaded.

    ``gcpo study --restat FOLDER``. Reads ``groups.parquet`` (never written), ``rollouts.parquet``,
    ``grams.parquet`` and ``embeddings.parquet`` where present, and the settings of
    ``tables/gap_study.json`` (else of the card); ``overrides`` replaces any of
    ``RESTAT_OVERRIDES`` (trim, n_boot, measures). Re-runs ``stats.gap_study``, the tables of
    what V is made of (``study.vtables``: V = N + C, size controls, confirmatory contrast, untrimmed
    headline tables) and, with Grams and the embeddings sidecar, every Lipschitz table
    (``study.lipschitz_checks``: the check, its exact-tokens subset where the folder holds
    ``tables/gram_recompute_rollouts.csv``, the confounds); rewrites
    ``tables/``, ``figures/``, ``summary.md`` and the card's statistics
    (``reanalysis_card.json`` when the tables came from a re-analysis, else ``run_card.json``),
    recording the re-scoring under the card's ``restat`` key. ``figures`` False leaves
    ``figures/`` as it is (the tables only, as the reproduction test compares). Deterministic: a second run writes
    the same tables byte for byte (tests/analysis/study/test_restat.py).
    """
    from ..measures.score import parse_measures
    from ..stats.gap import gap_study
    from .covariates import with_covariates
    from .lipschitz import SIDECAR
    from .lipschitz_checks import write_lipschitz_checks
    from .vtables import write_v_tables

    folder = Path(folder)
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(RESTAT_OVERRIDES))
    if unknown:
        raise ValueError(
            f"--restat takes only {', '.join('--' + k.replace('_', '-') for k in RESTAT_OVERRIDES)}; got {unknown}"
        )
    card_path = folder / "reanalysis_card.json"
    card_path = card_path if card_path.exists() else folder / "run_card.json"
    if not card_path.exists():
        raise FileNotFoundError(f"{folder} has no run_card.json: not a study folder")
    card = json.loads(card_path.read_text())
    if "pooled" in card and "run" in card:
        raise ValueError(f"{folder} is a --from-training folder: use from_training.restat_training (the CLI does)")
    dataset = card["settings"]["dataset"]
    saved = folder / "tables" / "gap_study.json"
    if saved.exists():
        s = json.loads(saved.read_text())["settings"]
    else:  # a folder whose statistics never ran: the card's settings, as run_study reads them
        s = dict(card["settings"])
        s["measures"] = parse_measures(s["measures"])
    if "measures" in overrides:
        overrides["measures"] = parse_measures(overrides["measures"])
    s.update(overrides)
    s["trim"] = int(s["trim"]) if s["trim"] >= 1 else s["trim"]
    t0 = time.perf_counter()
    groups = read_frame(folder / "groups.parquet", "groups")
    settings = {k: s[k] for k in GAP_KEYS if k in s}
    result = gap_study(groups, name=dataset, **settings)
    result.save(folder / "tables")
    _write_paper_tables(result, folder / "tables", dataset)
    if figures:
        _draw_figures(result, folder / "figures", dataset)
    write_text(folder / "summary.md", result.to_markdown())
    card.update(_card_statistics(result))
    rollouts = read_frame(folder / "rollouts.parquet", "rollouts") if (folder / "rollouts.parquet").exists() else None
    grams = pd.read_parquet(folder / "grams.parquet") if (folder / "grams.parquet").exists() else None
    if rollouts is not None:
        groups = with_covariates(groups, rollouts, grams, card["settings"].get("max_new_tokens"))
    write_untrimmed(folder, groups, settings, dataset)
    card["trim_note"] = write_v_tables(
        folder / "tables",
        groups,
        result.settings["measures"],
        settings.get("trim", 0.02),
        result.settings["n_boot"],
        result.settings["seed"],
    )
    if grams is not None and rollouts is not None and (folder / SIDECAR).exists():
        lip = write_lipschitz_checks(
            folder, seed=result.settings["seed"], rollouts=rollouts, grams=grams, figures=figures
        )
        card["lipschitz"] = lip.attrs.get("lipschitz")
    elif (
        grams is not None
        and rollouts is not None
        and any(x.get("stage") == "lipschitz" for x in card.get("skipped_stages", []))
    ):
        pass  # the run skipped the check (its measures give no clusters or embeddings); the card says why
    elif grams is not None and rollouts is not None:
        reason = (
            f"no {SIDECAR}: the Lipschitz tables were not re-scored (restat loads no model; "
            "study.lipschitz.write_lipschitz(folder) embeds once and writes the sidecar)"
        )
        warnings.warn(f"{folder}: {reason}", stacklevel=2)
        card["lipschitz_restat_skipped"] = reason
    card["restat"] = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.perf_counter() - t0, 2),
        "from": "groups.parquet, rollouts.parquet, grams.parquet, embeddings.parquet where present (no model)",
        "overrides": overrides,
        "versions": _versions(),
        "environment": environment(),
    }
    write_json(card_path, card, default=_json_default)
    log.info("re-scored %s (tables, figures, summary.md, %s)", folder, card_path.name)
    return result


def _json_default(obj):
    try:
        return obj.item()
    except AttributeError:
        return str(obj)


def _versions() -> dict:
    """The card's ``versions``: Python, the platform, gcpo and the libraries whose numbers it holds."""
    return library_versions()
