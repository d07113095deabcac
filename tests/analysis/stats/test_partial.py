"""stats.partial: the Spearman matrices and partial correlations against scipy, lstsq residuals
and statsmodels."""

import numpy as np
import pytest
from scipy import stats as sps

from gcpo_analysis.stats.partial import (
    partial_from_matrix,
    partial_p,
    residual_partial,
    spearman_matrices,
)


def _data(n=60, seed=0, ties=True):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    length = rng.integers(5, 12, size=n).astype(float) if ties else rng.normal(size=n)
    u = s + 0.5 * length + rng.normal(size=n)
    v = 2 * s + length + rng.normal(size=n)
    return np.column_stack([u, v, s, length])


def test_matrix_equals_scipy_on_the_sample_and_on_resamples():
    Z = _data()
    R = spearman_matrices(Z)[0]
    assert np.allclose(R, sps.spearmanr(Z).statistic, atol=1e-12)
    idx = np.random.default_rng(1).integers(0, len(Z), size=(5, len(Z)))
    Rb = spearman_matrices(Z, idx)
    for b in range(5):
        assert np.allclose(Rb[b], sps.spearmanr(Z[idx[b]]).statistic, atol=1e-12)


@pytest.mark.parametrize("controls", [[2], [3], [2, 3]])
@pytest.mark.parametrize("ties", [True, False])
def test_partial_equals_lstsq_residuals(controls, ties):
    Z = _data(ties=ties, seed=3)
    got = partial_from_matrix(spearman_matrices(Z), 0, 1, controls)[0]
    assert got == pytest.approx(residual_partial(Z[:, 0], Z[:, 1], Z[:, controls]), abs=1e-10)


def test_partial_p_equals_statsmodels_t_test():
    import statsmodels.api as sm

    Z = _data(seed=4)
    rho = residual_partial(Z[:, 0], Z[:, 1], Z[:, [2, 3]])
    ranks = [sps.rankdata(Z[:, j]) for j in range(4)]
    X = np.column_stack([np.ones(len(Z)), ranks[2], ranks[3], ranks[0]])
    p_ols = sm.OLS(ranks[1], X).fit().pvalues[3]
    assert partial_p(rho, len(Z), 2) == pytest.approx(p_ols, rel=1e-8)


def test_one_control_equals_the_closed_form():
    Z = _data(seed=5)
    R = sps.spearmanr(Z).statistic
    closed = (R[0, 1] - R[0, 2] * R[1, 2]) / np.sqrt((1 - R[0, 2] ** 2) * (1 - R[1, 2] ** 2))
    assert partial_from_matrix(spearman_matrices(Z), 0, 1, [2])[0] == pytest.approx(closed, abs=1e-12)


def test_constant_and_collinear_give_nan():
    Z = _data()
    Z[:, 3] = 1.0
    R = spearman_matrices(Z)
    assert np.isnan(R[0, 3, 0]) and np.isnan(partial_from_matrix(R, 0, 1, [3])[0])
    Z = _data()
    Z[:, 3] = Z[:, 2] * 2 + 1  # a control equal in ranks to another: still defined (pinv)
    assert np.isfinite(partial_from_matrix(spearman_matrices(Z), 0, 1, [2, 3])[0])
    Z[:, 0] = Z[:, 2]  # u is a control: nothing left of it
    assert np.isnan(partial_from_matrix(spearman_matrices(Z), 0, 1, [2])[0])


def test_bad_shapes_named():
    with pytest.raises(ValueError, match="idx must have shape"):
        spearman_matrices(_data(), np.zeros((3, 5), int))
    with pytest.raises(ValueError, match="Z must be"):
        spearman_matrices(np.zeros(4))


def test_float_moments_are_the_exact_integer_sums():
    """The BLAS path of spearman_matrices gives the integer einsum's bytes (sums below 2^53)."""
    from gcpo_analysis.stats.partial import _moments

    rng = np.random.default_rng(0)
    for N in (3, 40, 300):
        counts = rng.integers(0, N + 1, (N, 8, 1))
        R = rng.integers(-2 * N + 1, 2 * N, (N, 8, 4))
        exact = np.einsum("nbp,nbq->bpq", counts * R, R)
        np.testing.assert_array_equal(_moments(counts * R, R, N), exact.astype(float))
