"""Moved to gcpo_analysis.stats.decomposition (this path is removed in gcpo 0.3.0)."""

from ._moved import alias

alias(__name__, "gcpo_analysis.stats.decomposition")
