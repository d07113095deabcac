"""``rules.param_gram`` on factored terms, against the per-sample gradients built by hand:
g_i = sum_u L_{u,i}^T R_{u,i} (one-hot L for ids), K = g g^T in float64. Every ghost pairing
(unshared, a factor shared by all samples, one side shared, one-hot against dense) and the
materialised form, with G = 1, a zero sample and a tied weight's four uses."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gcpo_analysis.gradvar.rules import Term, _gram_ghost, _gram_materialised, param_gram  # noqa: E402

ROWS, COLS = 7, 5


def brute(terms, G, rows=ROWS):
    g = np.zeros((G, rows, COLS))
    for t in terms:
        R = t.R.double().expand(G, *t.R.shape[1:]).numpy()
        if t.ids is not None:
            ids = t.ids.expand(G, *t.ids.shape[1:]).numpy()
            for i in range(G):
                for s in range(ids.shape[1]):
                    g[i, ids[i, s]] += R[i, s]
        else:
            L = t.L.double().expand(G, *t.L.shape[1:]).numpy()
            g += np.einsum("gtr,gtc->grc", L, R)
    flat = g.reshape(G, -1)
    return flat @ flat.T


def dense(G, T, shared=None, zero_sample=None):
    """A Linear-style term; ``shared`` = "R" or "L": that factor has batch 1 (every sample's)."""
    gen = torch.Generator().manual_seed(G * 100 + T)
    L = torch.randn(1 if shared == "L" else G, T, ROWS, generator=gen, dtype=torch.float64)
    R = torch.randn(1 if shared == "R" else G, T, COLS, generator=gen, dtype=torch.float64)
    if zero_sample is not None:
        (R if shared == "L" else L)[zero_sample] = 0
    return Term(R=R, L=L)


def one_hot(G, T, shared_ids=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, ROWS, (1 if shared_ids else G, T), generator=gen)
    return Term(R=torch.randn(G, T, COLS, generator=gen, dtype=torch.float64), ids=ids)


CASES = {
    "one unshared use": lambda G: [dense(G, 6)],
    "input shared by all samples": lambda G: [dense(G, 6, shared="R")],
    "Conv1D-style shared left factor": lambda G: [dense(G, 6, shared="L")],
    "completion + shared prompt": lambda G: [dense(G, 3), dense(G, 8, shared="R")],
    "Conv1D completion + shared prompt": lambda G: [dense(G, 3), dense(G, 8, shared="L")],
    "a zero sample": lambda G: [dense(G, 3, zero_sample=0), dense(G, 4, shared="R", zero_sample=0)],
    "ids": lambda G: [one_hot(G, 6)],
    "shared prompt ids + completion ids": lambda G: [one_hot(G, 3, seed=1), one_hot(G, 9, shared_ids=True, seed=2)],
    "tied weight's four uses": lambda G: [
        dense(G, 3),  # lm_head over the completion
        one_hot(G, 3, seed=3),  # embedding of the completion
        one_hot(G, 9, shared_ids=True, seed=4),  # embedding of the shared prompt
        dense(G, 1, shared="R"),  # lm_head at the prompt's last position
    ],
}


@pytest.mark.parametrize("G", [1, 2, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_ghost_and_materialised_equal_the_hand_built_gradients(case, G):
    terms = CASES[case](G)
    expected = brute(terms, G)
    for K in (_gram_ghost(terms, G), _gram_materialised(terms, G, ROWS), param_gram(terms, [], G, ROWS)):
        np.testing.assert_allclose(K.numpy(), expected, rtol=1e-10, atol=1e-10)
    if case == "a zero sample":
        assert np.all(expected[0] == 0)


def test_a_lost_use_or_sample_is_seen():
    """The check above can fail: dropping the prompt use, or mixing up two samples, changes K."""
    G = 3
    terms = CASES["completion + shared prompt"](G)
    expected = brute(terms, G)
    assert not np.allclose(_gram_ghost(terms[:1], G).numpy(), expected)
    swapped = [Term(R=terms[0].R[[1, 0, 2]], L=terms[0].L), terms[1]]
    assert not np.allclose(_gram_ghost(swapped, G).numpy(), expected)


def test_per_sample_vectors_may_be_shared():
    v = torch.arange(6.0, dtype=torch.float64).reshape(1, 6)
    w = torch.randn(3, 6, dtype=torch.float64)
    K = param_gram([], [v, w], 3, 6).numpy()
    g = (v + w).numpy()
    np.testing.assert_allclose(K, g @ g.T)
