"""The flat layout's module paths keep working for one release (gcpo_analysis/_moved.py)."""

import importlib
import subprocess
import sys
import warnings

import pytest

from gcpo_analysis import _moved


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_an_old_path_is_the_new_module_with_a_future_warning(old):
    code = (
        f"import warnings, sys, importlib\nwarnings.simplefilter('error', FutureWarning)\nimport gcpo_analysis.{old}\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1 and "FutureWarning" in run.stderr and _moved.MOVED[old] in run.stderr
    assert _moved.REMOVED_IN in run.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        module = importlib.import_module(f"gcpo_analysis.{old}")
    assert module is importlib.import_module(_moved.MOVED[old])


@pytest.mark.slow
def test_the_warning_points_at_the_import_line(tmp_path):
    script = tmp_path / "user_code.py"
    script.write_text("import warnings\nwarnings.simplefilter('always')\nfrom gcpo_analysis import rank_stats\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert run.returncode == 0 and f"{script}:3: FutureWarning" in run.stderr, run.stderr


def test_the_split_lipschitz_module_holds_both_halves():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        old = importlib.import_module("gcpo_analysis.lipschitz")
    from gcpo_analysis.stats import lipschitz as stats_half
    from gcpo_analysis.study import lipschitz as study_half

    assert old.write_lipschitz is study_half.write_lipschitz
    public = [n for n in vars(stats_half) if not n.startswith("_") and callable(getattr(stats_half, n))]
    assert public and all(getattr(old, n) is getattr(stats_half, n) for n in public)


def test_no_file_stands_at_an_old_path_and_unknown_names_still_fail():
    from pathlib import Path

    import gcpo_analysis

    root = Path(gcpo_analysis.__file__).parent
    assert not [old for old in [*_moved.MOVED, *_moved.SPLIT] if (root / f"{old}.py").exists()]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("gcpo_analysis.no_such_module")
