"""The conformance checks of a registered measure or modulator, public so that a plug-in author
runs them on their own entry (as scikit-learn's ``sklearn.utils.estimator_checks``)::

    import my_measures  # registers "spread"
    from gcpo_analysis.checks import check_measure, check_modulator

    check_measure("spread")      # raises AssertionError naming the check that failed
    check_modulator("agree")

or one pytest case per check::

    @pytest.mark.parametrize("check", MEASURE_CHECKS)
    def test_spread(check):
        check("spread")

Measures: invariance to the order of a group's rollouts, the batched form equal to the per-group
loop, finite float64 values at G = 1, equal rewards, one cluster and all-distinct clusters (and a
weight of 1 at G = 1), NaN and inf refused in whatever it reads, and a column in the groups frame.
Modulators: advantages that follow a permutation of the rollouts, finite float64 advantages at the
same edge cases (none at all where the rewards do not spread), NaN rewards refused. The TRL bridge's
verdict is gcpo_train's (``gcpo_train.trl.check_trl_modulator``). The repository runs these on every
registered entry (tests/analysis/measures/test_conformance.py). No model, no network: the groups
frame check embeds with ``HashEmbedder``.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .measures.modulators import MODULATORS, GroupFeatures, modulate
from .measures.registry import MEASURE_REGISTRY, frame_order, table_order

PER_ROLLOUT_FIELDS = ("rewards", "embeddings", "clusters", "token_entropy", "logprobs", "n_tokens", "ratio_var")
EDGE_CASES = ("G=1", "equal rewards", "one cluster", "all distinct")


class HashEmbedder:
    """Deterministic unit vectors from a text's CRC-32: no model, and the same vector for the
    same text in every call and every process (a multi-process run agrees with one process).

    ``encode(texts, **kwargs)`` -> (n, dim) float32 rows of norm 1; it takes the keyword
    arguments ``Embedder`` passes a sentence-transformers model and ignores them, so it works
    both bare (gcpo_train accepts any ``encode(texts)``) and wrapped in an ``Embedder``.
    ``calls`` counts the ``encode`` calls.
    """

    def __init__(self, dim: int = 8):
        self.dim = dim
        self.calls = 0

    def encode(self, texts, **kwargs):
        self.calls += 1
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=self.dim) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)

    def describe(self) -> dict:
        return {"kind": "hash", "dim": self.dim}


def toy_group(G: int, seed: int = 0, clusters=None, rewards=None) -> GroupFeatures:
    """A seeded group of G rollouts with every per-rollout feature a measure or modulator reads."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(G, 6))
    return GroupFeatures(
        rewards=rng.uniform(0, 2, G) if rewards is None else np.asarray(rewards, float),
        embeddings=e / np.linalg.norm(e, axis=1, keepdims=True),
        clusters=rng.integers(0, 3, G) if clusters is None else np.asarray(clusters),
        token_entropy=rng.uniform(0.1, 3, G),
        logprobs=-rng.uniform(1, 20, G),
        n_tokens=rng.integers(1, 10, G).astype(float),
        ratio_var=rng.uniform(0, 0.3, G),
        answers=[f"a{i}" for i in range(G)],
        grad_norm2=float(rng.uniform(0.1, 3)),
    )


def _permuted(g: GroupFeatures, perm: np.ndarray) -> GroupFeatures:
    changes = {f: np.asarray(getattr(g, f))[perm] for f in PER_ROLLOUT_FIELDS if getattr(g, f) is not None}
    return dataclasses.replace(g, answers=[g.answers[i] for i in perm] if g.answers else None, **changes)


def _edge_group(case: str, seed: int) -> GroupFeatures:
    G = 1 if case == "G=1" else 5
    clusters = np.zeros(G, int) if case == "one cluster" else np.arange(G) if case == "all distinct" else None
    return toy_group(G, seed, clusters=clusters, rewards=np.ones(G) if case == "equal rewards" else None)


def _values(name: str, groups) -> np.ndarray:
    return MEASURE_REGISTRY[name].compute(groups, 0.0, 2.0)


def _close(actual, expected, what: str, atol: float = 1e-12, rtol: float = 0.0) -> None:
    np.testing.assert_allclose(actual, expected, atol=atol, rtol=rtol, err_msg=what)


# ------------------------------------------------------------------------------------ measures
def check_measure_is_invariant_to_the_order_of_rollouts(name: str) -> None:
    groups = [toy_group(6, seed) for seed in range(4)]
    perm = np.random.default_rng(9).permutation(6)
    _close(_values(name, [_permuted(g, perm) for g in groups]), _values(name, groups), f"{name}: rollouts permuted")


def check_measure_batched_equals_the_per_group_loop(name: str) -> None:
    groups = [toy_group(5, seed) for seed in range(6)]
    loop = np.concatenate([_values(name, [g]) for g in groups])
    _close(_values(name, groups), loop, f"{name}: batched vs per group", rtol=1e-12)


def check_measure_edge_cases(name: str) -> None:
    """Finite float64 values at each edge case; a weight >= 0, and 1 at G = 1 (alpha_G = 0)."""
    m = MEASURE_REGISTRY[name]
    for case in EDGE_CASES:
        groups = [_edge_group(case, seed) for seed in range(3)]
        G = len(groups[0].rewards)
        u = _values(name, groups)
        if not (u.dtype == np.float64 and u.shape == (3,) and np.isfinite(u).all()):
            raise AssertionError(f"{name} at {case}: values {u!r} are not 3 finite float64")
        if m.weight is not None:
            w = np.asarray(m.weight(u, G, 0.6), dtype=float)
            if not (np.isfinite(w).all() and (w >= 0).all()):
                raise AssertionError(f"{name} at {case}: weights {w!r} are not finite and >= 0")
            if G == 1 and not (w == 1.0).all():  # alpha_G = 0: no modulation of a group of one
                raise AssertionError(f"{name} at G=1: weights {w!r}, not 1")


def check_measure_refuses_nan_and_inf(name: str) -> None:
    """NaN, inf and -inf in each field it reads are refused, naming the measure, group and field."""
    m = MEASURE_REGISTRY[name]
    if not m.reads():
        raise AssertionError(f"measure {name!r} reads no number")
    for bad in (np.nan, np.inf, -np.inf):
        for field in m.reads():
            g = toy_group(4)
            value = np.array(getattr(g, field), dtype=float)
            value.flat[1] = bad
            try:
                changed: dict[str, Any] = {field: value}
                _values(name, [dataclasses.replace(g, **changed)])
            except ValueError as err:
                if not all(word in str(err) for word in (name, "group 0", field)):
                    raise AssertionError(f"{name}: the refusal of {bad} in {field} does not name them: {err}") from err
            else:
                raise AssertionError(f"{name}: {bad} in {field} was not refused")


def _rollouts(n_queries: int = 3, G: int = 4) -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(0)
    for q in range(n_queries):
        for i in range(G):
            rows.append(
                dict(
                    query_id=f"q{q}",
                    rollout_id=i,
                    completion=f"Answer: {'abc'[(q + i) % 3]}",
                    answer="abc"[(q + i) % 3],
                    reward=float(rng.uniform(0, 2)),
                    token_entropy=float(rng.uniform(0.1, 2)),
                    logprob=float(-rng.uniform(1, 9)),
                    n_tokens=int(rng.integers(1, 6)),
                )
            )
    return pd.DataFrame(rows)


def check_measure_reaches_the_groups_frame(name: str) -> None:
    """``score_groups`` writes its column (and its weight's), and the frame and tables order it."""
    from .measures.score import score_groups

    out = score_groups(_rollouts(), [name], embedder=HashEmbedder(), judge="lexical", progress=False)
    m = MEASURE_REGISTRY[name]
    if name not in out.columns or not out[name].notna().all():
        raise AssertionError(f"{name}: no complete column in the groups frame")
    if m.weight is not None and m.weight_column not in out.columns:
        raise AssertionError(f"{name}: no weight column {m.weight_column!r} in the groups frame")
    if name not in frame_order() or name not in table_order():
        raise AssertionError(f"{name}: not in the frame's or the tables' order")


MEASURE_CHECKS: list[Callable[[str], None]] = [
    check_measure_is_invariant_to_the_order_of_rollouts,
    check_measure_batched_equals_the_per_group_loop,
    check_measure_edge_cases,
    check_measure_refuses_nan_and_inf,
    check_measure_reaches_the_groups_frame,
]


# ------------------------------------------------------------------------------------ modulators
def _modulate(name: str, g: GroupFeatures):
    return modulate(name, g, r_min=0.0, r_max=2.0)


def check_modulator_follows_a_permutation_of_rollouts(name: str) -> None:
    g = toy_group(6, 3)
    perm = np.random.default_rng(1).permutation(6)
    a, _ = _modulate(name, g)
    b, _ = _modulate(name, _permuted(g, perm))
    _close(b, np.asarray(a)[perm], f"{name}: advantages of permuted rollouts")


def check_modulator_edge_cases(name: str) -> None:
    """Finite float64 advantages and info at each edge case; none where the rewards do not spread
    (G = 1, equal rewards), unless the modulator replaces the rewards (EMPO)."""
    for case in EDGE_CASES:
        g = _edge_group(case, 4)
        adv, info = _modulate(name, g)
        adv = np.asarray(adv)
        G = len(g.rewards)
        if not (adv.shape == (G,) and adv.dtype == np.float64 and np.isfinite(adv).all()):
            raise AssertionError(f"{name} at {case}: advantages {adv!r} are not {G} finite float64")
        if not all(np.isfinite(v) for v in info.values()):
            raise AssertionError(f"{name} at {case}: info {info!r} is not finite")
        if case in ("G=1", "equal rewards") and name != "empo":  # no spread of rewards: no advantage
            _close(adv, 0.0, f"{name} at {case}: an advantage without a spread of rewards")


def check_modulator_refuses_nan_rewards(name: str) -> None:
    g = toy_group(4, 5)
    g.rewards[2] = np.nan
    try:
        _modulate(name, g)
    except ValueError:
        return
    raise AssertionError(f"{name}: a NaN reward was not refused")


MODULATOR_CHECKS: list[Callable[[str], None]] = [
    check_modulator_follows_a_permutation_of_rollouts,
    check_modulator_edge_cases,
    check_modulator_refuses_nan_rewards,
]


def check_measure(name: str) -> None:
    """Every measure check on the registered measure ``name``; an AssertionError names the failure."""
    MEASURE_REGISTRY.lookup(name)
    for check in MEASURE_CHECKS:
        check(name)


def check_modulator(name: str) -> None:
    """Every modulator check on the registered modulator ``name``."""
    MODULATORS.lookup(name)
    for check in MODULATOR_CHECKS:
        check(name)
