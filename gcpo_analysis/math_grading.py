"""Moved to gcpo_analysis.rewards.math.grading (this path is removed in gcpo 0.3.0)."""

from ._moved import alias

alias(__name__, "gcpo_analysis.rewards.math.grading")
