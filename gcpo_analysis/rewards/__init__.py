"""Task rewards and evaluation metrics (paper Appendix E, Table "Per-task reward definitions";
docs/conventions.md "Rewards"): the one public entry point of the rewards layer.

Rewards live on [0, 2] (``vocab.REWARD_MAX``); the task of each dataset is declared where it is
registered (``gcpo_analysis.datasets``), ``dataset_reward`` scores a completion by it.

* ``qa``: token-F1 / EM (the SQuAD script's normalisation), HotpotQA F1, BLEU (sacrebleu), the
  per-task reward and metrics;
* ``extraction``: the answer a completion gives (QA span, ``\\boxed{}``, ``<think>`` stripped);
* ``math``: equivalence of math answers (``math.grading``), its syntax guard (``math.syntax``),
  the time-limited sympy worker (``math.sympy_worker``, ``math.sympy_check``).
"""

from ..datasets import task_of_dataset
from ..vocab import REWARD_MAX, TASKS
from .extraction import extract_boxed, extract_math_answer, extract_qa_answer, strip_think
from .math.grading import (
    FALLBACK_REASONS,
    MATH_TIME_BUDGET_S,
    clear_caches,
    math_equiv,
    math_equiv_any,
    math_fallbacks,
)
from .math.normalize import normalize_math_answer
from .math.syntax import (
    MAX_BITS,
    MAX_DEPTH,
    MAX_EXPANDED_TERMS,
    MAX_EXPONENT,
    MAX_MATH_CHARS,
    MAX_NODES,
    MAX_ROOT_BITS,
    MAX_SYMBOLIC_EXPONENT,
)
from .qa import (
    REWARD_OF_TASK,
    bleu,
    corpus_bleu,
    dataset_reward,
    exact_match,
    extract_answer,
    hotpot_f1_em,
    hotpot_reward,
    is_success,
    math_reward,
    normalize_answer,
    qa_accuracy,
    qa_reward,
    task_metrics,
    task_reward,
    token_f1,
)

__all__ = [
    "REWARD_MAX",
    "REWARD_OF_TASK",
    "TASK_OF_DATASET",
    "TASKS",
    "extract_boxed",
    "extract_math_answer",
    "extract_qa_answer",
    "strip_think",
    "FALLBACK_REASONS",
    "MATH_TIME_BUDGET_S",
    "clear_caches",
    "math_equiv",
    "math_equiv_any",
    "math_fallbacks",
    "normalize_math_answer",
    "MAX_BITS",
    "MAX_DEPTH",
    "MAX_EXPANDED_TERMS",
    "MAX_EXPONENT",
    "MAX_MATH_CHARS",
    "MAX_NODES",
    "MAX_ROOT_BITS",
    "MAX_SYMBOLIC_EXPONENT",
    "bleu",
    "corpus_bleu",
    "dataset_reward",
    "exact_match",
    "extract_answer",
    "hotpot_f1_em",
    "hotpot_reward",
    "is_success",
    "math_reward",
    "normalize_answer",
    "qa_accuracy",
    "qa_reward",
    "task_metrics",
    "task_reward",
    "token_f1",
]


def __getattr__(name: str):
    """``TASK_OF_DATASET``: {dataset: reward task}, read from the dataset registry when asked for."""
    if name == "TASK_OF_DATASET":
        return task_of_dataset()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
