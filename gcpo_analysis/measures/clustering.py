"""Greedy entailment clustering of a group's answers (paper Appendix E; docs/conventions.md "Clustering").

Rule (order-dependent, as in the paper): the first response opens cluster 0; each next response
h_i is scored against the representative (first member) rep_k of every open cluster with
(premise = rep_k, hypothesis = h_i); it joins argmax_k p_k if max_k p_k >= threshold (NLI_THRESHOLD, 0.35),
else opens a new cluster. A response identical to an earlier one joins that one's cluster with
no judge call. Labels are 0..K-1 in order of opening. Ties go to the earliest cluster.

``batched_greedy_clusters`` runs the same rule over many groups in lock-step: round i gathers
the pairs of every group's i-th response and sends one judge call, so an NLI model sees large
batches. ``all_pairs_clusters`` is the reference bidirectional-entailment method of Kuhn et al.
(2023) / lm-polygraph, kept only for the benchmark comparison.

Hand-written: no library implements this greedy representative rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..knob import check_value
from ..vocab import NLI_THRESHOLD
from .params import MEASURE_KNOBS

if TYPE_CHECKING:
    from .judges import Judge


def _scores(judge: Judge, premises: list[str], hypotheses: list[str]) -> np.ndarray:
    p = np.asarray(judge.entailment(premises, hypotheses), dtype=np.float64)
    if p.shape != (len(premises),):
        raise ValueError(f"judge {getattr(judge, 'name', judge)!r} returned shape {p.shape} for {len(premises)} pairs")
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"judge {getattr(judge, 'name', judge)!r} gave {p[i]!r} for pair {i} "
            f"({premises[i]!r}, {hypotheses[i]!r}); entailment probabilities must be in [0, 1]"
        )
    return p


def _check_group(texts: Sequence[str], where: str = "") -> list[str]:
    if isinstance(texts, str):
        raise ValueError(f"group{where} must be a list of strings, not a single string")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"response {i} of group{where} is {type(t).__name__} ({t!r}), not str")
    return texts


def _check_threshold(threshold: float) -> float:
    """The entailment threshold checked against its one declaration (``params.MEASURE_KNOBS``)."""
    return check_value("nli_threshold", threshold, MEASURE_KNOBS["nli_threshold"], float)


def greedy_nli_clusters(texts: Sequence[str], judge: Judge, threshold: float = NLI_THRESHOLD) -> np.ndarray:
    """Greedy representative clustering of one group (Appendix E). Returns int labels (G,).

    One judge call per response that is not a repeat (all open clusters' pairs at once).
    An empty group gives an empty array.
    """
    texts = _check_group(texts)
    threshold = _check_threshold(threshold)
    labels = np.zeros(len(texts), dtype=np.int64)
    reps: list[str] = []
    seen: dict[str, int] = {}
    for i, h in enumerate(texts):
        if h in seen:
            labels[i] = seen[h]
            continue
        k = len(reps)
        if reps:
            p = _scores(judge, reps, [h] * len(reps))
            best = int(np.argmax(p))
            if p[best] >= threshold:
                k = best
        if k == len(reps):
            reps.append(h)
        labels[i] = seen[h] = k
    return labels


def batched_greedy_clusters(
    groups: Sequence[Sequence[str]], judge: Judge, threshold: float = NLI_THRESHOLD, progress: bool = False
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The greedy rule over many groups, one judge call per round across all groups.

    Round i (i = 1 .. G_max - 1) collects (rep_k, h_i) for every open cluster k of every group
    whose i-th response is not a repeat of an earlier member's text; distinct pairs are scored
    once (a memo spans rounds, so a pair met in two groups is scored once). Rounds where every
    response is a repeat make no call. The result equals ``greedy_nli_clusters`` per group.

    Returns ``(labels, stats)``: one int array per group, and stats with judge_calls (batched
    calls made), pairs_requested (pairs the rule needed), pairs_scored (distinct pairs sent to
    the judge), repeats_skipped (responses placed by identity), groups, rounds.
    """
    groups = [_check_group(g, f" {q}") for q, g in enumerate(groups)]
    threshold = _check_threshold(threshold)
    labels = [np.zeros(len(g), dtype=np.int64) for g in groups]
    reps: list[list[str]] = [[g[0]] if g else [] for g in groups]
    seen: list[dict[str, int]] = [{g[0]: 0} if g else {} for g in groups]
    memo: dict[tuple[str, str], float] = {}
    stats = {
        "judge_calls": 0,
        "pairs_requested": 0,
        "pairs_scored": 0,
        "repeats_skipped": 0,
        "groups": len(groups),
        "rounds": 0,
    }
    g_max = max((len(g) for g in groups), default=0)
    rounds = range(1, g_max)
    if progress:
        from tqdm.auto import tqdm

        rounds = tqdm(rounds, desc="clustering rounds", unit="round")
    for i in rounds:
        pending = []  # groups whose i-th response needs the judge
        for q, g in enumerate(groups):
            if i >= len(g):
                continue
            h = g[i]
            if h in seen[q]:
                labels[q][i] = seen[q][h]
                stats["repeats_skipped"] += 1
            else:
                pending.append(q)
        todo = list(
            dict.fromkeys((rep, groups[q][i]) for q in pending for rep in reps[q] if (rep, groups[q][i]) not in memo)
        )
        if todo:
            p = _scores(judge, [a for a, _ in todo], [b for _, b in todo])
            memo.update(zip(todo, p.tolist()))
            stats["judge_calls"] += 1
            stats["pairs_scored"] += len(todo)
        stats["rounds"] += 1
        for q in pending:
            h = groups[q][i]
            p = np.array([memo[(rep, h)] for rep in reps[q]])
            stats["pairs_requested"] += len(p)
            best = int(np.argmax(p))
            k = best if p[best] >= threshold else len(reps[q])
            if k == len(reps[q]):
                reps[q].append(h)
            labels[q][i] = seen[q][h] = k
    return labels, stats


def all_pairs_clusters(texts: Sequence[str], judge: Judge, threshold: float = NLI_THRESHOLD) -> tuple[np.ndarray, int]:
    """Reference clustering by bidirectional entailment over all ordered pairs (benchmark only).

    As Kuhn et al. (2023) and lm-polygraph (``calculate_semantic_matrix`` +
    ``calculate_semantic_classes``) do: score every ordered pair of the group's U distinct texts
    in one call, then place each response in the first existing class whose first member m
    satisfies p(m -> h) >= threshold and p(h -> m) >= threshold, else open a new class.
    lm-polygraph scores all U^2 ordered pairs of distinct texts (diagonal included) and decides
    entailment by the argmax class; we skip the U diagonal pairs and use the same probability
    threshold as the greedy rule, so U(U-1) pairs are scored (240 for 16 distinct answers),
    where the greedy rule scores sum_i K_i <= U(U-1)/2 pairs, K_i the clusters open when
    distinct answer i arrives (15 when all answers agree).
    Returns ``(labels, n_pairs_scored)``.
    """
    texts = _check_group(texts)
    threshold = _check_threshold(threshold)
    uniq = list(dict.fromkeys(texts))
    pairs = [(a, b) for a in uniq for b in uniq if a != b]
    p = dict(zip(pairs, _scores(judge, [a for a, _ in pairs], [b for _, b in pairs]).tolist())) if pairs else {}
    labels = np.zeros(len(texts), dtype=np.int64)
    reps: list[str] = []
    seen: dict[str, int] = {}
    for i, h in enumerate(texts):
        if h not in seen:
            k = next((k for k, m in enumerate(reps) if p[(m, h)] >= threshold and p[(h, m)] >= threshold), len(reps))
            if k == len(reps):
                reps.append(h)
            seen[h] = k
        labels[i] = seen[h]
    return labels, len(pairs)
