"""CD, BoT, RD and their weights against hand-worked examples, naive loops and brute force."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.spatial.transform import Rotation

from gcpo_analysis.measures import dispersion as D


def unit(*v):
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v)


# --------------------------------------------------------------------------- hand-worked
def test_cd_hand_worked():
    # e1 = x, e2 = y, e3 = x: D12 = D23 = 1 (cos 0), D13 = 0 -> pi^T D pi = (2*1 + 2*1) / 9
    e = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0]], float)
    assert D.cosine_dispersion(e) == pytest.approx(4 / 9)


def test_cd_clips_obtuse_pairs_at_one():
    # opposite vectors: 1 - cos = 2, clipped to 1; G = 2 -> (0 + 1 + 1 + 0) / 4
    e = np.array([[1.0, 0.0], [-1.0, 0.0]])
    assert D.cosine_dispersion(e) == pytest.approx(0.5)


def test_cd_normalises_inputs():
    e = np.array([[3.0, 0.0], [0.0, 0.5]])
    assert D.cosine_dispersion(e) == pytest.approx(0.5)


def test_bot_hand_worked():
    # clusters {x, x} and {y}: Pi = (2/3, 1/3), mu_1 = x, mu_2 = y,
    # mu* = normalize(2/3 x + 1/3 y) = (2, 1)/sqrt5; cos = 2/sqrt5, 1/sqrt5
    e = np.array([[1, 0], [1, 0], [0, 1]], float)
    expected = 2 / 3 * (1 - 2 / math.sqrt(5)) / 2 + 1 / 3 * (1 - 1 / math.sqrt(5)) / 2
    assert D.barycentric_transport(e, [0, 0, 1]) == pytest.approx(expected)


def test_bot_centroid_is_normalised_mean():
    # cluster 0 has two members at +-45 degrees around x: its centroid is x.
    e = np.array([unit(1, 1), unit(1, -1), unit(0, 1)])
    mu0 = np.array([1.0, 0.0])
    mu1 = np.array([0.0, 1.0])
    star = (2 / 3 * mu0 + 1 / 3 * mu1) / np.linalg.norm(2 / 3 * mu0 + 1 / 3 * mu1)
    expected = 2 / 3 * (1 - mu0 @ star) / 2 + 1 / 3 * (1 - mu1 @ star) / 2
    assert D.barycentric_transport(e, ["a", "a", "b"]) == pytest.approx(expected)


def test_bot_antipodal_modes_have_no_consensus():
    e = np.array([[1.0, 0.0], [-1.0, 0.0]])
    assert D.barycentric_transport(e, [0, 1]) == pytest.approx(0.5)


def test_rd_hand_worked():
    # r = (0, 2, 2, 2): mean 1.5, raw = 1.5 + 3 * 0.5 = 3; RD_max(4) = 2/4 * 2 * 2 * 2 = 4
    assert D.reward_dispersion([0, 2, 2, 2]) == pytest.approx(3 / 4)
    assert D.rd_max(4) == pytest.approx(4.0)
    assert D.reward_dispersion([0, 0, 2, 2]) == pytest.approx(1.0)


def test_weights_hand_worked():
    a = 0.6 / math.log(16)
    assert D.alpha_g(16) == pytest.approx(a)
    assert D.geometry_weight(0.5, 16) == pytest.approx(1 - a * 0.25)
    assert D.rd_weight(0.5, 16) == pytest.approx(1 + a * 0.5)
    assert D.geometry_weight(1.0, 2, alpha_base=10.0) == 0.0  # clipped at 0


# --------------------------------------------------------------------------- naive loops
def naive_cd(e):
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    G = len(e)
    total = 0.0
    for i in range(G):
        for j in range(G):
            total += min(max(1 - float(e[i] @ e[j]), 0.0), 1.0) / G / G
    return total


def naive_bot(e, clusters):
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    G = len(e)
    labels = list(dict.fromkeys(clusters))
    mus, masses = [], []
    for k in labels:
        members = [e[i] for i in range(G) if clusters[i] == k]
        c = np.mean(members, axis=0)
        mus.append(c / np.linalg.norm(c))
        masses.append(len(members) / G)
    bary = sum(m * mu for m, mu in zip(masses, mus))
    star = bary / np.linalg.norm(bary)
    return min(max(sum(m * (1 - mu @ star) / 2 for m, mu in zip(masses, mus)), 0), 1)


def test_batch_equals_naive_loops():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(20, 7, 5))
    c = rng.integers(0, 3, size=(20, 7))
    r = rng.uniform(0, 2, size=(20, 7))
    cd = D.cosine_dispersion_batch(e)
    bot = D.barycentric_transport_batch(e, c)
    rd = D.reward_dispersion_batch(r)
    for n in range(20):
        assert cd[n] == pytest.approx(naive_cd(e[n]), abs=1e-6)
        assert bot[n] == pytest.approx(naive_bot(e[n], list(c[n])), abs=1e-9)
        raw = sum(abs(x - r[n].mean()) for x in r[n])
        assert rd[n] == pytest.approx(raw / D.rd_max(7))


@pytest.mark.parametrize("G", range(1, 13))
def test_rd_max_is_the_brute_force_maximum(G):
    # sum_i |r_i - mean| is convex in r, so its maximum over the box is at a vertex.
    best = max(np.abs(np.array(v) - np.mean(v)).sum() for v in itertools.product([0.0, 2.0], repeat=G))
    assert D.rd_max(G) == pytest.approx(best)
    assert D.rd_max(G, -1.0, 3.0) == pytest.approx(2 * best)


# --------------------------------------------------------------------------- edge cases
def test_group_of_one_has_no_dispersion():
    e = np.array([[0.3, 0.4]])
    assert D.cosine_dispersion(e) == 0.0
    assert D.barycentric_transport(e, [0]) == 0.0
    assert D.reward_dispersion([1.3]) == 0.0
    assert D.alpha_g(1) == 0.0
    assert D.geometry_weight(0.7, 1) == 1.0 and D.rd_weight(0.0, 1) == 1.0


def test_one_cluster_bot_is_zero_and_all_distinct_bot_is_cd_like():
    rng = np.random.default_rng(1)
    e = rng.normal(size=(6, 4))
    assert D.barycentric_transport(e, [0] * 6) == pytest.approx(0.0, abs=1e-12)
    all_distinct = D.barycentric_transport(e, list(range(6)))
    assert all_distinct == pytest.approx(naive_bot(e, list(range(6))))


def test_equal_rewards_rd_zero():
    assert D.reward_dispersion([1.2] * 8) == 0.0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: D.cosine_dispersion(np.zeros((3, 4))), "zero-norm embedding at rollout 0"),
        (lambda: D.cosine_dispersion(np.zeros((0, 4))), "empty group"),
        (lambda: D.cosine_dispersion([[1.0, np.nan]]), "NaN"),
        (lambda: D.barycentric_transport(np.eye(3), [0, 1]), "length 2 but there are 3"),
        (lambda: D.reward_dispersion([0.0, np.nan]), "NaN or infinite reward of rollout 1"),
        (lambda: D.reward_dispersion([0.0, 2.5]), r"outside the declared range \[0.0, 2.0\]"),
        (lambda: D.reward_dispersion([]), "empty group"),
        (lambda: D.rd_max(0), "integer >= 1"),
        (lambda: D.rd_weight(1.5, 4), r"\[0, 1\]"),
    ],
)
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------- properties
groups = st.integers(2, 9).flatmap(
    lambda G: st.tuples(
        arrays(np.float64, (G, 3), elements=st.floats(-1, 1)).filter(
            lambda a: (np.linalg.norm(a, axis=1) > 1e-3).all()
        ),
        st.lists(st.integers(0, 3), min_size=G, max_size=G),
        st.permutations(list(range(G))),
    )
)


@settings(max_examples=60, deadline=None)
@given(groups)
def test_measures_bounded_and_permutation_invariant(data):
    e, clusters, perm = data
    cd = D.cosine_dispersion(e)
    bot = D.barycentric_transport(e, clusters)
    assert 0.0 <= cd <= 1.0 and 0.0 <= bot <= 1.0
    assert D.cosine_dispersion(e[perm]) == pytest.approx(cd, abs=1e-6)
    assert D.barycentric_transport(e[perm], [clusters[i] for i in perm]) == pytest.approx(bot, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(groups, st.integers(0, 10_000))
def test_measures_rotation_invariant(data, seed):
    e, clusters, _ = data
    R = Rotation.random(random_state=seed).as_matrix()
    assert D.cosine_dispersion(e @ R.T) == pytest.approx(D.cosine_dispersion(e), abs=1e-5)
    assert D.barycentric_transport(e @ R.T, clusters) == pytest.approx(D.barycentric_transport(e, clusters), abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 2), min_size=1, max_size=16), st.randoms())
def test_rd_bounded_permutation_and_shift_invariant(r, rnd):
    rd = D.reward_dispersion(r)
    assert 0.0 <= rd <= 1.0
    shuffled = list(r)
    rnd.shuffle(shuffled)
    assert D.reward_dispersion(shuffled) == pytest.approx(rd, abs=1e-12)
    # scale invariance: rewards and range scaled together
    assert D.reward_dispersion([3 * x for x in r], 0.0, 6.0) == pytest.approx(rd, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    st.floats(0, 1), st.integers(1, 64), st.one_of(st.just(0.0), st.floats(1e-30, 3.0))
)  # a subnormal knob is refused
def test_weight_ranges(u, G, alpha_base):
    a = D.alpha_g(G, alpha_base)
    assert 0.0 <= D.geometry_weight(u, G, alpha_base) <= 1.0
    assert 1.0 <= D.rd_weight(u, G, alpha_base) <= 1.0 + a + 1e-12


def test_float64_in_float64_out_and_float32_kept_fast():
    from fractions import Fraction

    rng = np.random.default_rng(11)
    e = rng.normal(size=(7, 24))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    # exact reference: rational arithmetic on the float64 unit vectors as given
    ef = [[Fraction(float(x)) for x in row] for row in e]
    total = Fraction(0)
    for i in range(7):
        for j in range(7):
            if i != j:
                dot = sum(a * b for a, b in zip(ef[i], ef[j]))
                total += min(max(1 - dot, Fraction(0)), Fraction(1))
    exact = float(total / 49)
    assert D.cosine_dispersion(e) == pytest.approx(exact, rel=1e-14)
    got32 = D.cosine_dispersion(e.astype(np.float32))
    assert got32 == pytest.approx(exact, rel=1e-5) and got32 != pytest.approx(exact, rel=1e-14)
    assert D._as_embeddings(e.astype(np.float32), batch=False).dtype == np.float32
