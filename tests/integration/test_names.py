"""Names that explain themselves (issue 19 item 7): the own loop is ``GCPOLoopTrainer`` (the old
name, TRL's ``GRPOTrainer``, warns), rollout containers say what they hold, one ``group_weights``."""

import ast
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = [p for pkg in ("gcpo_analysis", "gcpo_train") for p in sorted((ROOT / pkg).rglob("*.py"))]


def _defined(kind):
    """(name, file) of every class (kind=ast.ClassDef) or function defined in the packages."""
    for path in CODE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, kind):
                yield node.name, path.relative_to(ROOT).as_posix()


def test_no_class_of_ours_is_named_as_trl_names_its_trainer():
    classes = dict(_defined(ast.ClassDef))
    assert "GRPOTrainer" not in classes
    assert classes["GCPOLoopTrainer"] == "gcpo_train/trainer.py"


def test_the_old_trainer_name_warns_and_is_the_new_class():
    pytest.importorskip("torch")
    from gcpo_train import trainer

    with pytest.warns(FutureWarning, match=r"GCPOLoopTrainer.*0\.3\.0"):
        from gcpo_train.trainer import GRPOTrainer
    assert GRPOTrainer is trainer.GCPOLoopTrainer
    import gcpo_train

    with pytest.warns(FutureWarning, match="GCPOLoopTrainer"):
        assert gcpo_train.GRPOTrainer is trainer.GCPOLoopTrainer
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name is silent
        assert gcpo_train.GCPOLoopTrainer is trainer.GCPOLoopTrainer
    with pytest.raises(AttributeError):
        trainer.NoSuchTrainer  # noqa: B018


def test_the_reward_phase_is_named_reward():
    pytest.importorskip("torch")
    from gcpo_train.trainer import GCPOLoopTrainer

    assert hasattr(GCPOLoopTrainer, "_reward") and not hasattr(GCPOLoopTrainer, "_score")


def test_group_features_old_name_warns():
    from gcpo_analysis import measures
    from gcpo_analysis.measures import modulators

    with pytest.warns(FutureWarning, match=r"GroupFeatures.*0\.3\.0"):
        old = modulators.GroupRollouts
    assert old is modulators.GroupFeatures
    assert measures.GroupFeatures is modulators.GroupFeatures
    assert "GroupRollouts" not in measures.__all__ and "GroupFeatures" in measures.__all__


@pytest.mark.slow
def test_rollout_containers_have_distinct_names():
    classes = {name for name, _ in _defined(ast.ClassDef)}
    assert {"GroupFeatures", "StepRollouts", "TokenBatch"} <= classes
    assert not {"GroupRollouts", "Rollouts", "GroupBatch"} & classes


def test_one_group_weights():
    assert [f for n, f in _defined((ast.FunctionDef, ast.AsyncFunctionDef)) if n == "group_weights"] == [
        "gcpo_train/trl.py"
    ]
