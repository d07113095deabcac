"""Entailment judges for semantic clustering (paper Appendix E; docs/conventions.md "Clustering").

A judge scores (premise, hypothesis) pairs with an entailment probability in [0, 1]:

    class Judge(Protocol):
        name: str
        def entailment(self, premises: list[str], hypotheses: list[str]) -> np.ndarray: ...
        def describe(self) -> dict: ...   # JSON-able: kind, model, settings

``describe()`` is stored with every output so a clustering can be traced to its judge.
The paper's judge is ``NLIJudge("roberta-large-mnli")``; the others run offline without an NLI
model: ``EmbeddingJudge`` (MiniLM cosine), ``LexicalJudge`` (SQuAD token-F1) and ``MathJudge``
(answer equivalence). ``make_judge`` turns a config string into a judge.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..models import require
from ..vocab import JUDGE
from .embed import make_embedder

DEFAULT_NLI = "roberta-large-mnli"
MNLI_ENTAILMENT_INDEX = 2
# Bare (org-less) hub names that are NLI models; any other bare word is a typo, not a model.
KNOWN_BARE_NLI = ("roberta-large-mnli", "roberta-base-mnli", "bart-large-mnli", "deberta-large-mnli")
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
JUDGE_CHOICES = ("nli", "nli:<hub-name-or-path>", "<org>/<nli-model>", "<local path>", "embedding", "lexical", "math")


@runtime_checkable
class Judge(Protocol):
    """What the clustering needs from an entailment scorer (one batched call per round)."""

    name: str

    def entailment(self, premises: list[str], hypotheses: list[str]) -> np.ndarray: ...

    def describe(self) -> dict: ...


def check_pairs(premises: Sequence[str], hypotheses: Sequence[str]) -> tuple[list[str], list[str]]:
    """Validate two equal-length lists of strings; ValueError names the offending pair."""
    if isinstance(premises, str) or isinstance(hypotheses, str):
        raise ValueError("premises and hypotheses must be lists of strings, not single strings")
    premises, hypotheses = list(premises), list(hypotheses)
    if len(premises) != len(hypotheses):
        raise ValueError(f"{len(premises)} premises but {len(hypotheses)} hypotheses: one of each per pair")
    for i, (p, h) in enumerate(zip(premises, hypotheses)):
        if not isinstance(p, str) or not isinstance(h, str):
            raise ValueError(f"pair {i} is ({p!r}, {h!r}); both must be str")
    return premises, hypotheses


# --------------------------------------------------------------------------- NLI
class NLIJudge:
    """P(entailment | premise, hypothesis) from a sequence-classification NLI model (App. E).

    p = softmax(logits)[e], e = the index whose ``config.id2label`` name is "entailment"
    (case-insensitive), else the MNLI convention e = 2 (warned and recorded in describe()).
    Pairs are tokenised as text pairs with truncation to ``max_length`` and scored in batches of
    ``batch_size`` (sorted by length so padding stays small; results come back in input order;
    padding is on the right whatever the tokenizer's default, because models with absolute
    positions such as BERT would read left padding as shifted text).
    ``model``: a hub name or local path, or an already-built model (with ``tokenizer=``), or a
    ``(model, tokenizer)`` tuple. torch/transformers are imported on first use. ``device`` None
    puts a model loaded by name on CUDA when available, and leaves a given model where it is.
    """

    def __init__(
        self,
        model: Any = DEFAULT_NLI,
        device: str | None = None,
        batch_size: int = 32,
        max_length: int = 256,
        tokenizer: Any = None,
    ) -> None:
        if isinstance(model, tuple):
            if len(model) != 2 or tokenizer is not None:
                raise ValueError("give NLIJudge either (model, tokenizer) or model= and tokenizer=")
            model, tokenizer = model
        if not isinstance(model, (str, Path)) and tokenizer is None:
            raise ValueError("an already-built NLI model needs its tokenizer: NLIJudge((model, tokenizer))")
        self.model_name = (
            str(model)
            if isinstance(model, (str, Path))
            else getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        )
        self._model = None if isinstance(model, (str, Path)) else model
        self._tokenizer = tokenizer
        self.device = device
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        self.name = f"nli:{self.model_name}"
        self.n_calls = 0
        self.n_pairs = 0
        self._entail_index: int | None = None
        self._index_source: str | None = None

    def _load(self):
        if self._entail_index is not None:
            return self._model, self._tokenizer
        if self._model is None:
            transformers = require("transformers")
            self._tokenizer = self._tokenizer or transformers.AutoTokenizer.from_pretrained(self.model_name)
            self._model = transformers.AutoModelForSequenceClassification.from_pretrained(self.model_name)
            if self.device is None:  # a model we load goes to the GPU when there is one
                self.device = "cuda" if require("torch").cuda.is_available() else "cpu"
        if self.device:
            self._model.to(self.device)
        self._model.eval()
        self._entail_index, self._index_source = entailment_index(self._model.config)
        return self._model, self._tokenizer

    @property
    def entailment_index(self) -> int:
        """The logit index read as "entailment" (loads the model)."""
        self._load()
        assert self._entail_index is not None  # _load sets it
        return self._entail_index

    def entailment(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        """Entailment probabilities, one per (premise, hypothesis) pair, float64 in [0, 1]."""
        premises, hypotheses = check_pairs(premises, hypotheses)
        out = np.zeros(len(premises))
        if not premises:
            return out
        torch = require("torch")
        model, tok = self._load()
        device = next(model.parameters()).device
        order = np.argsort([len(p) + len(h) for p, h in zip(premises, hypotheses)], kind="stable")
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                enc = tok(
                    [premises[i] for i in idx],
                    [hypotheses[i] for i in idx],
                    truncation=True,
                    max_length=self.max_length,
                    padding=True,
                    padding_side="right",
                    return_tensors="pt",
                )
                enc = {k: v.to(device) for k, v in enc.items() if k in _MODEL_INPUTS}
                probs = torch.softmax(model(**enc).logits.float(), dim=-1)[:, self._entail_index]
                out[idx] = probs.cpu().numpy()
        self.n_calls += 1
        self.n_pairs += len(premises)
        return out

    def describe(self) -> dict:
        return {
            "kind": "nli",
            "model": self.model_name,
            "device": self.device,
            "batch_size": self.batch_size,
            "max_length": self.max_length,
            "entailment_index": self._entail_index,
            "entailment_index_source": self._index_source,
        }


def entailment_index(config: Any) -> tuple[int, str]:
    """(index, source) of the entailment class: the label named "entailment", else 2 (App. E)."""
    id2label = getattr(config, "id2label", None) or {}
    for idx, label in id2label.items():
        if str(label).strip().lower() == "entailment":
            return int(idx), "id2label"
    n = int(getattr(config, "num_labels", len(id2label)) or 0)
    if n <= MNLI_ENTAILMENT_INDEX:
        raise ValueError(
            f"NLI model has {n} labels {id2label} and none named 'entailment'; cannot use the MNLI index 2"
        )
    warnings.warn(f"NLI model labels {id2label} have no 'entailment'; using the MNLI index 2 (App. E)", stacklevel=3)
    return MNLI_ENTAILMENT_INDEX, "mnli-default-2"


# --------------------------------------------------------------------------- embedding
class EmbeddingJudge:
    """Offline judge from answer-embedding cosine: p = clip((cos - low) / (high - low), 0, 1).

    Symmetric. With the defaults low = 0.6, high = 0.9 the clustering threshold 0.35 is crossed
    at cos = 0.705. Checked on the packaged MiniLM: paraphrases score cos 0.73-0.96 ("Paris" /
    "the city of Paris" 0.90, "1865" / "in 1865" 0.87, "He was killed by his brother." / "His
    brother killed him." 0.96, revenge-for-his-father paraphrase 0.73 -> p 0.43), unrelated
    answers 0.15-0.58 ("Paris" / "London" 0.58, "the ship sank" / "the war ended" 0.32) -> p 0.
    Known misses: "42" / "forty-two" 0.62 (p 0.08, split); "yes" / "no" 0.73 (p 0.44, merged):
    embeddings do not see polarity, which is why the paper uses an NLI model.
    """

    def __init__(self, embedder: Any = None, low: float = 0.6, high: float = 0.9, memo_size: int = 200_000) -> None:
        if not -1.0 <= low < high <= 1.0:
            raise ValueError(f"need -1 <= low < high <= 1, got low={low}, high={high}")
        self.embedder = make_embedder(embedder)
        self.low, self.high = float(low), float(high)
        self.memo_size = int(memo_size)
        # The clustering asks for the same representatives round after round; a text -> unit
        # vector memo (first-in first-out beyond memo_size) embeds each text once per judge.
        self._memo: dict[str, np.ndarray] = {}
        self.name = "embedding"
        self.n_calls = 0
        self.n_pairs = 0

    def _vectors(self, texts: list[str]) -> np.ndarray:
        todo = list(dict.fromkeys(t for t in texts if t not in self._memo))
        fresh = dict(zip(todo, self.embedder.encode(todo).astype(np.float64))) if todo else {}
        out = np.stack([self._memo[t] if t in self._memo else fresh[t] for t in texts])
        self._memo.update(fresh)
        if len(self._memo) > self.memo_size:
            for old in list(self._memo)[: len(self._memo) - self.memo_size]:
                del self._memo[old]
        return out

    def entailment(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        premises, hypotheses = check_pairs(premises, hypotheses)
        if not premises:
            return np.zeros(0)
        E = self._vectors(premises + hypotheses)
        n = len(premises)
        cos = np.einsum("nd,nd->n", E[:n], E[n:])
        self.n_calls += 1
        self.n_pairs += n
        return np.clip((cos - self.low) / (self.high - self.low), 0.0, 1.0)

    def describe(self) -> dict:
        return {
            "kind": "embedding",
            "model": self.embedder.describe()["model"],
            "map": "clip((cos - low) / (high - low), 0, 1)",
            "low": self.low,
            "high": self.high,
        }


# --------------------------------------------------------------------------- lexical / math
class _RuleJudge:
    """A judge from a symmetric rule on two answers, applied pair by pair (no model)."""

    name = ""
    rule = ""

    def __init__(self):
        self.n_calls = 0
        self.n_pairs = 0

    def _rule(self):
        raise NotImplementedError

    def entailment(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        premises, hypotheses = check_pairs(premises, hypotheses)
        score = self._rule()
        self.n_calls += 1
        self.n_pairs += len(premises)
        return np.array([float(score(p, h)) for p, h in zip(premises, hypotheses)], dtype=np.float64)

    def describe(self) -> dict:
        out = {"kind": self.name, "model": None, "score": self.rule}
        if getattr(self, "clusters_answers", False):
            out["clusters"] = "extracted answers"
        return out


class LexicalJudge(_RuleJudge):
    """Offline judge p = token-F1(premise, hypothesis) with SQuAD normalisation (symmetric).

    F1 = 2 |P ∩ H| / (|P| + |H|) over bags of tokens after lower-casing, removing punctuation
    and the articles a/an/the, and collapsing whitespace — the QA reward's F1 (docs/conventions.md,
    "Rewards"): ``gcpo_analysis.rewards.token_f1``. Two empty answers score 1, one empty 0.
    """

    name = "lexical"
    rule = "gcpo_analysis.rewards.token_f1"

    def _rule(self):
        from ..rewards import token_f1  # imported here: rewards is not needed by the NLI path

        return token_f1


class MathJudge(_RuleJudge):
    """Offline judge for math answers: p = 1 if the two answers are equivalent, else 0.

    Equivalence is ``gcpo_analysis.rewards.math_equiv``, the math reward's rule (docs/conventions.md).
    It compares final answers, never derivations (``clusters_answers``): ``prepare_groups`` hands
    it the extracted answers even where the full completions are embedded (Appendix E: math
    clusters by answer equivalence, embeds the completion).
    """

    name = "math"
    rule = "gcpo_analysis.rewards.math_equiv"
    clusters_answers = True

    def _rule(self):
        from ..rewards import math_equiv

        return math_equiv


# --------------------------------------------------------------------------- factory
def make_judge(spec=JUDGE, **kwargs):
    """Resolve a judge spec (default ``vocab.JUDGE``, the offline "embedding" judge).

    "embedding" | "lexical" | "math" -> the offline judges; "nli" -> NLIJudge(roberta-large-mnli);
    "nli:<name-or-path>" -> NLIJudge(name); a string containing "/" (a hub "org/model" or a
    path) or naming an existing path, or a known bare NLI hub name such as
    "roberta-large-mnli" -> NLIJudge of it (hub names are tried, for users with a network);
    an object with ``entailment`` and ``describe`` -> itself. Any other bare word is an error
    listing the choices (a typo must not turn into a hub download attempt).
    """
    if not isinstance(spec, (str, Path)):
        if isinstance(spec, Judge):
            return spec
        raise ValueError(
            f"{spec!r} is not a judge: it needs name, entailment(premises, hypotheses) "
            f"and describe(); or give one of {', '.join(JUDGE_CHOICES)}"
        )
    kind, name = parse_judge_spec(str(spec))
    if kind == "nli":
        return NLIJudge(name, **kwargs)
    return {"embedding": EmbeddingJudge, "lexical": LexicalJudge, "math": MathJudge}[kind](**kwargs)


def parse_judge_spec(spec: str) -> tuple[str, str | None]:
    """(kind, NLI model) of a judge spec, without building anything: the rules of ``make_judge``,
    which the configs' validation reads too (a typo is refused before any model loads)."""
    text = spec.strip()
    key = text.lower()
    if key in ("embedding", "lexical", "math"):
        return key, None
    if key == "nli":
        return "nli", DEFAULT_NLI
    if key.startswith("nli:"):
        name = text[4:].strip()
        if not name:
            raise ValueError("'nli:' needs a model name or path after the colon")
        return "nli", name
    if "/" in text or Path(text).exists() or key in KNOWN_BARE_NLI:
        return "nli", text
    raise ValueError(
        f"unknown judge {text!r}; choose one of: {', '.join(JUDGE_CHOICES)} "
        "(use 'nli:<name>' for an org-less hub NLI model)"
    )
