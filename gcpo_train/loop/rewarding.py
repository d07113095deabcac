"""The reward phase of a step (``GCPOLoopTrainer._reward``): each rollout's task reward and
extracted answer. One rollout whose reward function raises must not end a long run: it gets
reward 0, a warning and a mark in ``reward_failed``; a reward function that returns a bool is
refused at once (a success flag is not a reward)."""

from __future__ import annotations

import warnings

import numpy as np

from gcpo_train.loop.step_data import StepRollouts


def reward_rollouts(rollouts: StepRollouts, reward_fn, group_size: int) -> None:
    """Task rewards and extracted answers of every rollout. A rollout whose reward function
    raises gets reward 0, a warning, and a mark in ``reward_failed``."""
    from gcpo_analysis.rewards import extract_answer, math_fallbacks

    G, before = group_size, sum(math_fallbacks().values())
    rewards, answers, failed = [], [], []
    for j, text in enumerate(rollouts.batch.texts):
        query = rollouts.queries.iloc[j // G]
        answers.append(extract_answer(text, query["task"]) or "")
        value = None
        try:
            value = reward_fn(query["task"], text, list(query["references"]))
            if not isinstance(value, (bool, np.bool_)):
                reward, ok = float(value), True
        except Exception as err:  # one bad rollout must not kill a 2000-step run
            warnings.warn(
                f"reward function raised on query {query['query_id']!r} rollout {j % G}: "
                f"{type(err).__name__}: {err}; reward set to 0",
                RuntimeWarning,
                stacklevel=2,
            )
            reward, ok = 0.0, False
        if isinstance(value, (bool, np.bool_)):  # a success flag, not a bad rollout: stop at step 1
            raise TypeError(
                f"the reward function returned {value!r} for query {query['query_id']!r} rollout {j % G}: "
                "rewards are numbers (return 1.0 and 0.0 if True and False are meant as rewards)"
            )
        rewards.append(reward)
        failed.append(not ok)
    rollouts.rewards, rollouts.answers = np.asarray(rewards), answers
    rollouts.reward_failed = np.asarray(failed)
    # answers the math grader compared as strings (over a guard or its time limit), for the log
    rollouts.math_fallbacks = sum(math_fallbacks().values()) - before
