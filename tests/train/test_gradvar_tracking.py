"""track_gradvar: V_train of every training group from the training backward's hooks equals a
naive loop that backpropagates each rollout's term of the step objective alone; tracking
changes no trained weight; 2 gloo processes give one process's V."""

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("accelerate")

from helpers.embedders import HashEmbedder  # noqa: E402
from helpers.loop_setup import launch_two_processes, loop_config, queries, word_reward  # noqa: E402

from gcpo_analysis.gradvar import gradient_variance  # noqa: E402
from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer  # noqa: E402
from gcpo_train.config import TrainConfig  # noqa: E402
from gcpo_train.loop.loss import grpo_loss  # noqa: E402
from gcpo_train.loop.trainer import GCPOLoopTrainer  # noqa: E402
from gcpo_train.model.logprobs import token_logprobs_and_entropy  # noqa: E402


def make(tmp_path, family="llama", float64=True, name="run", **kw):
    import torch

    tracked = dict(
        model=f"tiny:{family}", modulator="bot_rd", micro_batch_size=3, share_prompt=False, track_gradvar=True
    )
    base = loop_config(tmp_path, name, **{**tracked, **kw})
    tok = tiny_tokenizer()
    # no dropout (GPT-2's config has 0.1): the naive loop must see the same network as the step
    nodrop = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0) if family == "gpt2" else {}
    model = tiny_causal_lm(family, vocab_size=len(tok), **nodrop)
    if float64:
        model = model.to(torch.float64)
    return GCPOLoopTrainer(
        TrainConfig(**base),
        model=model,
        tokenizer=tok,
        queries=queries(),
        reward_fn=word_reward,
        embedder=HashEmbedder(),
    )


def naive_gradients(tr, batch, advantages, before):
    """(N, P) per-rollout gradients h_i: each rollout's term of the step objective (its share of
    grpo_loss with the step-wide normalisers) run and backpropagated alone."""
    import torch

    cfg, mask = tr.config, batch.completion_mask
    n_rollouts, n_tokens = cfg.queries_per_step * cfg.group_size, float(mask.sum())
    rows = []
    tr.model.train()
    for i in range(mask.shape[0]):
        r = slice(i, i + 1)
        with torch.enable_grad():
            logp = token_logprobs_and_entropy(
                tr.policy, batch.input_ids[r], batch.attention_mask[r], batch.n_completion, cfg.temperature
            ).logp
            old = logp.detach() if before.old_logp is None else before.old_logp[r]
            out = grpo_loss(
                logp,
                old,
                None if before.ref_logp is None else before.ref_logp[r],
                advantages[r],
                mask[r],
                beta=cfg.beta,
                clip_epsilon=cfg.clip_epsilon,
                aggregation=cfg.loss_aggregation,
                n_seqs=n_rollouts,
                n_tokens=n_tokens,
            )
            grads = torch.autograd.grad(out.loss, tr.params, allow_unused=True)
        rows.append(
            torch.cat(
                [
                    torch.zeros(p.numel(), dtype=torch.float64) if g is None else g.reshape(-1).double()
                    for p, g in zip(tr.params, grads)
                ]
            )
        )
    return torch.stack(rows)


def step_with_naive(tr, step=1):
    """Run one tracked step; return (frame, naive per-rollout gradients taken before the update)."""
    seen = {}
    update = tr._update

    def spy(batch, advantages, before):
        seen["h"] = naive_gradients(tr, batch, advantages, before)
        return update(batch, advantages, before)

    tr._update = spy
    _, frame = tr.train_step(step)
    return frame, seen["h"]


def naive_v(h, G):
    K = (h @ h.T).numpy()
    return np.array([gradient_variance(K[k : k + G, k : k + G], np.ones(G)) for k in range(0, len(K), G)]), np.array(
        [np.trace(K[k : k + G, k : k + G]) / G for k in range(0, len(K), G)]
    )


@pytest.mark.slow
@pytest.mark.parametrize("share_prompt", [False, True], ids=["full_rows", "shared_prompt"])
@pytest.mark.parametrize(
    "family,use_lora,aggregation",
    [("llama", True, "sequence"), ("llama", False, "token"), ("gpt2", True, "token"), ("gpt2", False, "sequence")],
)
def test_v_train_equals_naive_per_rollout_backward(tmp_path, family, use_lora, aggregation, share_prompt):
    """Micro-batches of 3 over groups of 4, β > 0, float64: relative 1e-6. Full rows: the second
    group is split 2 + 2 over two chunks, the first 3 + 1; a shared prompt: each group 3 + 1,
    its prompt run once per chunk and each rollout's gradient taken back through it on its own.
    Dropping any one rollout's term from the naive loop moves V further than that, so a tracker
    that lost a rollout (or a rollout's prompt part) would fail."""
    tr = make(tmp_path, family, use_lora=use_lora, loss_aggregation=aggregation, share_prompt=share_prompt)
    assert tr.share_prompt == share_prompt
    # step 2: the policy has moved from the reference, so the KL term's gradient is live
    for fr, hh in (step_with_naive(tr, 1), step_with_naive(tr, 2)):
        groups = fr.groupby("query_id", sort=False).first()
        v, n2 = naive_v(hh, 4)
        assert (v > 0).all()
        np.testing.assert_allclose(groups["grad_var"].to_numpy(), v, rtol=1e-6)
        np.testing.assert_allclose(groups["grad_norm2_mean"].to_numpy(), n2, rtol=1e-6)
        for j in range(len(hh)):  # one rollout's term dropped: the test would see it
            dropped = hh.clone()
            dropped[j] = 0
            vd, _ = naive_v(dropped, 4)
            assert not np.allclose(groups["grad_var"].to_numpy(), vd, rtol=1e-6), j


def test_shared_prompt_groups_split_two_and_two(tmp_path):
    """A shared prompt with micro-batches of 2 over groups of 4 (full fine-tuning: tied
    embedding, norms): each chunk runs the prompt once and the cross blocks join two chunks'
    factors shared by their samples; V equals the naive loop (relative 1e-6, float64)."""
    tr = make(tmp_path, "llama", use_lora=False, share_prompt=True, micro_batch_size=2)
    frame, h = step_with_naive(tr, 1)
    v, n2 = naive_v(h, 4)
    groups = frame.groupby("query_id", sort=False).first()
    np.testing.assert_allclose(groups["grad_var"].to_numpy(), v, rtol=1e-6)
    np.testing.assert_allclose(groups["grad_norm2_mean"].to_numpy(), n2, rtol=1e-6)


@pytest.mark.parametrize("share_prompt", [False, True], ids=["full_rows", "shared_prompt"])
def test_v_train_step1_float32_gpt2_full(tmp_path, share_prompt):
    """float32 model (the trainer's own dtype), first step: relative 1e-4 (with a shared prompt
    the last rollout's prompt gradient is the summed one minus the others', in float32)."""
    tr = make(tmp_path, "gpt2", float64=False, use_lora=False, share_prompt=share_prompt)
    frame, h = step_with_naive(tr, 1)
    groups = frame.groupby("query_id", sort=False).first()
    v, n2 = naive_v(h, 4)
    np.testing.assert_allclose(groups["grad_var"].to_numpy(), v, rtol=1e-4)
    np.testing.assert_allclose(groups["grad_norm2_mean"].to_numpy(), n2, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("share_prompt", [False, True], ids=["full_rows", "shared_prompt"])
def test_tracking_changes_no_weight(tmp_path, share_prompt):
    """Trained weights with and without tracking are bit-identical (2 steps, LoRA and full): the
    tracker only reads the training backward (and, with a shared prompt, adds input-gradient
    passes that write no .grad)."""
    import torch

    for use_lora in (True, False):
        kw = dict(float64=False, use_lora=use_lora, share_prompt=share_prompt)
        on = make(tmp_path, name=f"on{use_lora}", **kw)
        off = make(tmp_path, name=f"off{use_lora}", track_gradvar=False, **kw)
        for step in (1, 2):
            on.train_step(step)
            off.train_step(step)
        for (name, a), b in zip(on.policy.named_parameters(), off.policy.parameters()):
            assert torch.equal(a, b), name


@pytest.mark.slow
def test_log_and_frame_columns(tmp_path):
    tr = make(tmp_path, float64=False, queries_per_step=6, steps=1, micro_batch_size=8)
    tr.train()
    row = json.loads((tmp_path / "run" / "log.jsonl").read_text().splitlines()[0])
    frame = pd.read_parquet(tmp_path / "run" / "rollouts" / "step_000001.parquet")
    assert {"grad_var", "grad_norm2_mean", "adv_all_zero", "bot", "rd", "w_bot", "step"} <= set(frame.columns)
    groups = frame.groupby("query_id", sort=False).first()
    assert row["frac_grad_var_zero"] == pytest.approx((groups["grad_var"] == 0).mean())
    assert row["grad_var_mean"] == pytest.approx(groups["grad_var"].mean())
    from scipy.stats import spearmanr

    expected = spearmanr(groups["bot"], groups["grad_var"]).statistic
    assert row["rho_bot_grad_var"] == pytest.approx(expected)
    assert row["time_gradvar"] > 0


def test_config_refuses_gradient_checkpointing():
    with pytest.raises(ValueError, match="track_gradvar needs gradient_checkpointing: false"):
        TrainConfig(model="tiny:llama", track_gradvar=True, gradient_checkpointing=True)
    assert TrainConfig(model="tiny:llama", track_gradvar=True).share_prompt  # allowed: see below


@pytest.mark.slow
def test_shared_prompt_tracks_the_same_v(tmp_path):
    """With share_prompt on, the tracked gradient pass runs each prompt once, as the untracked
    one does: V equals the naive per-rollout loop (relative 1e-6, float64), the step reports the
    per-rollout prompt passes' time, and the samples and trained weights are an untracked
    shared-prompt run's, bit for bit."""
    import torch

    tr = make(tmp_path, "llama", share_prompt=True, name="shared")
    assert tr.share_prompt
    rows = []
    update = tr._update

    def keep(*a):
        rows.append(update(*a))
        return rows[-1]

    tr._update = keep
    for fr, hh in (step_with_naive(tr, 1), step_with_naive(tr, 2)):
        groups = fr.groupby("query_id", sort=False).first()
        v, n2 = naive_v(hh, 4)
        assert (v > 0).all()
        np.testing.assert_allclose(groups["grad_var"].to_numpy(), v, rtol=1e-6)
        np.testing.assert_allclose(groups["grad_norm2_mean"].to_numpy(), n2, rtol=1e-6)
    assert all(r.time_gradvar_prompt > 0 for r in rows)  # the prompt passes ran
    off = make(tmp_path, "llama", share_prompt=True, track_gradvar=False, name="shared_off")
    texts = []
    for step in (1, 2):
        texts.append(off.train_step(step)[1]["completion"].tolist())
    assert texts[1] == fr["completion"].tolist()  # the same samples (shared prefill in both)
    for (name, a), b in zip(tr.policy.named_parameters(), off.policy.parameters()):
        assert torch.equal(a, b), name


def test_shared_prompt_tracking_needs_every_rollouts_prompt_pass(tmp_path, monkeypatch):
    """Skipping the per-rollout passes through the prompt (the last rollout would get the whole
    summed prompt gradient) changes V: the equality above is not met by chance."""
    from gcpo_analysis.gradvar.hooks import GramCapture

    tr = make(tmp_path, "llama", share_prompt=True, micro_batch_size=4, name="skip")
    fr, hh = step_with_naive(tr, 1)
    v, _ = naive_v(hh, 4)
    np.testing.assert_allclose(fr.groupby("query_id", sort=False).first()["grad_var"].to_numpy(), v, rtol=1e-6)
    real = GramCapture.prompt_backward

    def skipped(self):
        self.shared_outputs, self.shared_grads = [], []  # no pass: every use's "own" gradients are missing
        real(self)

    monkeypatch.setattr(GramCapture, "prompt_backward", skipped)
    broken = make(tmp_path, "llama", share_prompt=True, micro_batch_size=4, name="skip2")
    with pytest.raises(RuntimeError, match="per-sample prompt gradients arrived"):
        broken.train_step(1)


TWO = {
    "gv": dict(
        modulator="bot_rd",
        queries_per_step=3,
        steps=2,
        micro_batch_size=3,
        checkpoint_every=1,
        track_gradvar=True,
        share_prompt=False,
    ),
}
TWO["gv_shared"] = {**TWO["gv"], "share_prompt": True}  # the per-rollout prompt passes under DDP


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_give_one_process_v(tmp_path):
    """2 gloo processes (rank 0: groups 1-2, rank 1: group 3; micro-batches of 3) give the V of one
    process, with full rows and with a shared prompt."""
    from helpers.loop_setup import make as make_f32

    launch_two_processes(tmp_path / "two", TWO)
    for name, overrides in TWO.items():
        make_f32(tmp_path / "one", name, **overrides).train()
        positive = np.zeros(12, dtype=bool)
        for step, rtol in ((1, 1e-4), (2, 1e-3)):  # step 2 starts from float32-rounded, Adam-updated weights
            a = pd.read_parquet(tmp_path / "one" / name / "rollouts" / f"step_{step:06d}.parquet")
            b = pd.read_parquet(tmp_path / "two" / name / "rollouts" / f"step_{step:06d}.parquet")
            assert a["completion"].tolist() == b["completion"].tolist()
            positive |= a["grad_var"].to_numpy() > 0
            np.testing.assert_allclose(b["grad_var"], a["grad_var"], rtol=rtol, err_msg=name)
            np.testing.assert_allclose(b["grad_norm2_mean"], a["grad_norm2_mean"], rtol=rtol, err_msg=name)
        assert positive.all(), name  # every group position, rank 1's included, had a V > 0 to compare


def test_full_mode_gives_the_study_v(tmp_path, monkeypatch):
    """track_gradvar: full adds the study's V (all parameters, sequence log-probs, GRPO
    advantages) per group: equal to the naive per-rollout backward of gcpo_analysis.gradvar;
    each group's prompt (left-padded to the step's longest) runs once."""
    import torch

    from gcpo_analysis.gradvar import naive_gram
    from gcpo_analysis.gradvar.hooks import GramCapture
    from gcpo_analysis.measures.advantages import grpo_advantages

    calls = []
    real = GramCapture.prompt_backward
    monkeypatch.setattr(GramCapture, "prompt_backward", lambda self: calls.append(self.G) or real(self))
    tr = make(tmp_path, "llama", track_gradvar="full")  # share_prompt off: the tracker runs full rows
    seen = {}
    update = tr._update

    def spy(batch, advantages, before):
        cm = torch.zeros_like(batch.attention_mask)
        cm[:, -batch.n_completion :] = batch.completion_mask
        seen["K"] = [
            naive_gram(tr.policy, batch.input_ids[k : k + 4], batch.attention_mask[k : k + 4], cm[k : k + 4])
            for k in (0, 4)
        ]
        return update(batch, advantages, before)

    tr._update = spy
    row, frame = tr.train_step(1)
    groups = frame.groupby("query_id", sort=False).first()
    rewards = frame["reward"].to_numpy().reshape(2, 4)
    expected = [gradient_variance(K, grpo_advantages(r)) for K, r in zip(seen["K"], rewards)]
    np.testing.assert_allclose(groups["grad_var_study"].to_numpy(), expected, rtol=1e-6)
    assert row["time_gradvar_full"] > 0 and "grad_var_study_mean" in row
    assert calls == [4, 4]  # both groups' study Grams ran their prompt once


def test_variance_rounding_and_nan():
    """Equal h_i: V = 0 up to float32 rounding is 0; a non-PSD K (a bug) warns and gives NaN."""
    from gcpo_train.loop.gradvar_tracking import _variance

    K = np.full((4, 4), 2.0)
    assert _variance(K, 0) == 0.0
    assert _variance(K - 1e-7 * np.eye(4) + 1e-7, 0) == 0.0  # slightly below 0: rounding
    with pytest.warns(RuntimeWarning, match="beyond float32 rounding"):
        assert np.isnan(_variance(K - np.eye(4) + 1.0, 0))
    H = np.random.default_rng(0).normal(size=(4, 7))
    assert _variance(H @ H.T, 0) == pytest.approx(((H - H.mean(0)) ** 2).sum(1).mean())


def test_summaries_reach_report_to(tmp_path, monkeypatch):
    """The per-step V_train summaries go to every report_to backend (a fake trackio here, reached
    through Accelerate's TrackioTracker on the loop's Accelerator), which is opened with the run's
    name and config and closed at the end."""
    import importlib.machinery
    import sys
    import types

    from gcpo_train import reporting

    logged, opened, finished = [], [], []
    fake = types.ModuleType("trackio")
    fake.__spec__ = importlib.machinery.ModuleSpec("trackio", None)

    def init(**kw):
        opened.append(kw)
        return types.SimpleNamespace(
            log=lambda row, step: logged.append((step, row)), finish=lambda: finished.append(True)
        )

    fake.init = init
    monkeypatch.setitem(sys.modules, "trackio", fake)
    monkeypatch.setattr(reporting, "installed", lambda module: module == "trackio")
    make(tmp_path, float64=False, queries_per_step=6, steps=1, micro_batch_size=8, report_to=["trackio"]).train()
    row = json.loads((tmp_path / "run" / "log.jsonl").read_text().splitlines()[0])
    step, sent = logged[0]
    assert step == row["step"] == 1 and finished == [True]
    assert opened[0]["project"] == "gcpo" and opened[0]["name"] == "run" and opened[0]["config"]["steps"] == 1
    for key in ("grad_var_mean", "frac_grad_var_zero", "frac_adv_all_zero", "rho_bot_grad_var", "time_gradvar"):
        assert sent[key] == pytest.approx(row[key]), key
