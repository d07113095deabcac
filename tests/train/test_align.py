"""The update-alignment study's model half (gcpo_train.align) on a tiny random llama: the Gram of
per-group gradients reproduces the trainer-form batch gradient of every weighting, and the
snapshot command writes a resumable folder whose tables regenerate from its frames."""

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from helpers.alignment_sizes import small_alignment_sizes  # noqa: E402
from helpers.loop_setup import loop_config, queries, word_reward  # noqa: E402

from gcpo_analysis.measures.advantages import grpo_advantages  # noqa: E402
from gcpo_analysis.stats.alignment import (  # noqa: E402
    batch_statistics,
    draw_batches,
    normalise_weights,
    reference_terms,
)
from gcpo_train.config import TrainConfig  # noqa: E402


@pytest.fixture(autouse=True)
def _small_sizes(monkeypatch):
    small_alignment_sizes(monkeypatch)


@pytest.mark.parametrize("aggregation", ["dapo", "sequence"])
def test_gram_route_equals_explicit_weighted_batch_gradients(tmp_path, aggregation):
    """For batches of groups with weights ω, the trainer's loss (Ã = ω A, the step's normalisers:
    n_seqs = kG rollouts, n_tokens = the batch's tokens) backpropagated over the whole batch gives
    a gradient whose cosine with the leave-batch-out reference and whose SNR (after the per-batch
    scalar of the aggregation and the mean-1 normalisation) equal the Gram route's, to 1e-6."""
    import torch

    from gcpo_train.align.gradients import load_policy, rollouts_gradient, sample_group
    from gcpo_train.sampling.generate import concat_token_batches

    cfg = TrainConfig(**loop_config(tmp_path, beta=0.0, loss_aggregation=aggregation, group_size=4))
    model, tok = load_policy(cfg, None)
    model.double()
    with torch.no_grad():  # B = 0 at initialisation; move off it so both LoRA factors get gradients
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    G, T, P = cfg.group_size, cfg.max_new_tokens, 6
    rows = queries(P).to_dict("records")
    groups = [sample_group(model, tok, cfg, row, seed=10 + k, reward_fn=word_reward) for k, row in enumerate(rows)]
    adv = [grpo_advantages(r, cfg.eps) for _, r, _ in groups]
    X = np.stack(
        [rollouts_gradient(model, cfg, b, a, n_seqs=G, n_tokens=float(G * T))[0] for (b, _, _), a in zip(groups, adv)]
    )
    assert X.dtype == np.float64 and (np.abs(X).sum(1) > 0).sum() >= 4
    omega = np.random.default_rng(0).uniform(0.3, 2.0, P)
    K = X @ X.T
    k = 3
    idx = draw_batches(P, k, 8, np.random.default_rng(1))
    c, rnorm2 = reference_terms(K, idx)
    live = np.diag(K)[idx] > 0
    stats, snr = batch_statistics(K, idx, normalise_weights(omega[idx], live), c, rnorm2)
    cos_x, ghat = [], []
    for row, lv in zip(idx, live):
        batch = concat_token_batches([groups[q][0] for q in row], tok.pad_token_id)
        advantages = np.concatenate([omega[q] * adv[q] for q in row])
        n_tok = float(batch.completion_mask.sum())
        g, _ = rollouts_gradient(model, cfg, batch, advantages, n_seqs=k * G, n_tokens=n_tok)
        r = X[[p for p in range(P) if p not in set(row)]].mean(0)
        cos_x.append(g @ r / np.linalg.norm(g) / np.linalg.norm(r))
        # the trainer's gradient is a per-batch scalar times Σ ω g_q: undo it, then normalise ω
        scalar = n_tok / (G * T * k) if aggregation == "dapo" else 1.0
        ghat.append(g * scalar / omega[row][lv].mean())
    np.testing.assert_allclose(stats["cos"], cos_x, rtol=1e-6, atol=1e-9)
    n = len(ghat)
    signal = np.mean([ghat[a] @ ghat[b] for a in range(n) for b in range(n) if a != b])
    norm2 = np.array([v @ v for v in ghat])
    np.testing.assert_allclose(stats["norm2"], norm2, rtol=1e-6)
    assert snr == pytest.approx(signal / (norm2.mean() - signal), rel=1e-6)


def _tiny_data(path):
    """A NarrativeQA-spans style folder of tiny-vocabulary questions (train.jsonl, test.jsonl)."""
    path.mkdir()
    qs = queries(6)
    for split in ("train", "test"):
        with open(path / f"{split}.jsonl", "w") as fh:
            for i, r in enumerate(qs.itertuples()):
                rec = {
                    "id": f"{split}{i}",
                    "question": r.question,
                    "passage": r.context,
                    "answer": r.references,
                    "story": i,
                }
                fh.write(json.dumps(rec) + "\n")


def test_snapshot_command_resumes_and_restats(tmp_path, monkeypatch):
    import yaml

    from gcpo_analysis.cli import main as cli
    from gcpo_analysis.study.alignment import snapshot_paths
    from gcpo_train.align import gradients

    _tiny_data(tmp_path / "data")
    cfg = loop_config(tmp_path, data_path=str(tmp_path / "data"), beta=0.0, group_size=4)
    cfg.pop("output_dir")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    calls = []
    real = gradients.group_gradient

    class Stop(Exception):
        pass

    def counted(*a, **kw):  # a dense reward, so that groups carry gradients
        if len(calls) == stop_after:
            raise Stop  # as a killed run stops
        calls.append(1)
        return real(*a, **{**kw, "reward_fn": word_reward})

    monkeypatch.setattr(gradients, "group_gradient", counted)
    out = tmp_path / "study"
    args = ["--traceback", "align", "--config", str(tmp_path / "c.yaml"), "--snapshot", "s0", "--n_pool", "5"]
    args += ["--output", str(out), "--no-progress"]
    stop_after = 2
    with pytest.raises(Stop):
        cli(args)
    assert len(list((out / "work" / "s0" / "parts").glob("group_*.json"))) == 2
    calls.clear()
    stop_after = 99
    cli(args)
    assert len(calls) == 3  # the resumed run did only the 3 missing groups
    paths = snapshot_paths(out, "s0")
    groups = pd.read_parquet(paths["groups"])
    assert len(groups) == 5 and {"w_none", "w_se", "w_bot_rd", "w_q_hawkeye"} <= set(groups.columns)
    assert groups["live"].sum() >= 3
    assert np.load(paths["gram"]).shape == (5, 5)
    assert not (out / "work" / "s0" / "gradients.npy").exists()
    card = json.loads(paths["card"].read_text())
    assert card["n_pool_done"] == 5 and card["trained_parameters"] > 0
    tables = {name: (out / name).read_bytes() for name in ("alignment.md", "headline.md", "reading.md")}
    cli(["align", "--restat", str(out)])
    assert {name: (out / name).read_bytes() for name in tables} == tables
    # other settings in the same folder are refused
    with pytest.raises(ValueError, match="other settings"):
        cli([*args, "--seed", "1"])


def test_a_run_stopped_while_finishing_finishes_without_the_model(tmp_path, monkeypatch):
    """Every group sampled, the Gram not yet written (killed while finishing): the rerun writes
    the snapshot from the gradient file alone (it loaded the model for nothing, and formed the
    Gram's blocks beside it)."""
    import yaml

    from gcpo_analysis.cli import main as cli
    from gcpo_analysis.study.alignment import snapshot_paths
    from gcpo_train.align import gradients
    from gcpo_train.align import run as align_run

    _tiny_data(tmp_path / "data")
    cfg = loop_config(tmp_path, data_path=str(tmp_path / "data"), beta=0.0, group_size=4)
    cfg.pop("output_dir")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    real_gradient = gradients.group_gradient
    monkeypatch.setattr(
        gradients, "group_gradient", lambda *a, **kw: real_gradient(*a, **{**kw, "reward_fn": word_reward})
    )
    real_finish = align_run.finish_snapshot

    class Killed(Exception):
        pass

    def killed(*a, **kw):
        raise Killed

    monkeypatch.setattr(align_run, "finish_snapshot", killed)
    out = tmp_path / "study"
    args = ["--traceback", "align", "--config", str(tmp_path / "c.yaml"), "--snapshot", "s0", "--n_pool", "5"]
    args += ["--output", str(out), "--no-progress"]
    with pytest.raises(Killed):
        cli(args)
    assert not snapshot_paths(out, "s0")["card"].exists()
    monkeypatch.setattr(align_run, "finish_snapshot", real_finish)

    def no_model(*a, **kw):
        raise AssertionError("the model was loaded to finish a fully sampled snapshot")

    monkeypatch.setattr(gradients, "load_policy", no_model)
    cli(args)
    assert np.load(snapshot_paths(out, "s0")["gram"]).shape == (5, 5)
