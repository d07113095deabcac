"""The update-alignment statistics (gcpo_analysis.stats.alignment) against explicit vectors."""

import numpy as np
import pytest

from gcpo_analysis.stats.alignment import (
    ORACLE,
    SHUFFLED,
    alignment,
    batch_statistics,
    bootstrap_p,
    deltas,
    draw_batches,
    group_bootstrap,
    normalise_weights,
    oracle_weights,
    reference_terms,
    shuffle_weights,
)


def pool(P=24, D=40, dead=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(P, D)) + 0.4  # a shared direction, so the expected gradient is not 0
    X[rng.choice(P, dead, replace=False)] = 0.0  # groups whose rewards tie: no gradient
    weights = {
        "none": np.ones(P),
        "norm": np.linalg.norm(X, axis=1) + 0.2,  # linked to the group
        "random": rng.uniform(0.2, 2.0, P),
    }
    return X, weights


def explicit(X, idx, W, b_vec=None):
    """cos, ĝ·r, ‖ĝ‖² per batch and the SNR, from the vectors themselves (naive loops)."""
    P = len(X)
    cos, inner, norm2, ghat = [], [], [], []
    for row, w in zip(idx, W):
        live = np.array([X[q] @ X[q] > 0 for q in row])
        scale = np.abs(w[live]).mean() if live.any() else 0.0
        wn = w / scale if scale > 0 else np.zeros_like(w)
        g = sum(wn[j] * X[q] for j, q in enumerate(row)) / len(row)
        r = X[[p for p in range(P) if p not in set(row)]].mean(0) if b_vec is None else b_vec
        ghat.append(g)
        inner.append(g @ r)
        norm2.append(g @ g)
        cos.append(g @ r / np.linalg.norm(g) / np.linalg.norm(r) if g @ g > 0 else np.nan)
    n = len(ghat)
    pairs = [ghat[a] @ ghat[b] for a in range(n) for b in range(n) if a != b]
    signal = np.mean(pairs)
    snr = signal / (np.mean(norm2) - signal)
    return np.array(cos), np.array(inner), np.array(norm2), snr


@pytest.mark.parametrize("k", [1, 4, 7])
def test_gram_route_equals_explicit_vectors(k):
    X, weights = pool()
    K = X @ X.T
    idx = draw_batches(len(X), k, 30, np.random.default_rng(1))
    c, rnorm2 = reference_terms(K, idx)
    live = np.diag(K)[idx] > 0
    for w in weights.values():
        W = w[idx]
        stats, snr = batch_statistics(K, idx, normalise_weights(W, live), c, rnorm2)
        cos, inner, norm2, snr_x = explicit(X, idx, W)
        np.testing.assert_allclose(stats["cos"], cos, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stats["inner"], inner, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stats["norm2"], norm2, rtol=1e-9, atol=1e-12)
        assert snr == pytest.approx(snr_x, rel=1e-9)


def test_fixed_reference_route_equals_explicit():
    X, weights = pool()
    R = np.random.default_rng(3).normal(size=(10, X.shape[1])) + 0.4
    r = R.mean(0)
    K = X @ X.T
    idx = draw_batches(len(X), 4, 25, np.random.default_rng(2))
    c, rnorm2 = reference_terms(K, idx, b=X @ r, ref_norm2=(R @ R.T).mean())
    W = weights["norm"][idx]
    stats, snr = batch_statistics(K, idx, normalise_weights(W, np.diag(K)[idx] > 0), c, rnorm2)
    cos, _, _, snr_x = explicit(X, idx, W, b_vec=r)
    np.testing.assert_allclose(stats["cos"], cos, rtol=1e-9)
    assert snr == pytest.approx(snr_x, rel=1e-9)


def test_hand_example_two_groups():
    # g1 = (1, 0), g2 = (0, 1), g3 = (1, 1); batch {g1, g2}, reference g3 (leave-batch-out):
    # equal weights: ĝ = (1/2, 1/2), cos = 1; weights (3, 1) -> w̃ = (1.5, 0.5), ĝ = (0.75, 0.25),
    # cos = (0.75 + 0.25) / (sqrt(0.625) sqrt(2)) = 1 / sqrt(1.25)
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    K = X @ X.T
    idx = np.array([[0, 1]])
    c, rnorm2 = reference_terms(K, idx)
    assert c.tolist() == [[1.0, 1.0]] and rnorm2.tolist() == [2.0]
    s1, _ = batch_statistics(
        K,
        np.repeat(idx, 2, 0),
        normalise_weights(np.ones((2, 2)), np.ones((2, 2), bool)),
        np.repeat(c, 2, 0),
        np.repeat(rnorm2, 2),
    )
    assert s1["cos"][0] == pytest.approx(1.0)
    w = normalise_weights(np.array([[3.0, 1.0]]), np.ones((1, 2), bool))
    assert w.tolist() == [[1.5, 0.5]]
    s2, _ = batch_statistics(K, idx.repeat(2, 0), w.repeat(2, 0), c.repeat(2, 0), rnorm2.repeat(2))
    assert s2["cos"][0] == pytest.approx(1 / np.sqrt(1.25))


def test_oracle_beats_every_weighting_on_every_batch():
    X, weights = pool(P=30)
    K = X @ X.T
    rng = np.random.default_rng(4)
    for k in (2, 4, 8):
        per_batch, _, _ = alignment(K, weights, k, 200, rng)
        oracle = per_batch[ORACLE]["cos"]
        for name, stats in per_batch.items():
            if "cos" not in stats:  # the cross-fitted ceilings: no cosine on the full reference
                continue
            ok = np.isfinite(stats["cos"])
            assert (oracle[ok] >= stats["cos"][ok] - 1e-9).all(), name
        # and any other real weight vector, drawn at random (negative ones too)
        idx = draw_batches(len(X), k, 50, rng)
        c, rnorm2 = reference_terms(K, idx)
        live = np.diag(K)[idx] > 0
        best, _ = batch_statistics(K, idx, normalise_weights(oracle_weights(K, idx, c), live), c, rnorm2)
        for _ in range(20):
            other, _ = batch_statistics(K, idx, normalise_weights(rng.normal(size=idx.shape), live), c, rnorm2)
            ok = np.isfinite(other["cos"])
            assert (best["cos"][ok] >= other["cos"][ok] - 1e-9).all()


def test_uniform_rescaling_changes_nothing():
    X, weights = pool()
    K = X @ X.T
    scaled = {name: (w * 7.5 if name != "none" else w) for name, w in weights.items()}
    a, snr_a, idx_a = alignment(K, weights, 4, 60, np.random.default_rng(5))
    b, snr_b, idx_b = alignment(K, scaled, 4, 60, np.random.default_rng(5))
    assert (idx_a == idx_b).all()
    for name in a:
        for stat in a[name]:  # cos, inner, norm2, cos_mu; the ceilings' own statistics
            np.testing.assert_allclose(a[name][stat], b[name][stat], rtol=1e-12, equal_nan=True)
        assert snr_a[name] == pytest.approx(snr_b[name], rel=1e-12, nan_ok=True)
    # a different factor in every batch too
    idx = draw_batches(len(X), 4, 40, np.random.default_rng(6))
    c, rnorm2 = reference_terms(K, idx)
    live = np.diag(K)[idx] > 0
    W = weights["random"][idx]
    factors = np.random.default_rng(7).uniform(0.1, 10, (len(idx), 1))
    s1, p1 = batch_statistics(K, idx, normalise_weights(W, live), c, rnorm2)
    s2, p2 = batch_statistics(K, idx, normalise_weights(W * factors, live), c, rnorm2)
    np.testing.assert_allclose(s1["cos"], s2["cos"], rtol=1e-12, equal_nan=True)
    assert p1 == pytest.approx(p2, rel=1e-12)


def test_shuffle_keeps_each_batch_multiset_and_breaks_the_link():
    W = np.arange(400, dtype=float).reshape(100, 4)
    S = shuffle_weights(W, np.random.default_rng(8))
    assert (np.sort(S, axis=1) == np.sort(W, axis=1)).all()
    assert (S != W).any()
    X, weights = pool()
    per_batch, _, idx = alignment(X @ X.T, weights, 4, 50, np.random.default_rng(9))
    assert "none" + SHUFFLED not in per_batch and "norm" + SHUFFLED in per_batch


def test_dead_groups_do_not_set_the_scale():
    # a dead group's weight changes neither ĝ nor its normalisation
    X, _ = pool(dead=0)
    X[0] = 0.0
    K = X @ X.T
    idx = np.array([[0, 1, 2, 3]])
    c, rnorm2 = reference_terms(K, idx)
    live = np.diag(K)[idx] > 0
    a, _ = batch_statistics(
        K,
        idx.repeat(2, 0),
        normalise_weights(np.array([[1.0, 1, 1, 1]] * 2), live.repeat(2, 0)),
        c.repeat(2, 0),
        rnorm2.repeat(2),
    )
    b, _ = batch_statistics(
        K,
        idx.repeat(2, 0),
        normalise_weights(np.array([[50.0, 1, 1, 1]] * 2), live.repeat(2, 0)),
        c.repeat(2, 0),
        rnorm2.repeat(2),
    )
    np.testing.assert_allclose(a["norm2"], b["norm2"], rtol=1e-12)


def test_bootstrap_copies_of_a_batch_member_leave_its_reference():
    # positions 0 and 1 are copies of group 5: a batch holding position 0 must not use position 1
    X, _ = pool()
    ids = np.array([5, 5] + list(range(6, 20)))
    Kr = (X @ X.T)[np.ix_(ids, ids)]
    idx = np.array([[0, 2]])
    c, rnorm2 = reference_terms(Kr, idx, ids=ids)
    rest = [p for p in range(len(ids)) if ids[p] not in (ids[0], ids[2])]
    r = X[ids[rest]].mean(0)
    np.testing.assert_allclose(c[0], [X[5] @ r, X[ids[2]] @ r], rtol=1e-12)
    assert rnorm2[0] == pytest.approx(r @ r)


def test_group_bootstrap_is_centred_on_the_estimate_and_p_behaves():
    X, weights = pool(P=40)
    K = X @ X.T
    per_batch, snr, _ = alignment(K, weights, 4, 200, np.random.default_rng(10))
    est = deltas(per_batch, snr)
    boot = group_bootstrap(K, weights, 4, 200, 60, np.random.default_rng(11))
    bc, bs = boot["dcos"], boot["dsnr"]
    assert set(bc) == set(est["dcos"]) and set(boot) == set(est) == {"dcos", "dcos_mu", "dsnr"}
    assert (bc["none"] == 0).all() and (bs["none"] == 0).all() and (boot["dcos_mu"]["none"] == 0).all()
    assert np.quantile(bc[ORACLE], 0.025) > 0  # the ceiling is above equal weights
    assert bootstrap_p(bc[ORACLE]) < 0.05
    for name in ("norm", ORACLE):  # the bootstrap's replicates sit around the estimate
        assert np.quantile(bc[name], 0.01) < est["dcos"][name] < np.quantile(bc[name], 0.99)
    assert bootstrap_p(np.array([-1.0, 1.0, 2.0, -2.0])) == 1.0
    # the add-one: never 0; 2 (1 + smaller tail) / (B + 1), by hand
    assert bootstrap_p(np.ones(999)) == pytest.approx(2 / 1000)
    assert bootstrap_p(np.r_[np.ones(95), -np.ones(4)]) == pytest.approx(2 * 5 / 100)
    assert np.isnan(bootstrap_p(np.array([np.nan])))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="1 <= k <= 3"):
        draw_batches(3, 4, 2, np.random.default_rng(0))
    X, weights = pool()
    with pytest.raises(ValueError, match="'none'"):
        alignment(X @ X.T, {"norm": weights["norm"]}, 4, 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="every pool group"):
        reference_terms(np.eye(3), np.array([[0, 1, 2]]))


def test_a_resample_without_groups_outside_the_batch_gives_no_reference():
    X, _ = pool()
    ids = np.array([3, 3, 4, 4])
    Kr = (X @ X.T)[np.ix_(ids, ids)]
    c, rnorm2 = reference_terms(Kr, np.array([[0, 2], [0, 1]]), ids=ids)
    assert np.isnan(rnorm2[0]) and (c[0] == 0).all()  # positions 1 and 3 are copies of the batch
    assert rnorm2[1] == pytest.approx(X[4] @ X[4])  # batch {3, 3}: the reference is group 4
    stats, _ = batch_statistics(Kr, np.array([[0, 2]]), np.ones((1, 2)), c[:1], rnorm2[:1])
    assert np.isnan(stats["cos"][0])
