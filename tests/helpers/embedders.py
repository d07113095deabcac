"""Model-free embedders for tests and the helper scripts they launch (no network, no weights):
``HashEmbedder`` is the public one of ``gcpo_analysis.checks`` (the conformance checks use it)."""

from gcpo_analysis.checks import HashEmbedder

__all__ = ["HashEmbedder"]
