"""The flat layout's module paths of the unpublished 0.1.0 are gone: no shim, no import hook."""

import importlib
import sys

import pytest

import gcpo_analysis

OLD_FLAT_NAMES = ["collect", "decomposition", "lipschitz", "math_grading", "proofs", "rank_stats", "testing"]


@pytest.mark.parametrize("old", OLD_FLAT_NAMES)
def test_an_old_flat_path_is_not_importable(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"gcpo_analysis.{old}")


def test_importing_the_package_installs_no_import_hook():
    assert not [f for f in sys.meta_path if type(f).__module__.startswith("gcpo_analysis")]
    assert not hasattr(gcpo_analysis, "_moved")


def test_the_old_class_and_setting_names_are_gone():
    from gcpo_analysis import measures, vocab
    from gcpo_analysis.measures import modulators

    with pytest.raises(AttributeError):
        modulators.GroupRollouts  # noqa: B018
    with pytest.raises(AttributeError):
        measures.GroupRollouts  # noqa: B018
    assert not hasattr(vocab, "renamed_setting")
