"""Test helpers: the random tiny models of ``gcpo_analysis.tiny_models`` under their old name."""

from .tiny_models import *  # noqa: F401,F403
from .tiny_models import tiny_causal_lm, tiny_tokenizer  # noqa: F401
