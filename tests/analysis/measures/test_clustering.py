"""Greedy entailment clustering (Appendix E) with hand-written fake judges."""

import hashlib

import numpy as np
import pytest

from gcpo_analysis.measures.clustering import (
    all_pairs_clusters,
    batched_greedy_clusters,
    greedy_nli_clusters,
)


class TableJudge:
    """p(premise -> hypothesis) from a hand-written table (default 0); records every call."""

    name = "table"

    def __init__(self, table=None, default=0.0):
        self.table, self.default = dict(table or {}), default
        self.calls = []

    def entailment(self, premises, hypotheses):
        pairs = list(zip(premises, hypotheses))
        self.calls.append(pairs)
        return np.array([self.table.get(p, self.default) for p in pairs])

    def describe(self):
        return {"kind": "table"}

    @property
    def pairs(self):
        return [p for call in self.calls for p in call]


class HashJudge(TableJudge):
    """A deterministic pseudo-random p(a -> b) in [0, 1), asymmetric."""

    def entailment(self, premises, hypotheses):
        pairs = list(zip(premises, hypotheses))
        self.calls.append(pairs)
        return np.array([int(hashlib.sha256(f"{a}\x00{b}".encode()).hexdigest()[:8], 16) / 2**32 for a, b in pairs])


def test_order_dependence():
    # A~B and B~C (both directions) but not A~C.
    t = {("A", "B"): 0.9, ("B", "A"): 0.9, ("B", "C"): 0.9, ("C", "B"): 0.9, ("A", "C"): 0.1, ("C", "A"): 0.1}
    # [A, B, C]: B joins A's cluster; C is compared with the representative A only -> new cluster.
    np.testing.assert_array_equal(greedy_nli_clusters(["A", "B", "C"], TableJudge(t)), [0, 0, 1])
    # [B, A, C]: representative B entails both -> a single cluster.
    np.testing.assert_array_equal(greedy_nli_clusters(["B", "A", "C"], TableJudge(t)), [0, 0, 0])


def test_premise_is_representative_argmax_and_threshold():
    j = TableJudge({("A", "B"): 0.1, ("B", "A"): 0.9, ("A", "C"): 0.5, ("B", "C"): 0.8, ("A", "D"): 0.35})
    labels = greedy_nli_clusters(["A", "B", "C", "D"], j)
    # B: p(A->B)=0.1 < 0.35 -> new; C: max(0.5, 0.8) -> cluster of B; D: exactly 0.35 joins A.
    np.testing.assert_array_equal(labels, [0, 1, 1, 0])
    batched, _ = batched_greedy_clusters([["A", "B", "C", "D"], ["D", "A"]], TableJudge(j.table))
    assert [b.tolist() for b in batched] == [[0, 1, 1, 0], [0, 1]]
    assert j.calls[0] == [("A", "B")]  # premise = representative, hypothesis = new response
    assert j.calls[1] == [("A", "C"), ("B", "C")]
    assert greedy_nli_clusters(["A", "D"], TableJudge({("A", "D"): 0.35}), threshold=0.36).tolist() == [0, 1]
    # ties go to the earliest cluster
    tie = TableJudge({("A", "B"): 0.0, ("A", "C"): 0.6, ("B", "C"): 0.6})
    assert greedy_nli_clusters(["A", "B", "C"], tie).tolist() == [0, 1, 0]


def test_identical_strings_never_reach_the_judge():
    j = TableJudge(default=0.0)
    labels = greedy_nli_clusters(["x", "x", "y", "x", "y", "z", "y"], j)
    np.testing.assert_array_equal(labels, [0, 0, 1, 0, 1, 2, 1])
    assert all(a != b for a, b in j.pairs)
    assert sorted(j.pairs) == [("x", "y"), ("x", "z"), ("y", "z")]
    jb = TableJudge(default=0.0)
    out, stats = batched_greedy_clusters([["x", "x", "y", "x"], ["q", "q", "q"], ["y", "x", "y"]], jb)
    assert [o.tolist() for o in out] == [[0, 0, 1, 0], [0, 0, 0], [0, 1, 0]]
    assert all(a != b for a, b in jb.pairs)
    assert stats["repeats_skipped"] == 5 and stats["judge_calls"] == len(jb.calls) == 2
    # ("x","y") and ("y","x") are different pairs; nothing is scored twice
    assert len(jb.pairs) == len(set(jb.pairs)) == stats["pairs_scored"] == 2


def test_batched_equals_per_group_on_random_groups():
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(12)]
    for threshold in (0.2, 0.35, 0.7):
        groups = [[str(rng.choice(vocab)) for _ in range(int(rng.integers(0, 17)))] for _ in range(60)]
        judge = HashJudge()
        out, stats = batched_greedy_clusters(groups, judge, threshold=threshold)
        for g, labels in zip(groups, out):
            np.testing.assert_array_equal(labels, greedy_nli_clusters(g, HashJudge(), threshold=threshold))
            if len(labels):  # labels open in order 0..K-1
                assert labels[0] == 0 and (np.diff(np.maximum.accumulate(labels)) <= 1).all()
        assert stats["judge_calls"] == len(judge.calls) <= 15
        assert stats["pairs_scored"] == len(judge.pairs) == len(set(judge.pairs))
        assert stats["pairs_scored"] <= stats["pairs_requested"]
        assert all(a != b for a, b in judge.pairs)


def test_all_pairs_needs_bidirectional_entailment():
    t = {("A", "B"): 0.9, ("B", "A"): 0.1}
    assert greedy_nli_clusters(["A", "B"], TableJudge(t)).tolist() == [0, 0]
    labels, n = all_pairs_clusters(["A", "B", "A"], TableJudge(t))
    assert labels.tolist() == [0, 1, 0] and n == 2
    both = {("A", "B"): 0.9, ("B", "A"): 0.9}
    labels, n = all_pairs_clusters(["A", "B", "C", "C"], TableJudge(both))
    assert labels.tolist() == [0, 0, 1, 1] and n == 3 * 2


def test_bad_input_and_bad_judge():
    with pytest.raises(ValueError, match="not str"):
        greedy_nli_clusters(["a", 3], TableJudge())
    with pytest.raises(ValueError, match="single string"):
        greedy_nli_clusters("abc", TableJudge())
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        greedy_nli_clusters(["a", "b"], TableJudge(default=1.5))
    with pytest.raises(ValueError, match="threshold"):
        greedy_nli_clusters(["a", "b"], TableJudge(), threshold=2.0)
    assert greedy_nli_clusters([], TableJudge()).tolist() == []
    out, stats = batched_greedy_clusters([], TableJudge())
    assert out == [] and stats["judge_calls"] == 0
