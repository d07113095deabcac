"""Names that explain themselves: the own loop is ``GCPOLoopTrainer`` (the old
name, TRL's ``GRPOTrainer``, warns), rollout containers say what they hold, one ``group_weights``."""

import ast
from pathlib import Path

import pytest
from helpers.source_trees import parsed

ROOT = Path(__file__).resolve().parents[2]
CODE = [p for pkg in ("gcpo_analysis", "gcpo_train") for p in sorted((ROOT / pkg).rglob("*.py"))]


def _defined(kind):
    """(name, file) of every class (kind=ast.ClassDef) or function defined in the packages."""
    for path in CODE:
        for node in ast.walk(parsed(path)):
            if isinstance(node, kind):
                yield node.name, path.relative_to(ROOT).as_posix()


def test_no_class_of_ours_is_named_as_trl_names_its_trainer():
    classes = dict(_defined(ast.ClassDef))
    assert "GRPOTrainer" not in classes
    assert classes["GCPOLoopTrainer"] == "gcpo_train/loop/trainer.py"


def test_the_old_trainer_name_is_gone():
    pytest.importorskip("torch")
    import gcpo_train
    from gcpo_train.loop import trainer

    with pytest.raises(AttributeError):
        trainer.GRPOTrainer  # noqa: B018
    with pytest.raises(AttributeError):
        gcpo_train.GRPOTrainer  # noqa: B018
    assert gcpo_train.GCPOLoopTrainer is trainer.GCPOLoopTrainer


def test_the_reward_phase_is_named_reward():
    pytest.importorskip("torch")
    from gcpo_train.loop.trainer import GCPOLoopTrainer

    assert hasattr(GCPOLoopTrainer, "_reward") and not hasattr(GCPOLoopTrainer, "_score")


@pytest.mark.slow
def test_rollout_containers_have_distinct_names():
    classes = {name for name, _ in _defined(ast.ClassDef)}
    assert {"GroupFeatures", "StepRollouts", "TokenBatch"} <= classes
    assert not {"GroupRollouts", "Rollouts", "GroupBatch"} & classes


def test_one_group_weights():
    assert [f for n, f in _defined((ast.FunctionDef, ast.AsyncFunctionDef)) if n == "group_weights"] == [
        "gcpo_train/trl/__init__.py"
    ]
