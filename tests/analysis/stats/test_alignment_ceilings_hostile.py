"""Hostile input to the honest ceilings (gcpo_analysis.stats.alignment_ceilings): a Gram that is
not finite or not square, ids that do not fit the pool, an unbounded box, a bad ridge, a k of 0,
and a pool whose outside groups make no pair."""

import numpy as np
import pytest

from gcpo_analysis.stats.alignment import reference_terms
from gcpo_analysis.stats.alignment_ceilings import (
    block,
    box_cosine_max,
    half_references,
    ideal_terms,
    mean_norm2,
    oracle_fitter,
    orders,
)


def _pool(n=8, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, 5)) + 0.3
    return X @ X.T


def test_a_gram_that_is_not_finite_or_square_is_named():
    K = _pool()
    K[0, 1] = K[1, 0] = np.nan
    idx = np.array([[2, 3, 4]])
    with pytest.raises(ValueError, match=r"K must be finite, K\[0, 1\] is nan"):
        mean_norm2(K)  # was a NaN ‖μ‖²
    with pytest.raises(ValueError, match=r"K must be finite"):
        ideal_terms(K, idx, np.zeros((1, 3)), 1.0)
    with pytest.raises(ValueError, match=r"K must be finite"):
        half_references(K, idx, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"square matrix, got shape \(3, 4\)"):
        mean_norm2(np.ones((3, 4)))  # was an IndexError


def test_ids_must_fit_the_pool():
    K = _pool()
    with pytest.raises(ValueError, match=r"one original group \(an integer >= 0\) per pool position \(8\)"):
        mean_norm2(K, np.arange(3))
    with pytest.raises(ValueError, match="per pool position"):  # -1 indexed from the end, silently
        half_references(K, np.array([[1, 2, 3]]), np.random.default_rng(0), ids=np.arange(8) - 1)


def test_degenerate_grams_give_nan_not_numbers():
    Z = np.zeros((8, 8))
    idx = np.array([[0, 1, 2], [3, 4, 5]])
    assert mean_norm2(Z) == 0.0
    q, cos_none = ideal_terms(Z, idx, np.zeros((2, 3)), 0.0)
    assert np.isnan(q).all() and np.isnan(cos_none).all()
    # three groups, a batch of two: one group outside, no pair for the U-statistic (Q was inf)
    K = _pool(3)
    idx = np.array([[0, 1]])
    c, _ = reference_terms(K, idx, None, None, None)
    q, _ = ideal_terms(K, idx, c, mean_norm2(K))
    assert np.isnan(q).all()


def test_an_unbounded_box_a_bad_ridge_and_k_zero():
    K = _pool()
    idx = np.array([[0, 1, 2]])
    KB = block(K, idx)
    c = K[idx[0]][:, 3:].mean(1)[None]
    with pytest.raises(ValueError, match=r"finite 0 <= lo <= hi, got \[0.0, inf\]"):
        box_cosine_max(KB, c, 0.0, np.inf)  # the weights went to inf
    for ridge in (np.nan, -1.0):
        with pytest.raises(ValueError, match="ridge must be a finite number >= 0"):
            oracle_fitter(KB, ridge)
    for k in (0, -1):  # was an empty set of orders
        with pytest.raises(ValueError, match="a batch of k >= 1 groups"):
            orders(k)
