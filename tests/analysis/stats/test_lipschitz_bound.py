"""stats.lipschitz_bound: the per-pair ratio against a hand computation and a planted L."""

import numpy as np
import pytest

from gcpo_analysis.stats.lipschitz_bound import bound_summary, pair_ratios, planted
from gcpo_analysis.theory.simulate import simulate_study


def test_pair_ratio_by_hand():
    g = np.array([[3.0, 0.0], [0.0, 4.0], [0.0, 0.0]])
    E = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    p = pair_ratios(g @ g.T, E)
    scale = np.sqrt((9 + 16 + 0) / 3)
    r01 = p[(p.i == 0) & (p.j == 1)].iloc[0]
    assert r01.grad_dist == pytest.approx(5.0) and r01.emb_dist == pytest.approx(np.sqrt(2))
    assert r01.ratio_raw == pytest.approx(5 / np.sqrt(2)) and r01.ratio == pytest.approx(5 / np.sqrt(2) / scale)
    r02 = p[(p.i == 0) & (p.j == 2)].iloc[0]  # same embedding, different gradient: no finite ratio
    assert r02.emb_dist == 0 and np.isnan(r02.ratio)


def test_planted_lipschitz_constant_is_recovered():
    """Noise-free planted g = L M (e - e_bar), M orthonormal columns: every raw ratio is L."""
    L = 3.0
    _, _, arr = simulate_study(n_queries=30, G=6, lipschitz=True, lipschitz_const=L, grad_noise=0.0, return_arrays=True)
    g, e = arr["gradients"], arr["embeddings"]
    t = bound_summary(
        {q: g[q] @ g[q].T for q in range(30)}, {q: e[q] for q in range(30)}, n_boot=20, column="ratio_raw"
    )
    est = t.set_index("statistic")["estimate"]
    assert est["ratio_q10"] == pytest.approx(L, rel=1e-6) and est["ratio_q99"] == pytest.approx(L, rel=1e-6)
    assert est["share_pairs_break_at_median_L"] == 0.0


def test_planted_versus_not_lipschitz():
    t = planted(n_queries=60, n_boot=20).query("ratio == 'ratio_raw'").set_index(["source", "statistic"])["estimate"]
    lip, non = "simulated, planted Lipschitz", "simulated, not Lipschitz"
    spread = lambda s: t[(s, "ratio_q90")] / t[(s, "ratio_q10")]  # noqa: E731
    assert spread(non) > 2 * spread(lip)
