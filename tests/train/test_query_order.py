"""The per-step query draw (gcpo_train.evaluation.splits.query_indices): an endless stream of per-epoch
permutations read in steps of queries_per_step. A step that crosses an epoch boundary used to be
able to draw one query twice (query_indices(5, 0, 4, 2) was [1, 1]), which killed a run at that
step's end (duplicate (query_id, rollout_id)) or merged two groups into one of 2G."""

import numpy as np
import pytest

from gcpo_train.evaluation.splits import query_indices


def _raw(n, seed, start, count):
    """The stream before the crossing-step rule, by the naive formula."""
    return [int(np.random.default_rng([seed, k // n]).permutation(n)[k % n]) for k in range(start, start + count)]


def test_the_probe_case_no_longer_repeats():
    assert _raw(5, 0, 4, 2) == [1, 1]  # the defect, by the naive formula
    step = query_indices(5, 0, 4, 2)
    assert len(set(step.tolist())) == 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_step_repeats_a_query_and_every_epoch_is_a_permutation(seed):
    for n in range(1, 24):
        for count in range(1, n + 1):
            steps = [query_indices(n, seed, s * count, count).tolist() for s in range(4 * n // count + 3)]
            assert all(len(set(step)) == len(step) for step in steps), (n, count)
            stream = [q for step in steps for q in step]
            for e in range(len(stream) // n):
                assert sorted(stream[e * n : (e + 1) * n]) == list(range(n)), (n, count, e)


def test_a_stream_without_a_repeat_is_unchanged():
    """Runs that never hit a repeat (every committed run) draw exactly what they drew before."""
    n, count = 2613, 2  # the step at 2612 crosses into epoch 1 with no repeat: drawn as before
    for start in (0, 2, 2610, 2612, 5224):
        assert query_indices(n, 0, start, count).tolist() == _raw(n, 0, start, count)
    n, count = 10, 4  # crossing steps whose raw draw happens to have no repeat are kept as drawn
    for s in range(30):
        raw = _raw(n, 3, s * count, count)
        if all(len(set(_raw(n, 3, t * count, count))) == count for t in range(s + 1)):
            assert query_indices(n, 3, s * count, count).tolist() == raw


def test_more_queries_a_step_than_queries_is_refused_by_name():
    with pytest.raises(ValueError, match="queries_per_step must be in \\[1, 3\\]"):
        query_indices(3, 0, 0, 4)
