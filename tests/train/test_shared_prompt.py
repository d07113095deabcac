"""The G rollouts of a group share their prompt: gcpo_train runs it once (in generation's prefill
and in every log-prob pass). Checked against the plain full-sequence computation: same samples,
same log-probs and entropies, same gradients, same training step."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gcpo_analysis.tiny_models import tiny_causal_lm  # noqa: E402
from gcpo_train.model.logprobs import group_logprobs_and_entropy, token_logprobs_and_entropy  # noqa: E402

FAMILIES = ["llama", "llama-tied", "qwen2", "gpt2"]


def _group(P=9, g=4, T=6, vocab=50, seed=1):
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(4, vocab, (1, P), generator=gen)
    completion = torch.randint(4, vocab, (g, T), generator=gen)
    mask = torch.ones(g, T, dtype=torch.long)
    mask[0, 2:] = 0  # a rollout that stopped after 2 tokens (EOS), padded after
    return prompt, completion, mask


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("T", [1, 6])
def test_shared_prompt_logprobs_and_gradients_equal_the_full_forward(family, T):
    model = tiny_causal_lm(family, vocab_size=50)
    prompt, completion, mask = _group(T=T)
    g, P = completion.shape[0], prompt.shape[1]
    full_ids = torch.cat([prompt.expand(g, -1), completion], dim=1)
    full_mask = torch.cat([torch.ones(g, P, dtype=torch.long), mask], dim=1)
    params = list(model.parameters())

    def run(fn):
        model.zero_grad()
        logp, ent, *_ = fn()
        ((logp * mask).sum() + (logp * mask).pow(2).sum()).backward()  # a loss that weighs tokens unequally
        return logp.detach(), ent, [p.grad.clone() for p in params]

    lp_full, ent_full, grad_full = run(lambda: token_logprobs_and_entropy(model, full_ids, full_mask, T, 0.7, True))
    lp_shared, ent_shared, grad_shared = run(
        lambda: group_logprobs_and_entropy(model, prompt, completion, mask, 0.7, True)
    )
    valid = mask.bool()
    torch.testing.assert_close(lp_shared[valid], lp_full[valid], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ent_shared[valid], ent_full[valid], rtol=1e-5, atol=1e-6)
    assert any(g.abs().max() > 0 for g in grad_full)
    for a, b in zip(grad_shared, grad_full):  # every parameter, the prompt's share included
        assert (a - b).abs().max() <= 1e-4 * b.abs().max() + 1e-8  # float32 rounding, relative to the scale


@pytest.mark.parametrize("family", FAMILIES)
def test_shared_prefill_samples_what_plain_generate_samples(family):
    from gcpo_analysis.tiny_models import tiny_tokenizer
    from gcpo_train.sampling.generate import _generate

    tok = tiny_tokenizer()
    model = tiny_causal_lm(family, vocab_size=len(tok))
    kwargs = dict(max_new_tokens=8, temperature=0.9, top_p=0.95, do_sample=True, max_prompt_tokens=64, device=None)
    batches = []
    for shared in (False, True):
        torch.manual_seed(5)
        batches.append(_generate(model, tok, ["who is the king of the city ?"], 4, shared_prefill=shared, **kwargs))
    plain, shared = batches
    assert torch.equal(plain.input_ids, shared.input_ids) and plain.texts == shared.texts
    assert torch.equal(plain.attention_mask, shared.attention_mask)
    assert len(set(plain.texts)) > 1  # sampled, not one repeated answer


def test_training_step_with_and_without_the_shared_prompt(tmp_path):
    """One step (two groups, micro-batches of 3 inside a group of 4, β > 0, sequence loss) with
    share_prompt on and off (generation's prefill and the log-prob passes): same samples, same
    log row, same updated LoRA."""
    from helpers.loop_setup import make
    from test_trainer import _strip

    steps = {}
    for shared in (True, False):
        trainer = make(
            tmp_path, f"shared_{shared}", modulator="bot_rd", micro_batch_size=3, steps=1, share_prompt=shared
        )
        assert trainer.share_prompt == shared  # tiny llama takes a cache
        row, frame = trainer.train_step(1)
        weights = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if p.requires_grad}
        steps[shared] = (_strip([row])[0], frame, weights)
    (row_a, frame_a, w_a), (row_b, frame_b, w_b) = steps[True], steps[False]
    assert frame_a["completion"].tolist() == frame_b["completion"].tolist()
    np.testing.assert_allclose(frame_a["logprob"], frame_b["logprob"], rtol=1e-5)
    for key in row_a:
        assert row_a[key] == pytest.approx(row_b[key], rel=1e-5, abs=1e-7), key
    assert row_a["grad_norm"] > 0
    # Adam's first step moves a weight by lr·g/(|g| + ε): where |g| is near ε, the float rounding of g
    # between the two passes moves it by a small fraction of lr (2e-6 seen on an AMD EPYC runner)
    for name in w_a:
        torch.testing.assert_close(w_a[name], w_b[name], rtol=1e-4, atol=1e-5)
