"""V = N + C (gradvar.variance_parts) against brute force on explicit gradient vectors."""

import numpy as np
import pytest

from gcpo_analysis.gradvar import gradient_variance, variance_parts
from gcpo_analysis.measures.advantages import grpo_advantages


def _brute(g: np.ndarray, a: np.ndarray) -> tuple[float, float, float]:
    """Loops over explicit gradient vectors: V from its definition, N and C from their sums."""
    G = len(a)
    h = a[:, None] * g
    m = h.mean(axis=0)
    V = sum(float(np.dot(h[i] - m, h[i] - m)) for i in range(G)) / G
    N = sum(a[i] ** 2 * float(g[i] @ g[i]) for i in range(G)) * (1 - 1 / G) / G
    C = 0.0
    for i in range(G):
        for j in range(G):
            if i != j:
                C -= a[i] * a[j] * float(g[i] @ g[j])
    return V, N, C / G**2


@pytest.mark.parametrize("seed", range(6))
def test_parts_match_brute_force_on_gradient_vectors(seed):
    rng = np.random.default_rng(seed)
    G, d = int(rng.integers(2, 9)), int(rng.integers(3, 40))
    g = rng.normal(size=(G, d)) * rng.uniform(0.1, 5, size=(G, 1))
    a = grpo_advantages(rng.integers(0, 2, size=G).astype(float) + rng.normal(scale=0.1, size=G))
    V, N, C = _brute(g, a)
    n, c = variance_parts(g @ g.T, a)
    assert n == pytest.approx(N, rel=1e-10, abs=1e-12)
    assert c == pytest.approx(C, rel=1e-9, abs=1e-10)
    assert n + c == pytest.approx(V, rel=1e-9, abs=1e-10)
    assert n + c == pytest.approx(gradient_variance(g @ g.T, a), rel=1e-9, abs=1e-10)


def test_random_psd_gram_and_arbitrary_advantages():
    rng = np.random.default_rng(7)
    for _ in range(20):
        G = int(rng.integers(2, 12))
        L = rng.normal(size=(G, G + 3))
        K, a = L @ L.T, rng.normal(size=G)
        n, c = variance_parts(K, a)
        assert n >= 0
        assert n + c == pytest.approx(gradient_variance(K, a), rel=1e-9, abs=1e-12)


def test_orthogonal_gradients_have_no_cross_part():
    K = np.diag([1.0, 4.0, 9.0, 0.5])
    a = np.array([1.0, -1.0, 0.5, -0.5])
    n, c = variance_parts(K, a)
    assert c == 0.0
    assert n == pytest.approx(gradient_variance(K, a))


def test_parallel_equal_gradients():
    """g_i = g for all i, sum_i A_i = 0: m = 0 so V = mean_i A_i^2 |g|^2, and the cross sum is
    -(sum A)^2 + sum A^2 = sum A^2, so C = N / (G - 1) (hand-worked)."""
    g = np.array([1.0, 2.0, -1.0])
    K = np.outer(np.ones(4), np.ones(4)) * float(g @ g)
    a = grpo_advantages([1.0, 0.0, 1.0, 0.0])
    n, c = variance_parts(K, a)
    assert n > 0
    assert c == pytest.approx(n / 3)
    assert n + c == pytest.approx(float(np.mean(a**2)) * float(g @ g))


def test_edge_cases_g1_and_equal_rewards():
    assert variance_parts(np.array([[3.0]]), np.array([0.0])) == (0.0, 0.0)
    K = np.eye(5) + 0.2
    assert variance_parts(K, grpo_advantages(np.ones(5))) == (0.0, 0.0)


def test_bad_input_named():
    with pytest.raises(ValueError, match="advantages must have shape"):
        variance_parts(np.eye(3), np.ones(2))
    with pytest.raises(ValueError, match="not positive semi-definite"):
        variance_parts(-np.eye(2), np.array([1.0, -1.0]))
