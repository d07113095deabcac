"""gcpo proofs' AdamW checks: a constant rescaling of the advantages leaves AdamW's
weights unchanged (ε = 0, no clipping), and ε or clipping break that by a measured amount."""

import numpy as np
import pytest

pytest.importorskip("torch")

from gcpo_analysis.theory import adam_invariance as A  # noqa: E402
from gcpo_analysis.theory.proofs import _row  # noqa: E402


def test_the_rows_hold_and_measure_what_breaks_the_invariance():
    rows = {r["claim"]: r for r in A.check_adam_invariance(np.random.default_rng(1), 3, _row)}
    const, varying, eps, clip = rows.values()
    assert const["holds"] and const["worst_violation"] < 1e-10
    assert 0 < varying["median"] < 0.05  # a small, nonzero gap: c_t varying by 4% a step
    assert eps["holds"] and eps["worst_violation"] > 1e-3
    assert clip["holds"] and clip["worst_violation"] > 1e-3


def test_a_constant_rescaling_is_invisible_and_clipping_is_not():
    rng = np.random.default_rng(0)
    x, tokens, adv, W0 = A._instance(rng)
    base = A._adamw_run(np.ones(A.STEPS), x, tokens, adv, W0)
    assert np.max(np.abs(base - W0)) > 1e-3  # the weights moved
    np.testing.assert_allclose(A._adamw_run(np.full(A.STEPS, 2.5), x, tokens, adv, W0), base, atol=1e-13)
    # ε = 1e-8 with ordinary gradients: a gap near ε/|g|, tiny but not zero
    eps = A._adamw_run(np.full(A.STEPS, 2.5), x, tokens, adv, W0, eps=1e-8)
    assert 0 < A._gap(base, eps, W0) < 1e-4
    # the NumPy gradient norm used to place the clipping threshold is torch's
    import torch

    W = torch.tensor(W0, requires_grad=True)
    logp = torch.log_softmax(torch.tensor(x[0]) @ W, dim=-1)
    (-(torch.tensor(adv[0]) * logp[torch.arange(A.BATCH), torch.tensor(tokens[0])]).mean()).backward()
    assert A._grad_norm(x[0], tokens[0], adv[0], W0) == pytest.approx(float(W.grad.norm()), rel=1e-10)
