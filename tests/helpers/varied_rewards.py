"""Rewards that vary on a tiny random model (tests/analysis/study/): a random model never matches
a NarrativeQA reference, so every reward would be 0 and every gradient variance 0; a stable hash
of the completion gives rewards that vary, and the same ones on every run."""

import zlib
from contextlib import contextmanager

import pytest


def hashed_reward(task, completion, references):
    """A reward in {0, 0.5, 1, 1.5, 2}: the completion's CRC-32 modulo 5, on the task's 0..2 range."""
    return 2.0 * (zlib.crc32(completion.encode()) % 5) / 4


@contextmanager
def varied_rewards():
    """`gcpo_analysis.rewards.task_reward` replaced by :func:`hashed_reward` for the block."""
    from gcpo_analysis import rewards

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rewards, "task_reward", hashed_reward)
        yield
