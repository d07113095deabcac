"""The honest ceilings of the update-alignment study (gcpo_analysis.stats.alignment_ceilings)
against explicit vectors, brute force and a pool whose expected gradient is known."""

from itertools import permutations, product

import numpy as np
import pytest

from gcpo_analysis.stats.alignment import draw_batches, reference_terms
from gcpo_analysis.stats.alignment_ceilings import (
    best_order,
    block,
    box_cosine_max,
    cosine,
    crossfit,
    half_references,
    ideal_room,
    ideal_terms,
    in_sample,
    mean_norm2,
    oracle_fitter,
    split_outside,
)


def cos(a, b):
    return a @ b / np.linalg.norm(a) / np.linalg.norm(b)


def instance(k=3, D=7, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(k, D)) + 0.3
    r = rng.normal(size=D) + 0.5
    return X, r, (X @ X.T)[None], (X @ r)[None]


def test_mean_norm2_is_the_mean_over_distinct_pairs():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 4))
    ids = np.array([0, 1, 1, 2, 3, 3])
    Xr = X[ids]
    pairs = [Xr[a] @ Xr[b] for a in range(6) for b in range(6) if ids[a] != ids[b]]
    assert mean_norm2(Xr @ Xr.T, ids) == pytest.approx(np.mean(pairs))
    assert mean_norm2(X @ X.T) == pytest.approx(np.mean([X[a] @ X[b] for a in range(6) for b in range(6) if a != b]))


def test_halves_split_the_outside_groups_and_keep_copies_together():
    ids = np.array([0, 0, 1, 2, 3, 4, 4, 5, 6, 7])
    idx = draw_batches(len(ids), 3, 50, np.random.default_rng(1))
    A, B = split_outside(idx, 8, ids, np.random.default_rng(2))
    for b, row in enumerate(idx):
        members = set(ids[row])
        outside = [p for p in range(len(ids)) if ids[p] not in members]
        assert not (A[b] & B[b]).any()
        assert sorted(np.flatnonzero(A[b] | B[b])) == outside
        ga, gb = set(ids[A[b]]), set(ids[B[b]])
        assert not ga & gb and len(ga) == len(ga | gb) // 2  # copies together, ⌊m/2⌋ groups in A
    rng = np.random.default_rng(3)
    X = rng.normal(size=(len(ids), 5))
    Xr = X[ids]
    c, n2 = half_references(Xr @ Xr.T, idx, np.random.default_rng(2), ids)
    for b, row in enumerate(idx):
        rA = Xr[A[b]].mean(0)
        np.testing.assert_allclose(c[0, b], Xr[row] @ rA)
        assert n2[0, b] == pytest.approx(rA @ rA)


def test_oracle_is_the_best_cosine_over_all_real_weights():
    X, r, KB, c = instance()
    w = oracle_fitter(KB, ridge=0.0)(c)[0]
    proj = X.T @ np.linalg.lstsq(X.T, r, rcond=None)[0]  # r projected on the span of the g_q
    assert cos(w @ X, r) == pytest.approx(np.linalg.norm(proj) / np.linalg.norm(r))
    trials = np.random.default_rng(1).normal(size=(2000, 3))
    assert max(cos(t @ X, r) for t in trials) <= cos(w @ X, r) + 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_box_ceiling_is_the_grid_maximum_within_its_bounds_and_below_the_oracle(seed):
    X, r, KB, c = instance(seed=seed)
    lo, hi = 0.4, 1.3
    w = box_cosine_max(KB, c, lo, hi)[0]
    assert ((w >= lo - 1e-12) & (w <= hi + 1e-12)).all()
    grid = np.linspace(lo, hi, 31)
    best_grid = max(cos(np.array(t) @ X, r) for t in product(grid, repeat=3))
    assert cos(w @ X, r) >= best_grid - 1e-9  # at least the grid's best
    assert cos(w @ X, r) >= cos(np.ones(3) @ X, r) - 1e-15  # never below equal weights
    assert cos(w @ X, r) <= cos(oracle_fitter(KB, 0.0)(c)[0] @ X, r) + 1e-12


def test_best_order_is_the_brute_force_best_order_and_beats_the_own_order():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(30, 6)) + 0.2
    K = X @ X.T
    idx = draw_batches(30, 4, 40, rng)
    c, n2 = reference_terms(K, idx)
    W = rng.uniform(0.5, 1.5, size=idx.shape)
    best = best_order(W, block(K, idx), c)
    for b, row in enumerate(idx):
        r = X[[p for p in range(30) if p not in set(row)]].mean(0)
        brute = max(cos(W[b][list(p)] @ X[row], r) for p in permutations(range(4)))
        assert cos(best[b] @ X[row], r) == pytest.approx(brute)
        assert cos(best[b] @ X[row], r) >= cos(W[b] @ X[row], r) - 1e-12
        assert sorted(best[b]) == pytest.approx(sorted(W[b]))


def known_pool(P=160, D=400, noise=12.0, seed=5):
    """Groups g_q = μ + noise with μ known (‖μ‖ = 1), so the true room is computable from the
    vectors; this noise puts the leave-batch-out reference at cosine ~0.7 with μ, as in the study."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=D)
    mu /= np.linalg.norm(mu)
    return mu, mu + noise * rng.normal(size=(P, D)) / np.sqrt(D)


def test_in_sample_oracle_beats_any_weights_fitted_elsewhere_on_its_own_reference():
    _, X = known_pool()
    K = X @ X.T
    idx = draw_batches(len(X), 4, 300, np.random.default_rng(6))
    KB = block(K, idx)
    c, n2 = reference_terms(K, idx)
    halves = half_references(K, idx, np.random.default_rng(7))
    oracle = oracle_fitter(KB)
    in_sample_cos = cosine(oracle(c), KB, c, n2)
    fitted_on_half = cosine(oracle(halves[0][0]), KB, c, n2)  # the same reference scores both
    assert (fitted_on_half <= in_sample_cos + 1e-9).all()


def test_cross_fitting_removes_the_overfit_and_the_ideal_room_is_near_the_true_room():
    mu, X = known_pool()
    K = X @ X.T
    idx = draw_batches(len(X), 4, 1500, np.random.default_rng(8))
    KB = block(K, idx)
    c, n2 = reference_terms(K, idx)
    halves = half_references(K, idx, np.random.default_rng(9))
    mu2 = mean_norm2(K)
    oracle = oracle_fitter(KB)
    inside = in_sample(oracle, KB, c, n2, mu2)
    cross = crossfit(oracle, KB, halves, mu2)
    best, none, fit_a = [], [], []
    wa = oracle(halves[0][0])  # weights fitted on half A
    for b, row in enumerate(idx):
        best.append(np.linalg.norm(X[row].T @ np.linalg.lstsq(X[row].T, mu, rcond=None)[0]))  # max cos with μ
        none.append(cos(X[row].sum(0), mu))
        fit_a.append(cos(wa[b] @ X[row], mu) - none[-1])
    true_room = np.mean(best) - np.mean(none)
    assert 0.6 < np.sqrt(mu2 / n2.mean()) < 0.8 and mu2 == pytest.approx(1.0, abs=0.25)
    assert inside["dcos"].mean() > true_room > 0  # the in-sample fit chases the reference's noise
    assert cross["dcos_mu"].mean() < 0.5 * true_room  # a fit on half the groups: a lower estimate
    assert cross["dcos_mu"].mean() == pytest.approx(np.mean(fit_a), abs=0.01)  # unbiased for its fit
    assert ideal_room(*ideal_terms(K, idx, c, mu2)) == pytest.approx(true_room, abs=0.006)


def test_ideal_terms_count_copies_as_one_group():
    # a resample with copies: Q over distinct groups equals Q over the de-duplicated pool with
    # each group's copies as one group of that multiplicity (an explicit double loop)
    rng = np.random.default_rng(10)
    X = rng.normal(size=(9, 6)) + 0.3
    ids = np.array([0, 1, 1, 2, 3, 3, 3, 4, 5])
    Xr = X[ids]
    K = Xr @ Xr.T
    idx = np.array([[0, 3], [1, 8]])
    c, _ = reference_terms(K, idx, ids)
    q, _ = ideal_terms(K, idx, c, 1.0, ids)
    for b, row in enumerate(idx):
        S = np.linalg.inv(K[np.ix_(row, row)] + 1e-6 * np.trace(K[np.ix_(row, row)]) / 2 * np.eye(2))
        out = [p for p in range(9) if ids[p] not in set(ids[row])]
        vals = [(Xr[row] @ Xr[p]) @ S @ (Xr[row] @ Xr[p2]) for p in out for p2 in out if ids[p] != ids[p2]]
        assert q[b] == pytest.approx(np.mean(vals))
