"""gcpo_train: the GRPO/GCPO trainer (paper Section 3.4, Appendix E/F).

Importing the package does not import torch; the heavy modules load on use:
``from gcpo_train.loop.trainer import GCPOLoopTrainer`` (the own loop), ``from gcpo_train.trl import
GCPOTrainer`` (on TRL's GRPOTrainer), ``from gcpo_train.config import load_config``,
``from gcpo_train.evaluation.evaluate import evaluate``; CLI: ``python -m gcpo_train train --config ...``.
"""

from gcpo_train.config import TrainConfig, load_config

__all__ = ["TrainConfig", "load_config", "GCPOLoopTrainer"]


def __getattr__(name):
    if name == "GCPOLoopTrainer":
        from gcpo_train.loop.trainer import GCPOLoopTrainer

        return GCPOLoopTrainer
    raise AttributeError(name)
