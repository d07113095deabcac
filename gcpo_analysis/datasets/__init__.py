"""The benchmarks, one registry (``registry``: ``register_dataset``, ``DATASET_REGISTRY``): the
reading-comprehension ones (``comprehension``) and the math ones (``math``), registered when this
package is imported. The loaders that read them are ``gcpo_analysis.data``. Standard library only."""

from . import comprehension, math
from .registry import (
    DATASET_REGISTRY,
    TASKS,
    Dataset,
    Example,
    dataset_names,
    get_dataset,
    math_datasets,
    register_dataset,
    task_of_dataset,
    unregister_dataset,
)

__all__ = [
    "DATASET_REGISTRY",
    "TASKS",
    "Dataset",
    "Example",
    "comprehension",
    "dataset_names",
    "get_dataset",
    "math",
    "math_datasets",
    "register_dataset",
    "task_of_dataset",
    "unregister_dataset",
]
