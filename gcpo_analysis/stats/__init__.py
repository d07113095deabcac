"""The statistics of the gap study (paper Section 2, Appendix D; docs/conventions.md "gap study").

* ``gap``: ``gap_study`` (Spearman ρ(u, V) with bootstrap CIs, retrieval AUC and precision@10%,
  the paired bootstrap against a reference measure, held-out regression), ``trim_top``;
* ``gap_result``: ``GapStudyResult`` (the study's tables, saved to and loaded from a folder),
  ``paper_table``, ``format_p``;
* ``rank``: the rank statistics on arrays (Spearman, its bootstrap, retrieval), vectorised and
  checked against the naive loops kept beside them;
* ``decomposition``: ρ(u, V) split into "is V = 0" and "which V > 0";
* ``size_control``: the gradient-size control (partial ρ given mean‖g‖², ρ of the ratio) and Holm;
* ``lipschitz``: gradient distance against embedding distance within groups (Assumption 1).
"""

from .decomposition import auc_batch, paired_retrieval_bootstrap, v_zero_decomposition
from .gap import gap_study, heldout_regression, trim_top
from .gap_result import MEASURE_LABELS, GapStudyResult, format_p, paper_table
from .rank import (
    bootstrap_rhos,
    bootstrap_rhos_loop,
    paired_bootstrap,
    paired_bootstrap_loop,
    precision_at_top,
    retrieval,
    spearman,
    top_labels,
)
from .size_control import NORM_COLUMN, add_holm, holm, partial_spearman, size_control

__all__ = [
    "MEASURE_LABELS",
    "GapStudyResult",
    "format_p",
    "gap_study",
    "heldout_regression",
    "paper_table",
    "trim_top",
    "bootstrap_rhos",
    "bootstrap_rhos_loop",
    "paired_bootstrap",
    "paired_bootstrap_loop",
    "precision_at_top",
    "retrieval",
    "spearman",
    "top_labels",
    "auc_batch",
    "paired_retrieval_bootstrap",
    "v_zero_decomposition",
    "NORM_COLUMN",
    "add_holm",
    "holm",
    "partial_spearman",
    "size_control",
]
