"""A toy modulator in one file, as a user would add one (docs/guides/extending.md): a group weight
and its registration, nothing else. tests/analysis/measures/test_extending.py imports it."""

from gcpo_analysis.measures.modulators import register_modulator


@register_modulator("toy_half", source="toy: every group weighs one half")
def toy_half_weight(g, **_):
    """omega(q) = 1/2 for every group."""
    return 0.5, {"w_toy_half": 0.5}
