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


def study_with_snapshot(tmp_path):
    """A study folder holding one finished snapshot of the tiny model's six groups, its gradient
    file kept, and its checkpoint (trainable.pt in parameter order, optimizer.pt)."""
    import json

    import pandas as pd

    from gcpo_analysis.study.alignment import snapshot_paths

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    model, params, opt, G = tiny(ckpt)
    torch.save({n: p.detach().clone() for n, p in model.named_parameters()}, ckpt / "trainable.pt")
    G[1] = 0.0  # a group whose rewards are all equal: no gradient
    out = tmp_path / "study"
    work = out / "work" / "s"
    work.mkdir(parents=True)
    gradient_rows.create(work / "gradients.npy", len(G), G.shape[1])
    for k, g in enumerate(G):
        gradient_rows.write_row(work / "gradients.npy", k, g)
    X = G.astype(np.float32).astype(float)
    K = X @ X.T
    rng = np.random.default_rng(0)
    spread = np.where(np.arange(6) == 1, 0.0, rng.uniform(0.1, 0.9, 6))
    frame = pd.DataFrame(
        {
            "snapshot": "s",
            "position": np.arange(6),
            "role": "pool",
            "query_id": [f"q{k}" for k in range(6)],
            "reward_mean": 0.5,
            "reward_spread": spread,
            "live": spread > 0,
            "grad_norm2": np.diag(K),
            "w_none": 1.0,
            "w_rd": 1.0 + spread,
        }
    )
    paths = snapshot_paths(out, "s")
    paths["gram"].parent.mkdir(parents=True)
    np.save(paths["gram"], K)
    frame.to_parquet(paths["groups"])
    card = {"snapshot": "s", "checkpoint": str(ckpt), "train_config": {"r_min": 0.0, "r_max": 1.0}}
    paths["card"].write_text(json.dumps(card))
    P = load_preconditioner(ckpt, [p.numel() for p in params])
    return out, X, P, frame


def test_a_snapshot_filed_in_adams_metric_keeps_its_weights_and_takes_the_metrics_gram(tmp_path):
    import json

    import pandas as pd

    from gcpo_analysis.measures.field_weights import frame_weights
    from gcpo_analysis.study.alignment import snapshot_paths, snapshots
    from gcpo_train.align.adam_metric import write_adam_snapshot

    out, X, P, frame = study_with_snapshot(tmp_path)
    assert write_adam_snapshot(out, "s", block=4) == "s_adam"
    assert snapshots(out) == ["s", "s_adam"]
    paths = snapshot_paths(out, "s_adam")
    K = np.load(paths["gram"])
    XP = X * P
    np.testing.assert_allclose(K, XP @ XP.T, rtol=1e-6, atol=1e-9 * np.abs(XP @ XP.T).max())
    groups = pd.read_parquet(paths["groups"])
    assert (groups["snapshot"] == "s_adam").all()
    np.testing.assert_array_equal(groups["w_rd"], frame["w_rd"])  # ω is the trainer's, not the metric's
    np.testing.assert_allclose(groups["grad_norm2"], np.diag(K))
    np.testing.assert_allclose(groups["grad_norm2_raw"], frame["grad_norm2"])
    raw = frame_weights(frame["reward_spread"], frame["grad_norm2"], 0.0, 1.0)
    np.testing.assert_allclose(groups["w_inv_grad_norm"], raw["inv_grad_norm"])  # from the raw norm
    assert groups["w_inv_grad_norm"].iloc[1] == 1.0  # the group with no gradient
    card = json.loads(paths["card"].read_text())
    assert card["metric"] == "adam" and card["euclidean_snapshot"] == "s"
    assert card["preconditioner"]["adam_step"] == [7.0]
    assert 0.5 < card["frozen_v_check"]["cos_median"] <= 1.0 + 1e-12


def test_adams_metric_refuses_what_it_cannot_file(tmp_path):
    import json

    from gcpo_analysis.study.alignment import snapshot_paths
    from gcpo_train.align.adam_metric import write_adam_snapshot

    out, X, _, _ = study_with_snapshot(tmp_path)
    with pytest.raises(ValueError, match="no finished snapshot of that name"):
        write_adam_snapshot(out, "t")
    gradients = out / "work" / "s" / "gradients.npy"
    gradient_rows.write_row(gradients, 0, 2 * X[0])  # another run's gradients
    with pytest.raises(ValueError, match="is not snapshot s's"):
        write_adam_snapshot(out, "s")
    gradients.unlink()
    with pytest.raises(ValueError, match="--keep-gradients"):
        write_adam_snapshot(out, "s")
    card = snapshot_paths(out, "s")["card"]
    card.write_text(json.dumps({"snapshot": "s", "checkpoint": None}))
    with pytest.raises(ValueError, match="Adam's state is empty at step 0"):
        write_adam_snapshot(out, "s")
