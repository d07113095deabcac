"""One meaning per column: a rollouts frame's token_entropy and logprob are π_θ's at temperature 1,
in the study's frames and the trainer's, while the trainer's loss keeps the sampler's (tempered)
log-probs; `temperature` records the sampling temperature; `gcpo score` warns on a frame that may
mix conventions (gcpo_analysis.frames.check_logprob_convention)."""

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.frames import FrameError, check_logprob_convention, validate_rollouts


def _frame(**extra):
    df = pd.DataFrame(
        {
            "query_id": ["a", "a", "b", "b"],
            "rollout_id": [0, 1, 0, 1],
            "completion": ["x", "y", "x", "z"],
            "answer": ["x", "y", "x", "z"],
            "reward": [0.0, 2.0, 1.0, 1.0],
            "token_entropy": [1.0, 1.5, 0.5, 0.7],
            "logprob": [-3.0, -4.0, -2.0, -1.0],
        }
    )
    return df.assign(**extra)


# ---------------------------------------------------------------------- the check, case by case
def test_one_temperature_or_an_untagged_frame_is_quiet():
    assert check_logprob_convention(_frame(temperature=0.7), {"token_entropy", "logprob"}) is None
    assert check_logprob_convention(_frame(), {"token_entropy", "logprob"}) is None  # a study's older frame


def test_several_temperatures_warn_only_when_a_measure_reads_the_columns():
    df = _frame(temperature=[0.7, 0.7, 1.0, 1.0])
    text = check_logprob_convention(df, {"logprob"})
    assert text is not None and "[0.7, 1.0]" in text and "'logprob'" in text and "'token_entropy'" not in text
    assert check_logprob_convention(df, set()) is None  # cd, bot, rd, se read neither column
    assert check_logprob_convention(df.drop(columns=["logprob", "token_entropy"]), {"logprob"}) is None


def test_rows_without_a_temperature_beside_rows_with_one_warn():
    df = _frame(temperature=[0.7, 0.7, np.nan, np.nan])
    text = check_logprob_convention(df, {"token_entropy"})
    assert text is not None and "2 row(s) have no 'temperature'" in text
    validate_rollouts(df)  # NaN means "not recorded", not a bad value


def test_an_old_trainer_frame_warns_and_a_temperature_column_silences_it():
    old = _frame(advantage=[0.1, -0.1, 0.0, 0.0], reward_failed=False)
    text = check_logprob_convention(old, {"token_entropy"})
    assert text is not None and "gcpo <= 0.1.0" in text
    assert check_logprob_convention(old.assign(temperature=1.0), {"token_entropy"}) is None
    assert check_logprob_convention(old.drop(columns=["advantage"]), {"token_entropy"}) is None


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf])
def test_a_temperature_must_be_positive_and_finite(bad):
    with pytest.raises(FrameError, match="'temperature' must be a sampling temperature > 0"):
        validate_rollouts(_frame(temperature=[0.7, 0.7, bad, 0.7]))


def test_a_temperature_must_be_a_number():
    with pytest.raises(FrameError, match="'temperature' must be numeric"):
        validate_rollouts(_frame(temperature=["0.7", 0.7, 0.7, 0.7]))


# ---------------------------------------------------------------------- gcpo score
def test_gcpo_score_warns_and_records_the_warning(tmp_path):
    from gcpo_analysis.cli import main

    src = tmp_path / "rollouts.parquet"
    _frame(temperature=[0.7, 0.7, 1.0, 1.0]).to_parquet(src)
    with pytest.warns(UserWarning, match=r"sampled at temperatures \[0.7, 1.0\]"):
        assert main(["score", str(src), "-o", str(tmp_path / "g.parquet"), "--measures", "token_entropy,rd"]) == 0
    meta = json.loads((tmp_path / "g.meta.json").read_text())
    assert "[0.7, 1.0]" in meta["logprob_convention_warning"]
    groups = pd.read_parquet(tmp_path / "g.parquet")
    np.testing.assert_allclose(groups["token_entropy"], [1.25, 0.6])  # scored all the same

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rd reads neither column: no warning
        assert main(["score", str(src), "-o", str(tmp_path / "rd.parquet"), "--measures", "rd"]) == 0
    assert "logprob_convention_warning" not in json.loads((tmp_path / "rd.meta.json").read_text())


# ---------------------------------------------------------------------- the forward pass
def test_logprobs_of_gives_the_sampler_to_the_loss_and_the_policy_to_the_frame():
    torch = pytest.importorskip("torch")
    from gcpo_train.model.logprobs import _logprobs_of

    z = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]]])  # (B=1, T=2, V=3)
    y = torch.tensor([[0, 1]])
    out = _logprobs_of(z.clone().requires_grad_(True), y, 0.5, True, True)

    def by_hand(tau):
        x = z[0].double().numpy() / tau
        ls = x - np.log(np.exp(x).sum(-1, keepdims=True))
        return ls[[0, 1], [0, 1]], -(np.exp(ls) * ls).sum(-1)

    lp_05, h_05 = by_hand(0.5)
    lp_1, h_1 = by_hand(1.0)
    np.testing.assert_allclose(out.logp.detach()[0].numpy(), lp_05, rtol=1e-6)
    np.testing.assert_allclose(out.entropy[0].numpy(), h_05, rtol=1e-6)
    np.testing.assert_allclose(out.policy_logp[0].numpy(), lp_1, rtol=1e-6)
    np.testing.assert_allclose(out.policy_entropy[0].numpy(), h_1, rtol=1e-6)
    assert out.logp.requires_grad and not out.policy_logp.requires_grad and not out.policy_entropy.requires_grad
    # at temperature 1 the sampler is the policy, bit for bit
    one = _logprobs_of(z, y, 1.0, True, True)
    assert torch.equal(one.logp, one.policy_logp) and torch.equal(one.entropy, one.policy_entropy)
    assert _logprobs_of(z, y, 0.5, False, False)[1:] == (None, None, None)


# ---------------------------------------------------------------------- the trainer's frame
TEMPERATURE = 0.7


def _trainer(tmp_path, **kw):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    pytest.importorskip("accelerate")
    from gcpo_train.config import TrainConfig
    from gcpo_train.loop.trainer import GCPOLoopTrainer

    queries = pd.DataFrame(
        {
            "query_id": ["q0", "q1"],
            "dataset": "narrativeqa",
            "split": "train",
            "question": ["who is the king ?", "what is the city of the war and the house ?"],  # two lengths
            "context": "the king had a son . the ship was in the city .",
            "references": [["the king"], ["the city"]],
            "task": "qa_f1",
        }
    )
    cfg = dict(
        model="tiny:llama",
        dataset="narrativeqa",
        group_size=3,
        queries_per_step=2,
        steps=1,
        max_new_tokens=6,
        max_context_tokens=32,
        judge="lexical",
        output_dir=str(tmp_path / "run"),
        checkpoint_every=0,
        progress=False,
        learning_rate=5e-3,
        beta=0.05,
        device="cpu",
        micro_batch_size=2,
        temperature=TEMPERATURE,
    )
    cfg.update(kw)
    from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

    tok = tiny_tokenizer()
    model = tiny_causal_lm("llama", vocab_size=len(tok), seed=2)

    def likelier_eos(module, inputs, logits):  # completions that stop early: right-padded rows
        logits = logits.clone()
        logits[..., tok.eos_token_id] += 2.5
        return logits

    model.get_output_embeddings().register_forward_hook(likelier_eos)
    return GCPOLoopTrainer(
        TrainConfig(**cfg),
        model=model,
        tokenizer=tok,
        queries=queries,
        reward_fn=lambda task, c, refs: float(len(c.split()) % 3),
    )


def _naive(policy, batch, temperature):
    """Per rollout, alone and unpadded: Σ_t log softmax(z_t / τ)[y_t] and the mean over t of the
    entropy of softmax(z_t / τ), over the completion's tokens (EOS included)."""
    import torch

    logprob, entropy = [], []
    with torch.no_grad():
        for i in range(batch.input_ids.shape[0]):
            ids = batch.input_ids[i][batch.attention_mask[i].bool()]  # no pads, left or right
            n = int(batch.completion_mask[i].sum())
            z = policy(input_ids=ids[None]).logits[0, -n - 1 : -1].float() / temperature
            ls = torch.log_softmax(z, -1)
            logprob.append(float(ls.gather(-1, ids[-n:, None]).sum()))
            entropy.append(float(-(ls.exp() * ls).sum(-1).mean()))
    return np.array(logprob), np.array(entropy)


@pytest.mark.parametrize(
    "kw",
    [
        dict(modulator="none"),  # the stats come from the gradient pass
        dict(modulator="eg_spo", share_prompt=False),  # from the no-grad pass before the update
        dict(modulator="none", num_iterations=2),  # μ = 2: the no-grad pass; π_old kept for the loss
    ],
    ids=["gradient_pass", "before_pass_full_rows", "mu2"],
)
def test_the_trainer_frame_holds_the_policy_and_the_loss_the_sampler(tmp_path, kw):
    tr = _trainer(tmp_path, **kw)
    seen = {}
    update = tr._update

    def spy(batch, advantages, before):  # θ_old: what the frame's values must describe
        seen["own"] = _naive(tr.policy, batch, 1.0)
        seen["sampler"] = _naive(tr.policy, batch, TEMPERATURE)
        seen["before"], seen["mask"] = before, batch.completion_mask
        return update(batch, advantages, before)

    tr._update = spy
    _, frame = tr.train_step(1)
    assert frame["n_tokens"].min() < 6 < frame["n_tokens"].max() + 1  # some stopped at an EOS, some did not
    own_lp, own_h = seen["own"]
    samp_lp, samp_h = seen["sampler"]
    np.testing.assert_allclose(frame["logprob"], own_lp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(frame["token_entropy"], own_h, rtol=1e-5, atol=1e-5)
    assert (frame["temperature"] == TEMPERATURE).all()
    # the check discriminates: the sampler's values are not the frame's
    assert np.abs(frame["logprob"] - samp_lp).max() > 1e-2 and np.abs(frame["token_entropy"] - samp_h).max() > 1e-3
    before = seen["before"]
    if before.old_logp is not None:  # π_old for the ratio: the sampler's log-probs, token by token
        seq = (before.old_logp * seen["mask"]).sum(-1).numpy()
        np.testing.assert_allclose(seq, samp_lp, rtol=1e-5, atol=1e-5)
    validate_rollouts(frame)


# ---------------------------------------------------------------------- the study's frame
def test_the_study_frame_records_the_temperature_beside_the_policy_values():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from gcpo_analysis.study.collect import collect_rollouts
    from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

    tok = tiny_tokenizer()
    model = tiny_causal_lm("llama", vocab_size=len(tok), seed=1)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "who was the king ?"}], tokenize=False, add_generation_prompt=True
    )
    queries = pd.DataFrame({"query_id": ["q"], "prompt": [prompt], "references": [["the king"]], "task": "qa_f1"})
    ro, _ = collect_rollouts(
        model, tok, queries, G=3, max_new_tokens=5, temperature=TEMPERATURE, grad_var=False, progress=False, seed=2
    )
    assert (ro["temperature"] == TEMPERATURE).all()
    # regenerate the same samples, then score them alone at temperature 1
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    torch.manual_seed(2)
    gen = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        temperature=TEMPERATURE,
        top_p=1.0,
        top_k=0,
        max_new_tokens=5,
        num_return_sequences=3,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    for i in range(3):
        n = int(ro["n_tokens"].iloc[i])
        seq = gen[i, : ids.shape[1] + n]
        with torch.no_grad():
            ls = torch.log_softmax(model(input_ids=seq[None]).logits[0, -n - 1 : -1].float(), -1)
        assert ro["logprob"].iloc[i] == pytest.approx(float(ls.gather(-1, seq[-n:, None]).sum()), rel=1e-5)
        assert ro["token_entropy"].iloc[i] == pytest.approx(float(-(ls.exp() * ls).sum(-1).mean()), rel=1e-5)
