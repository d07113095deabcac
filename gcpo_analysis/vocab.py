"""The shared vocabulary: every name and default that more than one module uses, defined once.

Benchmarks (paper Section 5): ``DATASETS``; the math ones (``MATH_DATASETS``) embed and cluster
the full completion (Appendix E); ``TASK_OF_DATASET`` gives each one's reward task (``TASKS``).
These are views of the dataset registry (``gcpo_analysis.datasets``), read when asked for, so a
dataset registered later is listed. The measures and their defaults are listed by their registry
(``gcpo_analysis.measures.registry``), nowhere else. What a measure or a
modulator needs computed for a group: ``EMBEDDINGS`` (the unit vectors mu_i) and ``CLUSTERS``
(the greedy entailment clusters) — the names of the ``GroupFeatures`` fields they fill.

Defaults of the paper (Appendix E): ``ALPHA_BASE`` = 0.6 in alpha_G = alpha_base / ln G;
``NLI_THRESHOLD`` = 0.35, the entailment probability at which a response joins a cluster;
rewards on [``R_MIN``, ``R_MAX``] = [0, 2]. The threshold's name is ``nli_threshold`` in every
setting (TrainConfig, GCPOConfig, StudyConfig, ``score_groups``, the CLI).

Plain Python, no imports beyond the standard library and the dataset registry (itself standard
library only): configs and the CLI read it for free.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from .datasets import TASKS as TASKS
from .datasets import dataset_names, math_datasets, task_of_dataset

_DATASET_VIEWS = {"DATASETS": dataset_names, "MATH_DATASETS": math_datasets, "TASK_OF_DATASET": task_of_dataset}


def __getattr__(name: str) -> Any:
    """``DATASETS``, ``MATH_DATASETS`` and ``TASK_OF_DATASET``, read from the dataset registry
    when asked for (``vocab.DATASETS``; a ``from ... import`` copies the list of that moment)."""
    if name in _DATASET_VIEWS:
        return _DATASET_VIEWS[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


EMBEDDINGS = "embeddings"
CLUSTERS = "clusters"

ALPHA_BASE = 0.6
NLI_THRESHOLD = 0.35
R_MIN, R_MAX = 0.0, 2.0
EPS = 1e-6  # eps in A_i = (r_i - mean r)/(std r + eps)

# --- One default per knob -------------------------------------------------------------------
# Every setting that TrainConfig, GCPOConfig (gcpo_train/trl/__init__.py), StudyConfig and `gcpo score`
# (score_groups) share takes its default from here. tests/analysis/test_vocab.py holds them to it.

JUDGE = "embedding"
"""The clustering judge: the offline MiniLM-similarity judge, the same for training, the study and
scoring (it needs no download, so every default run works offline). The paper clusters with NLI
(Appendix E): ``PAPER_JUDGE``, which the paper configs (configs/<dataset>/*.yaml) and the study's
"paper" preset name explicitly."""
PAPER_JUDGE = "nli:roberta-large-mnli"

USE_FULL_COMPLETION: bool | None = None
"""Embed and cluster the full completion (True) or the extracted answer (False). The default None
is "auto" (Appendix E): the full completion for the math datasets (``MATH_DATASETS``: a derivation
carries the answer, and extraction may miss it), the extracted answer for QA. Resolved by
``full_completion``; a caller that does not know the dataset (GCPOConfig, whose TRL dataset has no
name; a rollouts frame without a ``dataset`` column) resolves auto to the extracted answer."""

TRL_USE_FULL_COMPLETION = True
"""GCPOConfig's default differs, on purpose: under TRL the dataset has no name, so auto cannot tell
math from QA, and there the choice also picks the answer extractor (math: ``extract_math_answer``
for the math judge). It defaults to the full completion, the text every task has: the QA extractor
keeps one line of free text and would cut a derivation short. ``gcpo train --backend trl`` passes
TrainConfig's resolved value, so it follows auto."""

PACKAGED_POLICY = "packaged"
"""The alias of the packaged offline policy (SmolLM2-135M-Instruct GGUF), accepted wherever a
policy is named (``gcpo train/eval/study --model``); ``gcpo_analysis.models.resolve_policy`` is
the one resolver."""

TEMPERATURE = 0.9
"""The sampling temperature of training and of the study's rollouts (Appendix E). GCPOConfig keeps
TRL's own defaults for TRL's fields (temperature 1.0, seed 42, learning_rate 1e-6, beta 0): it is a
drop-in for ``trl.GRPOConfig``, and ``gcpo train --backend trl`` passes TrainConfig's values."""
SEED = 0
"""The seed of training, the study's sampling and bootstrap."""

# Scale, not meaning: TrainConfig defaults to the paper's training protocol (Appendix E: the policy
# PAPER_POLICY, G = 16, 256 new tokens, a 256-token passage; a GPU), the study to a run that fits 2
# CPU cores (the packaged policy, G = 8, 24 new tokens, a 64-token passage); the study's "paper"
# preset has the paper's values.
PAPER_POLICY = "Qwen/Qwen2.5-1.5B-Instruct"


def full_completion(setting: bool | None, datasets) -> bool:
    """``use_full_completion`` resolved: ``setting`` when given (True/False), else auto — True when
    every one of ``datasets`` (a name, an iterable of names, or None when unknown) is a math
    dataset, False otherwise (docs/conventions.md "Formulas", Embeddings)."""
    if setting is not None:
        return bool(setting)
    if datasets is None:
        return False
    names = {datasets} if isinstance(datasets, str) else set(datasets)
    return bool(names) and names <= set(math_datasets())  # an unknown or missing name (NaN) is not math


def field_kinds(cls: type) -> dict[str, type | None]:
    """The plain type of each field of the settings dataclass ``cls``, read with
    ``typing.get_type_hints`` (so string annotations of ``from __future__ import annotations`` are
    evaluated, not parsed): ``int | None`` gives ``int``, ``list[str] | None`` gives ``list``, and a
    field of more than one type besides None (``bool | str``) gives None, left to the caller's own
    check. The configs' type coercion (TrainConfig, the study's CLI) reads it."""
    hints = typing.get_type_hints(cls)
    kinds: dict[str, type | None] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = args[0] if len(args) == 1 else None
        kinds[f.name] = None if hint is None else (typing.get_origin(hint) or hint)
    return kinds


# Rewards live on [0, REWARD_MAX] (docs/conventions.md "Rewards").
REWARD_MAX = 2.0
