"""A gap study's result: its tidy tables, the paper's Tables 3-4 from them, and the folder it
saves to and loads from (``GapStudyResult``; paper Sec. 2, App. D). ``gap.gap_study`` makes it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..frames import write_json, write_table
from ..measures.registry import MEASURE_REGISTRY, RegistryView, table_order

# a measure's name in the tables and figures, read from the measures registry at each access
MEASURE_LABELS = RegistryView(MEASURE_REGISTRY, lambda m: m.label)


# --------------------------------------------------------------------------- p formatting
def format_p(p: float) -> str:
    """The paper's p-value bins (Tables 3-4): '<0.001', '<0.05', '>0.05' ('nan' if undefined)."""
    if not np.isfinite(p):
        return "nan"
    return "<0.001" if p < 0.001 else "<0.05" if p < 0.05 else ">0.05"


# --------------------------------------------------------------------------- the tables
_TABLE_COLUMNS = {
    "spearman": ["measure", "rho", "p", "p_holm", "ci_low", "ci_high", "n"],
    "retrieval": ["measure", "auc", "precision_at_10", "n"],
    "bootstrap": ["reference", "measure", "delta", "ci_low", "ci_high", "p_le_0", "p_le_0_holm"],
    "heldout": ["measure", "mae_mean", "mae_std", "spearman_mean", "spearman_std", "n"],
    "success": ["measure", "rho", "p", "p_holm", "n"],
}


def _raw_columns(key: str) -> list[str]:
    """A table's columns before ``add_holm`` inserts the adjusted p-values."""
    return [c for c in _TABLE_COLUMNS[key] if not c.endswith("_holm")]


@dataclass
class GapStudyResult:
    """Tidy tables of one gap study (App. D); see ``gap_study``.

    ``dropped`` maps each measure (and the target) to the number of rows dropped for a
    non-finite value; ``settings`` holds every argument of the run.
    """

    spearman: pd.DataFrame
    retrieval: pd.DataFrame
    bootstrap: pd.DataFrame
    heldout: pd.DataFrame
    success: pd.DataFrame | None
    settings: dict
    n_queries: int
    n_trimmed: int
    dropped: dict = field(default_factory=dict)
    name: str = "data"
    # our additions (``gcpo_analysis.stats.decomposition``), absent from results saved before them
    decomposition: pd.DataFrame | None = None
    retrieval_bootstrap: pd.DataFrame | None = None
    size_control: pd.DataFrame | None = None

    def _paper_rows(self, table: pd.DataFrame) -> pd.DataFrame:
        cols = [m for m in table_order() if m in set(table["measure"])]
        t = table.set_index("measure")
        rho: dict[str, float | str] = {MEASURE_LABELS.get(m, m): round(float(t["rho"].loc[m]), 3) for m in cols}
        rows = [rho] + [
            {MEASURE_LABELS.get(m, m): format_p(float(t[c].loc[m])) for m in cols}
            for c in ("p", "p_holm")
            if c in t.columns
        ]
        names = ["Rho", "p", "p (Holm)"][: len(rows)]
        index = pd.MultiIndex.from_tuples([(self.name, r) for r in names], names=["dataset", "row"])
        return pd.DataFrame(rows, index=index)

    def table3(self) -> pd.DataFrame:
        """Table 3 layout: Spearman rho with the success rate ('Rho' row) and its binned p ('p' row)."""
        if self.success is None:
            raise ValueError("this study has no success-rate table: the groups frame had no success column")
        return self._paper_rows(self.success)

    def table4(self) -> pd.DataFrame:
        """Table 4 layout: Spearman rho with the target (gradient variance) and its binned p."""
        return self._paper_rows(self.spearman)

    def tables(self) -> dict[str, pd.DataFrame]:
        out = {k: getattr(self, k) for k in ("spearman", "retrieval", "bootstrap", "heldout")}
        for key in ("success", "decomposition", "retrieval_bootstrap", "size_control"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out

    def to_markdown(self) -> str:
        """A readable summary: settings line, then every table as markdown."""
        parts = [
            f"# Gap study: {self.name}",
            f"N = {self.n_queries} queries after trimming {self.n_trimmed}; target = "
            f"{self.settings.get('target')}, reference = {self.settings.get('reference')}, "
            f"B = {self.settings.get('n_boot')} resamples, seed = {self.settings.get('seed')}",
        ]
        if any(self.dropped.values()):
            parts.append(f"Rows dropped for non-finite values: {self.dropped}")
        titles = {
            "decomposition": "decomposition (our addition, not the paper's: (a) AUC for 1[V > 0], "
            "(b) rho(u, V) within V > 0, (c) paired delta-rho within V > 0)",
            "retrieval_bootstrap": "retrieval_bootstrap (our addition: paired bootstrap of AUC and "
            "P@10% differences, reference minus u)",
            "size_control": "size_control (our addition: rho(u, V | mean|g|^2), rho(u, V / mean|g|^2), "
            "rho(u, mean|g|^2); pooled, V > 0, V = 0; delta = reference - u)",
        }
        for key, table in self.tables().items():
            parts += [f"\n## {titles.get(key, key)}", table.to_markdown(index=False, floatfmt=".4g")]
        return "\n".join(parts) + "\n"

    def save(self, folder: str | Path) -> Path:
        """Write one CSV per table and ``gap_study.json`` (all tables, settings, counts)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for key, table in self.tables().items():
            write_table(table, folder / f"{key}.csv")
        blob = dict(
            name=self.name,
            settings=self.settings,
            n_queries=self.n_queries,
            n_trimmed=self.n_trimmed,
            dropped=self.dropped,
            tables={k: json.loads(t.to_json(orient="split", index=False)) for k, t in self.tables().items()},
        )
        write_json(folder / "gap_study.json", blob, default=float)
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> GapStudyResult:
        """Read a result written by ``save`` (from ``gap_study.json``)."""
        path = Path(folder) / "gap_study.json"
        if not path.exists():
            raise FileNotFoundError(f"no gap_study.json in {folder}")
        blob = json.loads(path.read_text())
        tables = {k: pd.DataFrame(v["data"], columns=v["columns"]) for k, v in blob["tables"].items()}
        return cls(
            spearman=tables["spearman"],
            retrieval=tables["retrieval"],
            bootstrap=tables["bootstrap"],
            heldout=tables["heldout"],
            success=tables.get("success"),
            settings=blob["settings"],
            n_queries=blob["n_queries"],
            n_trimmed=blob["n_trimmed"],
            dropped=blob["dropped"],
            name=blob["name"],
            decomposition=tables.get("decomposition"),
            retrieval_bootstrap=tables.get("retrieval_bootstrap"),
            size_control=tables.get("size_control"),
        )


def paper_table(results: dict, which: str = "table4") -> pd.DataFrame:
    """Stack ``table3``/``table4`` of several datasets ({name: GapStudyResult}) as in the paper."""
    if which not in ("table3", "table4"):
        raise ValueError(f"which must be 'table3' or 'table4', got {which!r}")
    frames = []
    for name, res in results.items():
        res = GapStudyResult(**{**res.__dict__, "name": name})
        frames.append(getattr(res, which)())
    return pd.concat(frames)
