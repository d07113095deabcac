"""gcpo_analysis: uncertainty measures for GRPO rollout groups and the gap study of
"Why Semantic Entropy Fails" (GCPO).

Importable with numpy, scipy and pandas alone; the parts that need torch, transformers or
sentence-transformers (embedding, NLI, gradient capture, collection) import them lazily.
Start with ``gcpo_analysis.measures`` (score rollout groups), ``gcpo_analysis.stats``
(the gap study), or the ``gcpo`` command.
"""

# The one source of the version: pyproject.toml reads it ([tool.setuptools.dynamic]).
__version__ = "0.2.0"
