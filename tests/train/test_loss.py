"""gcpo_train.loop.loss against hand-derived gradients and naive loops."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gcpo_train.loop.loss import grpo_loss, k3_kl, masked_var  # noqa: E402


def _categorical(seed=0, V=5, N=6):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(V, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, V, (N,), generator=g)
    adv = torch.randn(N, generator=g, dtype=torch.float64)
    return theta, y, adv


def test_gradient_is_policy_gradient_at_rho_one():
    # 1-token categorical policy: d/dθ log π(y) = e_y − softmax(θ); at ρ = 1 and β = 0 the
    # surrogate's gradient is −(1/N) Σ Ã_i (e_{y_i} − p).
    theta, y, adv = _categorical()
    logp = torch.log_softmax(theta, -1)[y].unsqueeze(1)
    mask = torch.ones_like(logp)
    out = grpo_loss(logp, logp.detach(), None, adv, mask, beta=0.0, clip_epsilon=0.2)
    out.loss.backward()
    p = torch.softmax(theta.detach(), -1).numpy()
    expected = np.zeros_like(p)
    for yi, ai in zip(y.numpy(), adv.numpy()):
        e = np.zeros_like(p)
        e[yi] = 1.0
        expected -= ai * (e - p) / len(y)
    np.testing.assert_allclose(theta.grad.numpy(), expected, atol=1e-12)


def test_kl_gradient_matches_k3_derivative():
    # d/dlogp [exp(ref−logp) − (ref−logp) − 1] = 1 − exp(ref − logp); advantages 0 isolate it.
    theta, y, _ = _categorical(seed=1)
    ref = torch.log_softmax(torch.zeros(5, dtype=torch.float64), -1)[y].unsqueeze(1)
    logp = torch.log_softmax(theta, -1)[y].unsqueeze(1)
    beta = 0.3
    out = grpo_loss(
        logp,
        logp.detach(),
        ref,
        torch.zeros(len(y), dtype=torch.float64),
        torch.ones_like(logp),
        beta=beta,
        clip_epsilon=0.2,
    )
    out.loss.backward()
    p = torch.softmax(theta.detach(), -1).numpy()
    coef = (1.0 - np.exp(ref.numpy()[:, 0] - logp.detach().numpy()[:, 0])) * beta / len(y)
    expected = np.zeros_like(p)
    for yi, c in zip(y.numpy(), coef):
        e = np.zeros_like(p)
        e[yi] = 1.0
        expected += c * (e - p)
    np.testing.assert_allclose(theta.grad.numpy(), expected, atol=1e-12)


def test_kl_zero_iff_equal_and_nonnegative():
    x = torch.randn(4, 7, dtype=torch.float64)
    assert torch.all(k3_kl(x, x) == 0)
    y = x + torch.randn(4, 7, dtype=torch.float64)
    assert torch.all(k3_kl(x, y) > 0)


def test_clip_blocks_gradient_beyond_trust_region():
    logp = torch.tensor([[0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-0.5, 0.0]], dtype=torch.float64)  # ρ = e^0.5 > 1.2 on token 0, 1 on token 1
    out = grpo_loss(
        logp, old, None, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 2), beta=0.0, clip_epsilon=0.2
    )
    out.loss.backward()
    assert logp.grad[0, 0] == 0.0  # clipped: positive advantage, ratio above 1+ε
    assert logp.grad[0, 1] == pytest.approx(-0.5)  # −(1/1)(1/2 tokens)·ρ·A
    assert float(out.clip_frac[0]) == pytest.approx(0.5)


@pytest.mark.parametrize("aggregation", ["sequence", "token", "dapo", "dr_grpo"])
def test_aggregation_matches_naive_loop_and_chunking(aggregation):
    g = torch.Generator().manual_seed(3)
    B, T = 5, 6
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64)
    old = logp + 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = logp + 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    lengths = [6, 1, 3, 4, 2]
    mask = torch.zeros(B, T)
    for i, L in enumerate(lengths):
        mask[i, :L] = 1
    beta, eps = 0.05, 0.2
    t_max = 8  # the completion cap, above the longest rollout as when none is cut
    full = grpo_loss(
        logp, old, ref, adv, mask, beta=beta, clip_epsilon=eps, aggregation=aggregation, max_completion_length=t_max
    )
    # naive
    per_seq, tot, ntok = [], 0.0, 0
    for i, L in enumerate(lengths):
        terms = []
        for t in range(L):
            r = float(np.exp(logp[i, t] - old[i, t]))
            a = float(adv[i])
            d = float(ref[i, t] - logp[i, t])
            terms.append(-min(r * a, min(max(r, 1 - eps), 1 + eps) * a) + beta * (np.exp(d) - d - 1))
        per_seq.append(np.mean(terms))
        tot += sum(terms)
        ntok += L
    naive = {"sequence": np.mean(per_seq), "dr_grpo": tot / (B * t_max)}.get(aggregation, tot / ntok)
    assert float(full.loss) == pytest.approx(naive, rel=1e-10)
    # two micro-batches with step-wide normalisers sum to the full loss
    parts = [
        grpo_loss(
            logp[s],
            old[s],
            ref[s],
            adv[s],
            mask[s],
            beta=beta,
            clip_epsilon=eps,
            aggregation=aggregation,
            n_seqs=B,
            n_tokens=float(mask.sum()),
            max_completion_length=t_max,
        )
        for s in (slice(0, 2), slice(2, 5))
    ]
    assert float(sum(p.loss for p in parts)) == pytest.approx(naive, rel=1e-10)


@pytest.mark.parametrize(
    "aggregation, match",
    [("dr_grpo", "max_completion_length"), ("mean", "loss_aggregation")],  # dr_grpo needs the cap; a typo
)
def test_aggregation_refusals(aggregation, match):
    with pytest.raises(ValueError, match=match):
        grpo_loss(
            torch.zeros(2, 3),
            torch.zeros(2, 3),
            None,
            torch.zeros(2),
            torch.ones(2, 3),
            beta=0.0,
            clip_epsilon=0.2,
            aggregation=aggregation,
        )


def test_masked_var_matches_numpy():
    x = torch.tensor([[1.0, 2.0, 4.0, 9.0], [3.0, 5.0, 0.0, 0.0], [7.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
    v = masked_var(x, mask).numpy()
    np.testing.assert_allclose(v, [np.var([1, 2, 4]), np.var([3, 5]), 0.0], rtol=1e-6)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(
            torch.zeros(2, 3), torch.zeros(2, 3), None, torch.zeros(3), torch.ones(2, 3), beta=0.0, clip_epsilon=0.2
        )
