"""Which queries a run sees: the train/test split of a benchmark and the per-step draw.

Its own module so that the trainer and the evaluator both import it and never each other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .config import TrainConfig


def query_indices(n_queries: int, seed: int, start: int, count: int) -> np.ndarray:
    """Positions start..start+count-1 of an endless stream of per-epoch permutations
    (permutation of epoch e drawn from default_rng([seed, e]))."""
    out = []
    for k in range(start, start + count):
        epoch, pos = divmod(k, n_queries)
        out.append(np.random.default_rng([seed, epoch]).permutation(n_queries)[pos])
    return np.asarray(out, dtype=np.int64)


def load_split(config: TrainConfig, split: str) -> pd.DataFrame:
    """Queries of ``split``; single-split benchmarks are split with split_queries(train_frac),
    seeded by ``split_seed`` (``seed`` when unset)."""
    from gcpo_analysis.data import load_queries, split_queries

    if config.split_from_single:
        split_seed = config.seed if config.split_seed is None else config.split_seed
        df = load_queries(config.dataset, path=config.data_path, split="test", seed=split_seed)
        train, test = split_queries(df, train_frac=config.train_frac, seed=split_seed, group=config.split_group)
        return (train if split == config.train_split else test).reset_index(drop=True)
    return load_queries(config.dataset, path=config.data_path, split=split, seed=config.seed)
