"""Which queries a run sees: the train/test split of a benchmark and the per-step draw.

Its own module so that the trainer and the evaluator both import it and never each other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gcpo_train.config import TrainConfig


def query_indices(n_queries: int, seed: int, start: int, count: int) -> np.ndarray:
    """Positions start..start+count-1 of an endless stream of per-epoch permutations
    (permutation of epoch e drawn from default_rng([seed, e])), read in steps of ``count``
    (``start`` a multiple of it, as the trainer reads it).

    A step that crosses an epoch boundary could otherwise draw one query twice (once from the end
    of epoch e, once from the start of e + 1): there, the queries that the step took from the end
    of epoch e are moved, in order, past the step's share of epoch e + 1's permutation. Each epoch
    stays a permutation, and a stream with no such repeat is unchanged.
    """
    if not 1 <= count <= n_queries:
        raise ValueError(f"queries_per_step must be in [1, {n_queries}] (the training queries), got {count}")
    out = []
    for k in range(start, start + count):
        epoch, pos = divmod(k, n_queries)
        out.append(_epoch_permutation(n_queries, seed, count, epoch)[pos])
    return np.asarray(out, dtype=np.int64)


_PERMUTATIONS: dict[tuple[int, int, int], list[tuple[int, ...]]] = {}


def _epoch_permutation(n_queries: int, seed: int, block: int, epoch: int) -> tuple[int, ...]:
    """Epoch ``epoch``'s permutation after the crossing-step rule; each depends on the one before,
    so they are built in order once per (n_queries, seed, block) and kept."""
    perms = _PERMUTATIONS.setdefault((n_queries, seed, block), [])
    while len(perms) <= epoch:
        e = len(perms)
        perm = [int(p) for p in np.random.default_rng([seed, e]).permutation(n_queries)]
        tail = (e * n_queries) % block  # positions of the crossing step that fall in epoch e - 1
        if e > 0 and tail:
            taken = set(perms[-1][n_queries - tail :])
            head = [p for p in perm if p not in taken][: block - tail]
            chosen = set(head)
            perm = head + [p for p in perm if p not in chosen]
        perms.append(tuple(perm))
    return perms[epoch]


def load_split(config: TrainConfig, split: str) -> pd.DataFrame:
    """Queries of ``split``; single-split benchmarks are split with split_queries(train_frac),
    seeded by ``split_seed`` (``seed`` when unset). ``max_int_answer`` filters before the split, so
    the held-out queries obey it too."""
    from gcpo_analysis.data import load_queries, split_queries

    if config.split_from_single:
        split_seed = config.seed if config.split_seed is None else config.split_seed
        df = load_queries(
            config.dataset, path=config.data_path, split="test", seed=split_seed, max_int_answer=config.max_int_answer
        )
        train, test = split_queries(df, train_frac=config.train_frac, seed=split_seed, group=config.split_group)
        return (train if split == config.train_split else test).reset_index(drop=True)
    return load_queries(
        config.dataset, path=config.data_path, split=split, seed=config.seed, max_int_answer=config.max_int_answer
    )
