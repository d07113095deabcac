"""Task rewards and evaluation metrics (paper Appendix E, Table "Per-task reward definitions";
docs/conventions.md "Rewards"): the entry point for scoring completions.

Rewards live on [0, 2]:

* NarrativeQA, Qasper (task ``qa_f1``): r = 2 · max_ref token-F1(extracted answer, ref);
* HotpotQA (task ``hotpot``): r = 2 · F1 of the official HotpotQA evaluation (EM reported too);
* MATH500, AIME24, OlympiadBench, ASDiv (task ``math``): r = 2 if the extracted answer is
  equivalent to the reference, else 0.

Each dataset names its task where it is registered (``gcpo_analysis.datasets``);
``dataset_reward`` scores a completion of a dataset by that task's reward (``REWARD_OF_TASK``).

Token-F1 / EM follow the SQuAD evaluation script (normalisation: Unicode NFKC, lower-case, strip
punctuation and the articles a/an/the, collapse whitespace). BLEU is sacrebleu. Answer extraction lives in
``gcpo_analysis.rewards.extraction``, math equivalence in ``gcpo_analysis.rewards.math.grading`` (with its
syntax check ``math_syntax`` and its time-limited sympy worker ``sympy_worker``); their public
names are importable from here as before.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence

from ..datasets import get_dataset
from ..vocab import REWARD_MAX, TASKS
from .extraction import extract_math_answer, extract_qa_answer
from .math.grading import math_equiv_any


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")


def _as_refs(references, what: str = "references") -> list[str]:
    if isinstance(references, str):
        return [references]
    if references is None:
        raise ValueError(f"{what} is None")
    try:
        refs = list(references)
    except TypeError:
        raise ValueError(f"{what} must be a string or a list of strings, got {type(references).__name__}") from None
    if not refs:
        raise ValueError(f"{what} is empty")
    for r in refs:
        if not isinstance(r, str):
            raise ValueError(f"{what} must be strings, got {type(r).__name__}: {r!r}")
    return refs


# ----------------------------------------------------------------------------- SQuAD metrics
_PUNCT = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD answer normalisation: lower-case, drop punctuation, drop articles (a, an, the),
    collapse whitespace (Rajpurkar et al. 2016, official v1.1/v2.0 evaluation script), after
    Unicode NFKC, so one word in two normal forms ("café" composed or as e + U+0301, the "ﬁ"
    ligature) is one token; the SQuAD script itself compares code points as given."""
    s = unicodedata.normalize("NFKC", s)
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _f1_single(prediction: str, reference: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not pred or not gold:  # SQuAD v2.0 rule: both empty -> 1, one empty -> 0
        return float(pred == gold)
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, references) -> float:
    """max_ref F1(pred, ref), F1 = 2PR/(P+R) over the multiset overlap of normalised tokens
    (SQuAD script; paper Appendix E: NarrativeQA/Qasper reward = 2 × this).

    ``references`` is a string or a non-empty list of strings. An empty normalised prediction
    and an empty normalised reference give 1, one of them empty gives 0 (SQuAD v2.0)."""
    return max(_f1_single(prediction, r) for r in _as_refs(references))


def exact_match(prediction: str, references) -> float:
    """max_ref 1[normalize_answer(pred) == normalize_answer(ref)] (SQuAD script)."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(r) for r in _as_refs(references)))


def qa_accuracy(prediction: str, references) -> float:
    """Accuracy for QA (paper §5 "Benchmarks"): 1 if max token-F1 > 0.5 else 0."""
    return float(token_f1(prediction, references) > 0.5)


def bleu(prediction: str, references) -> float:
    """Sentence BLEU on 0–100 with sacrebleu: ``BLEU(effective_order=True)`` i.e. 13a
    tokenizer, mixed case, 'exp' smoothing, effective n-gram order (sacrebleu's
    ``sentence_bleu`` defaults); multiple references allowed (paper Table 1 "BLEU")."""
    from sacrebleu.metrics import BLEU

    return float(BLEU(effective_order=True).sentence_score(prediction, _as_refs(references)).score)


def corpus_bleu(predictions: Sequence[str], references_list: Sequence) -> float:
    """Corpus BLEU on 0–100 (sacrebleu defaults: 13a, no smoothing) for evaluation tables.

    references_list[i] holds the references (str or list) of predictions[i]; items may have
    different numbers of references (sacrebleu accepts missing references as None)."""
    from sacrebleu.metrics import BLEU

    if len(predictions) != len(references_list):
        raise ValueError(f"{len(predictions)} predictions but {len(references_list)} reference sets")
    refs = [_as_refs(r, f"references[{i}]") for i, r in enumerate(references_list)]
    width = max((len(r) for r in refs), default=0)
    streams = [[r[k] if k < len(r) else None for r in refs] for k in range(width)]
    # sacrebleu takes None for a missing reference (sets of different sizes); its hint says str
    return float(BLEU().corpus_score(list(predictions), streams).score)  # type: ignore[arg-type]


def hotpot_f1_em(prediction: str, gold) -> tuple[float, float]:
    """(F1, EM) of the official HotpotQA evaluation (Yang et al. 2018, ``hotpot_evaluate_v1``):
    SQuAD F1/EM, except that if either normalised string is one of yes/no/noanswer and the
    two differ, F1 = 0. A list of golds takes the max of each."""
    best_f1, best_em = 0.0, 0.0
    for g in _as_refs(gold, "gold"):
        p, n = normalize_answer(prediction), normalize_answer(g)
        em = float(p == n)
        special = {"yes", "no", "noanswer"}
        f1 = 0.0 if (p in special or n in special) and p != n else _f1_single(prediction, g)
        best_f1, best_em = max(best_f1, f1), max(best_em, em)
    return best_f1, best_em


# ----------------------------------------------------------------------------- extraction
def extract_answer(completion: str, task: str):
    """Dispatch: ``qa_f1``/``hotpot`` → extract_qa_answer, ``math`` → extract_math_answer."""
    _check_task(task)
    return extract_math_answer(completion) if task == "math" else extract_qa_answer(completion)


# ----------------------------------------------------------------------------- rewards
def qa_reward(completion: str, references) -> float:
    """r = 2 · max_ref token-F1(extract_qa_answer(completion), ref) ∈ [0, 2] (Appendix E,
    NarrativeQA and Qasper)."""
    return REWARD_MAX * token_f1(extract_qa_answer(completion), references)


def hotpot_reward(completion: str, references) -> float:
    """r = 2 · F1 of hotpot_f1_em(extract_qa_answer(completion), gold) ∈ [0, 2] (Appendix E)."""
    return REWARD_MAX * hotpot_f1_em(extract_qa_answer(completion), references)[0]


def math_reward(completion: str, reference) -> float:
    """r = 2 if math_equiv(extract_math_answer(completion), reference) else 0 (Appendix E,
    MATH500 / AIME24 / OlympiadBench). A list reference matches if any element does; the
    references share one sympy time budget (``math_equiv_any``)."""
    return REWARD_MAX * float(math_equiv_any(extract_math_answer(completion), _as_refs(reference, "reference")))


REWARD_OF_TASK = {"qa_f1": qa_reward, "hotpot": hotpot_reward, "math": math_reward}
"""The reward of each task of ``TASKS`` (the dataset registry's task names)."""


def task_reward(task: str, completion: str, references) -> float:
    """Reward of one completion for ``task`` ∈ {qa_f1, hotpot, math}; always in [0, 2]."""
    _check_task(task)
    return REWARD_OF_TASK[task](completion, references)


def dataset_reward(dataset: str, completion: str, references) -> float:
    """Reward of one completion of a registered ``dataset``: the reward of its task."""
    return task_reward(get_dataset(dataset).task, completion, references)


def is_success(task: str, reward: float) -> bool:
    """Success of a rollout: QA/hotpot F1 > 0.5 ⇔ reward > 1.0; math reward == 2."""
    _check_task(task)
    if reward is None or not math.isfinite(float(reward)) or not 0.0 <= reward <= REWARD_MAX:
        raise ValueError(f"reward {reward!r} is not a number in [0, {REWARD_MAX}]")
    return reward == REWARD_MAX if task == "math" else reward > REWARD_MAX / 2


def task_metrics(task: str, predictions: Sequence[str], references_list: Sequence, extract: bool = False) -> dict:
    """Evaluation metrics over a test set (paper Tables 1–3): qa_f1 → {Acc (F1 > 0.5), BLEU
    (corpus), F1} in percent; hotpot → {F1, EM} in percent (official HotpotQA); math →
    {accuracy} in percent; plus n. ``predictions`` are extracted answers (``extract_answer``
    output, None/"" for none); ``extract=True`` takes raw completions and extracts them here
    (re-extracting an extracted math answer would be wrong: "\\frac{1}{2}" → last number "2")."""
    _check_task(task)
    if len(predictions) != len(references_list):
        raise ValueError(f"{len(predictions)} predictions but {len(references_list)} reference sets")
    if not predictions:
        raise ValueError("task_metrics needs at least one prediction")
    answers = [extract_answer(p, task) if extract else p for p in predictions]
    answers = [a if a is not None else "" for a in answers]
    n = len(answers)
    if task == "qa_f1":
        f1 = [token_f1(a, r) for a, r in zip(answers, references_list)]
        return {
            "Acc": 100.0 * sum(x > 0.5 for x in f1) / n,
            "BLEU": corpus_bleu(answers, references_list),
            "F1": 100.0 * sum(f1) / n,
            "n": n,
        }
    if task == "hotpot":
        scores = [hotpot_f1_em(a, r) for a, r in zip(answers, references_list)]
        return {"F1": 100.0 * sum(s[0] for s in scores) / n, "EM": 100.0 * sum(s[1] for s in scores) / n, "n": n}
    hits = [math_equiv_any(a, _as_refs(refs)) for a, refs in zip(answers, references_list)]
    return {"accuracy": 100.0 * sum(hits) / n, "n": n}
