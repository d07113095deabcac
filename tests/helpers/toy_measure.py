"""A toy measure in one file, as a user would add one (docs/guides/extending.md): the formula and
its registration, nothing else. tests/analysis/measures/test_extending.py imports it."""

import numpy as np

from gcpo_analysis.measures.registry import register_measure


@register_measure("toy_range", label="Range", rewards=True, source="toy: the reward range over the declared range")
def toy_range_values(groups, r_min, r_max):
    """(max r - min r) / (r_max - r_min) of each group."""
    r = np.stack([g.rewards for g in groups])
    return (r.max(axis=1) - r.min(axis=1)) / (r_max - r_min)
