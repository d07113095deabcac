"""gcpo_train: the GRPO/GCPO trainer (paper Section 3.4, Appendix E/F).

Importing the package does not import torch; the heavy modules load on use:
``from gcpo_train.trainer import GRPOTrainer``, ``from gcpo_train.config import load_config``,
``from gcpo_train.evaluate import evaluate``; CLI: ``python -m gcpo_train train --config ...``.
"""

from .config import TrainConfig, load_config

__all__ = ["TrainConfig", "load_config", "GRPOTrainer"]


def __getattr__(name):
    if name == "GRPOTrainer":
        from .trainer import GRPOTrainer

        return GRPOTrainer
    raise AttributeError(name)
