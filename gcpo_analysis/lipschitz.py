"""Moved: the statistics to gcpo_analysis.stats.lipschitz, the study's writer to
gcpo_analysis.study.lipschitz (this path is removed in gcpo 0.3.0)."""

import warnings

from ._moved import REMOVED_IN

warnings.warn(
    "gcpo_analysis.lipschitz moved to gcpo_analysis.stats.lipschitz (statistics) and "
    f"gcpo_analysis.study.lipschitz (write_lipschitz); the old path is removed in gcpo {REMOVED_IN}",
    FutureWarning,
    stacklevel=2,
)
from .stats.lipschitz import *  # noqa: E402,F401,F403
from .study.lipschitz import lipschitz_study, to_markdown, write_lipschitz  # noqa: E402,F401
