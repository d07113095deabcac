"""Entropy-family measures against hand-worked values, naive loops and brute-force matrix functions."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import linalg
from scipy.stats import entropy as scipy_entropy

from gcpo_analysis.measures.entropy import (
    kernel_language_entropy,
    kernel_language_entropy_batch,
    mean_token_entropy,
    predictive_entropy,
    predictive_entropy_batch,
    semantic_entropy,
    semantic_entropy_batch,
    token_entropy_from_logits,
)


# --------------------------------------------------------------------------- semantic entropy
def test_se_hand_worked():
    assert semantic_entropy([0, 0, 1, 1]) == pytest.approx(math.log(2), abs=1e-12)
    # [0,0,0,1]: C = (3/4, 1/4); 0.75 ln(4/3) + 0.25 ln 4 = 0.215762 + 0.346574
    assert semantic_entropy([0, 0, 0, 1]) == pytest.approx(0.5623351446188083, abs=1e-12)
    assert semantic_entropy(["paris", "paris", "london", "rome"]) == pytest.approx(
        -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)), abs=1e-12
    )
    assert semantic_entropy([7]) == 0.0


def _naive_weighted_se(labels, logprobs):
    shift = max(logprobs)
    p = [math.exp(lp - shift) for lp in logprobs]
    total = sum(p)
    mass = {}
    for lab, pi in zip(labels, p):
        mass[lab] = mass.get(lab, 0.0) + pi / total
    return -sum(c * math.log(c) for c in mass.values() if c > 0)


def test_likelihood_weighted_se_matches_naive_loop():
    rng = np.random.default_rng(0)
    for _ in range(50):
        G = int(rng.integers(1, 12))
        labels = rng.integers(0, 4, size=G)
        logprobs = -rng.exponential(30.0, size=G) - rng.choice([0.0, 900.0], size=G)  # some ~ -1000
        assert semantic_entropy(labels, logprobs) == pytest.approx(
            _naive_weighted_se(labels.tolist(), logprobs.tolist()), abs=1e-10
        )


def test_weighted_se_hand_worked_and_equal_weights():
    # p = (e^-1, e^-1, e^-2, e^-3): C_0 = 2e^-1 / S, C_1 = (e^-2 + e^-3) / S
    p = np.exp([-1.0, -1.0, -2.0, -3.0])
    c = np.array([p[:2].sum(), p[2:].sum()]) / p.sum()
    assert semantic_entropy([0, 0, 1, 1], [-1, -1, -2, -3]) == pytest.approx(-(c * np.log(c)).sum(), abs=1e-12)
    assert semantic_entropy([0, 1, 1, 2], [-5.0] * 4) == pytest.approx(semantic_entropy([0, 1, 1, 2]), abs=1e-12)


def test_se_errors():
    with pytest.raises(ValueError, match="shape"):
        semantic_entropy([0, 1, 1], [-1.0, -2.0])
    with pytest.raises(ValueError, match="NaN"):
        semantic_entropy([0, 1], [-1.0, np.nan])
    with pytest.raises(ValueError, match="<= 0"):
        semantic_entropy([0, 1], [-1.0, 0.5])
    with pytest.raises(ValueError, match="empty"):
        semantic_entropy([])
    with pytest.raises(ValueError, match="1-D"):
        semantic_entropy([[0, 1]])


def test_se_batch_equals_single():
    rng = np.random.default_rng(1)
    c = rng.integers(0, 5, size=(40, 8))
    lp = -rng.exponential(5.0, size=(40, 8))
    np.testing.assert_allclose(semantic_entropy_batch(c), [semantic_entropy(r) for r in c], atol=1e-12)
    np.testing.assert_allclose(
        semantic_entropy_batch(c, lp), [semantic_entropy(r, lp_i) for r, lp_i in zip(c, lp)], atol=1e-12
    )


labels_st = st.lists(st.integers(0, 5), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(labels=labels_st, seed=st.integers(0, 10_000))
def test_se_properties(labels, seed):
    rng = np.random.default_rng(seed)
    labels = np.array(labels)
    G = len(labels)
    h = semantic_entropy(labels)
    assert -1e-12 <= h <= math.log(G) + 1e-12
    perm = rng.permutation(G)
    assert semantic_entropy(labels[perm]) == pytest.approx(h, abs=1e-12)
    relabel = rng.permutation(6) + 100  # a bijection onto other label values
    assert semantic_entropy(relabel[labels]) == pytest.approx(h, abs=1e-12)
    assert semantic_entropy(np.zeros(G, dtype=int)) == 0.0
    assert semantic_entropy(np.arange(G)) == pytest.approx(math.log(G), abs=1e-12)
    lp = -rng.exponential(3.0, size=G)
    hw = semantic_entropy(labels, lp)
    assert -1e-12 <= hw <= math.log(G) + 1e-12
    assert semantic_entropy(labels[perm], lp[perm]) == pytest.approx(hw, abs=1e-10)


# --------------------------------------------------------------------------- predictive entropy
def test_predictive_entropy_by_hand():
    assert predictive_entropy([-1.0, -2.0, -3.0]) == pytest.approx(2.0)
    assert predictive_entropy([-1.0, -2.0, -3.0], lengths=[1, 2, 3]) == pytest.approx(1.0)
    assert predictive_entropy([-4.0]) == 0.0
    np.testing.assert_allclose(predictive_entropy_batch([[-1.0, -3.0], [-2.0, -2.0]]), [2.0, 2.0])
    with pytest.raises(ValueError, match="lengths"):
        predictive_entropy([-1.0, -2.0], lengths=[1, 0])
    with pytest.raises(ValueError, match="NaN"):
        predictive_entropy([-1.0, np.inf * -1])


# --------------------------------------------------------------------------- token entropy
def test_token_entropy_from_logits_matches_scipy():
    rng = np.random.default_rng(2)
    logits = rng.normal(scale=4.0, size=(3, 5, 11))
    h = token_entropy_from_logits(logits)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(h, scipy_entropy(probs, axis=-1), atol=1e-10)
    assert token_entropy_from_logits(np.zeros((1, 7)))[0] == pytest.approx(math.log(7))
    big = np.array([[1e4, 0.0, 0.0]])  # would overflow a naive exp
    assert token_entropy_from_logits(big)[0] == pytest.approx(0.0, abs=1e-12)
    mask = np.array([[True, True, False, False, True]] * 3)
    hm = token_entropy_from_logits(logits, mask)
    np.testing.assert_allclose(hm[mask], h[mask])
    assert (hm[~mask] == 0).all()


def test_mean_token_entropy_hand_worked():
    assert mean_token_entropy([0.5, 1.5, 1.0]) == pytest.approx(1.0)
    h = np.array([[1.0, 3.0, 9.0], [2.0, 2.0, 2.0]])
    m = np.array([[1, 1, 0], [1, 1, 1]], dtype=bool)
    # rollout means 2 and 2 -> 2 (the masked 9 is padding)
    assert mean_token_entropy(h, m) == pytest.approx(2.0)
    assert mean_token_entropy(h) == pytest.approx((13 / 3 + 2) / 2)
    assert mean_token_entropy([0.7]) == 0.0
    with pytest.raises(ValueError, match="no unmasked"):
        mean_token_entropy(h, np.array([[0, 0, 0], [1, 1, 1]], dtype=bool))


# --------------------------------------------------------------------------- KLE
def _kle_brute(W, t, normalize="diag"):
    """KLE written from the paper's definition with a matrix exponential and logarithm."""
    W = np.maximum(np.array(W, dtype=float), 0.0)
    np.fill_diagonal(W, 0.0)
    L = np.diag(W.sum(1)) - W
    K = linalg.expm(-t * L)
    if normalize == "diag":  # the KLE authors' / lm-polygraph's normalize=True
        G = len(K)
        rho = np.empty_like(K)
        for i in range(G):
            for j in range(G):
                rho[i, j] = K[i, j] / math.sqrt(K[i, i] * K[j, j]) / G
    else:
        rho = K / np.trace(K)
    return float(-np.trace(rho @ linalg.logm(rho)).real)


@pytest.mark.parametrize("normalize", ["diag", "trace"])
@pytest.mark.parametrize("t", [0.1, 0.3, 1.0])
def test_kle_matches_expm_logm_on_random_graphs(t, normalize):
    rng = np.random.default_rng(3)
    for G in range(2, 17):
        e = rng.normal(size=(G, 6))
        en = e / np.linalg.norm(e, axis=1, keepdims=True)
        got = kernel_language_entropy(e, t=t, normalize=normalize)
        assert got == pytest.approx(_kle_brute(en @ en.T, t, normalize), abs=1e-8)
        S = rng.uniform(0, 1, size=(G, G))
        S = (S + S.T) / 2
        got = kernel_language_entropy(similarity=S, t=t, normalize=normalize)
        assert got == pytest.approx(_kle_brute(S, t, normalize), abs=1e-8)


def test_the_two_kle_normalisations_differ_on_uneven_graphs():
    rng = np.random.default_rng(5)
    S = rng.uniform(0, 1, size=(8, 8)) ** 4  # uneven degrees: diag(K) varies
    S = (S + S.T) / 2
    diag, trace = (kernel_language_entropy(similarity=S, normalize=n) for n in ("diag", "trace"))
    assert abs(diag - trace) > 1e-4
    with pytest.raises(ValueError, match="normalize must be one of"):
        kernel_language_entropy(similarity=S, normalize="none")


def test_kle_edge_cases():
    assert kernel_language_entropy(np.ones((1, 4))) == 0.0
    assert kernel_language_entropy(np.eye(5)) == pytest.approx(math.log(5))  # W = 0 -> K = I/G
    for G, t in [(16, 0.3), (4, 1.0)]:
        # identical answers: complete graph, L = G I - J, eigenvalues 0 (x1) and G (x G-1)
        a = 1.0 / (1.0 + (G - 1) * math.exp(-t * G))
        b = math.exp(-t * G) * a
        expected = -(a * math.log(a) + (G - 1) * b * math.log(b))
        assert kernel_language_entropy(np.tile([[0.3, 0.4]], (G, 1)), t=t) == pytest.approx(expected, abs=1e-10)
    assert kernel_language_entropy(np.tile([[1.0, 0.0]], (16, 1))) == pytest.approx(0.64383, abs=1e-4)
    with pytest.raises(ValueError, match="zero-norm"):
        kernel_language_entropy(np.array([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="symmetric"):
        kernel_language_entropy(similarity=np.array([[1.0, 0.9], [0.1, 1.0]]))
    with pytest.raises(ValueError, match="exactly one"):
        kernel_language_entropy()
    with pytest.raises(ValueError, match="t must be"):
        kernel_language_entropy(np.eye(3), t=0.0)


def test_kle_batch_equals_single_and_bounds():
    rng = np.random.default_rng(4)
    e = rng.normal(size=(20, 7, 5))
    got = kernel_language_entropy_batch(e)
    np.testing.assert_allclose(got, [kernel_language_entropy(x) for x in e], atol=1e-12)
    assert ((got > 0) & (got <= math.log(7) + 1e-12)).all()
