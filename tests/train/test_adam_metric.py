"""The Adam-metric Gram (gcpo_train.align.adam_metric) against explicitly preconditioned gradients
of a tiny model with a real AdamW state."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gcpo_train.align import rows as gradient_rows  # noqa: E402
from gcpo_train.align.adam_metric import adam_preconditioner, load_preconditioner, metric_gram  # noqa: E402


def tiny(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.99), eps=1e-6)
    for _ in range(7):  # a few real steps, so exp_avg_sq and step are what a checkpoint holds
        opt.zero_grad()
        model(torch.randn(8, 5)).pow(2).mean().backward()
        opt.step()
    torch.save(opt.state_dict(), tmp_path / "optimizer.pt")
    grads = []
    for k in range(6):  # six "groups": each one's own gradient, flattened in parameter order
        model.zero_grad()
        torch.manual_seed(100 + k)
        model(torch.randn(3, 5)).sum().backward()
        grads.append(torch.cat([p.grad.ravel() for p in params]).double().numpy())
    return model, params, opt, np.array(grads)


def test_the_gram_in_adams_metric_equals_explicitly_preconditioned_gradients(tmp_path):
    model, params, opt, G = tiny(tmp_path)
    sizes = [p.numel() for p in params]
    P = load_preconditioner(tmp_path, sizes)
    # torch's own denominator, parameter by parameter
    explicit = []
    for p in params:
        s = opt.state[p]
        denom = (s["exp_avg_sq"] / (1 - 0.99 ** float(s["step"]))).sqrt() + 1e-6
        explicit.append((1 / denom).ravel().double().numpy())
    np.testing.assert_allclose(P, np.concatenate(explicit), rtol=1e-6)  # torch divides in float32
    path = tmp_path / "gradients.npy"
    gradient_rows.create(path, len(G), G.shape[1])
    for k, g in enumerate(G):
        gradient_rows.write_row(path, k, g)
    G32 = G.astype(np.float32).astype(float)  # the file holds float32 rows
    K = metric_gram(path, [4, 0, 2, 5], P, block=3)
    X = G32[[4, 0, 2, 5]] * P
    np.testing.assert_allclose(K, X @ X.T, rtol=1e-6, atol=1e-6 * np.abs(X @ X.T).max())
    assert not np.allclose(K / np.abs(K).max(), (G32[[4, 0, 2, 5]] @ G32[[4, 0, 2, 5]].T) / np.abs(G32).max() ** 2)


def test_a_scalar_clip_changes_no_cosine_in_the_metric(tmp_path):
    _, params, _, G = tiny(tmp_path)
    P = load_preconditioner(tmp_path, [p.numel() for p in params])
    g, r = G[:3].sum(0), G[3:].mean(0)
    clipped = g * min(1.0, 0.1 / np.linalg.norm(g))  # the trainer's global-norm clip: one scalar
    cos = (P * g) @ (P * r) / np.linalg.norm(P * g) / np.linalg.norm(P * r)
    cos_clipped = (P * clipped) @ (P * r) / np.linalg.norm(P * clipped) / np.linalg.norm(P * r)
    assert cos_clipped == pytest.approx(cos, rel=1e-12)


def test_bad_optimizer_states_are_refused(tmp_path):
    _, params, opt, _ = tiny(tmp_path)
    sizes = [p.numel() for p in params]
    state = opt.state_dict()
    with pytest.raises(ValueError, match="holds 4 parameters, the model trains 3"):
        adam_preconditioner(state, sizes[:3])
    with pytest.raises(ValueError, match="parameter 1 has 4 numbers"):
        adam_preconditioner(state, [sizes[0], 4 * 5, *sizes[2:]])
    with pytest.raises(ValueError, match="no optimizer.pt"):
        load_preconditioner(tmp_path / "nowhere", sizes)
    (tmp_path / "x").mkdir()
    import pickle

    (tmp_path / "x" / "optimizer.pt").write_bytes(pickle.dumps({"a": object()}))
    with pytest.raises(Exception, match="refusing checkpoint file"):
        load_preconditioner(tmp_path / "x", sizes)
