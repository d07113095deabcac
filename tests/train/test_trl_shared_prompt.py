"""GCPOTrainer's shared-prompt log-probs (gcpo_train.trl.shared_prompt) against TRL's own pass:
the same per-token log-probs and entropies at every call (training, old-policy, reference), and
the same loss, grad norm and trained weights over 2 steps, on tiny llama, qwen2 and gpt2, with
beta > 0, num_iterations = 2, a group split across two chunks and left-padded prompts of
different lengths in one chunk. The fallbacks are named and counted."""

import warnings
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
pytest.importorskip("datasets")

from helpers.trl_setup import config_kwargs, word_reward  # noqa: E402

from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer  # noqa: E402
from gcpo_train.trl import GCPOConfig, GCPOTrainer  # noqa: E402
from gcpo_train.trl import shared_prompt as sp  # noqa: E402

# prompts of 5, 11, 3 and 8 tokens: every chunk mixes left-padded prompts of different lengths
PROMPTS = [
    "who is the king ?",
    "where is the house of the man who was the king ?",
    "the war ?",
    "what did the son of the queen",
]


def _dataset():
    from datasets import Dataset

    return Dataset.from_dict({"prompt": PROMPTS * 3})


@pytest.fixture(scope="module", params=["llama", "qwen2", "gpt2"])
def model_dir(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tiny-{request.param}")
    tok = tiny_tokenizer()
    tiny_causal_lm(request.param, vocab_size=len(tok), seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


# 12 rows per generation batch (3 groups of G=4), TRL's chunks of 6: group 2 (rows 4-7) is split
# across two chunks; num_iterations=2 makes TRL compute the old-policy log-probs; beta > 0 the reference
SETUP = dict(
    per_device_train_batch_size=6,
    gradient_accumulation_steps=2,
    num_generations=4,
    num_iterations=2,
    beta=0.04,
    max_completion_length=6,
    max_steps=2,
    modulator="none",
    gradient_checkpointing=False,
    bf16=False,
    disable_dropout=True,
    optim="sgd",
)  # float32 (TRL defaults to bf16 autocast, whose rounding differs between any two passes)


def _train(model_dir, out, checks=None, peft_config=None, **kw):
    args = GCPOConfig(**config_kwargs(out, **{**SETUP, **kw}))
    trainer = GCPOTrainer(
        model=model_dir,
        reward_funcs=word_reward,
        args=args,
        train_dataset=_dataset(),
        processing_class=tiny_tokenizer(),
        peft_config=peft_config,
    )
    if checks is not None:  # every shared call is also run through TRL's own pass, on the same inputs
        real = trainer._get_per_token_logps_and_entropies

        def both(model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **rest):
            ours = real(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **rest)
            with torch.no_grad():
                theirs = trl.GRPOTrainer._get_per_token_logps_and_entropies(
                    trainer, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **rest
                )
            checks.append(
                (
                    ours,
                    theirs,
                    attention_mask[:, -logits_to_keep:],
                    torch.is_grad_enabled(),
                    input_ids.shape,
                    batch_size,
                )
            )
            return ours

        trainer._get_per_token_logps_and_entropies = both
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return trainer


def _logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


def _close(a, b, rel=1e-5):
    return torch.allclose(a.detach().double(), b.detach().double(), rtol=rel, atol=rel * float(b.abs().max()))


@pytest.mark.slow
@pytest.mark.trl
def test_shared_prompt_gives_trls_numbers(model_dir, tmp_path):
    checks = []
    ours = _train(model_dir, tmp_path / "on", checks=checks)
    plain = _train(model_dir, tmp_path / "off", share_prompt=False)
    assert _logged(ours, "gcpo/shared_prompt") == [1.0, 1.0] and _logged(plain, "gcpo/shared_prompt") == [0.0, 0.0]
    assert _logged(ours, "gcpo/shared_prefill") == [1.0] and _logged(plain, "gcpo/shared_prefill") == [0.0]
    # passes seen: old-policy and reference (no grad, chunks of 6 over 12 rows) and the training forwards
    kinds = {(grad, tuple(shape)[0], bs) for *_, grad, shape, bs in checks}
    assert {(False, 12, 6), (True, 6, None)} <= kinds
    for (lp, ent, _), (tlp, tent, _), mask, *_ in checks:
        assert _close(lp, tlp) and (lp[mask == 0] == 0).all()
        assert (ent is None) == (tent is None)
        if ent is not None:
            assert _close(ent, tent) and (ent[mask == 0] == 0).all()
    # the two runs sampled the same completions and trained to the same numbers
    assert list(ours.gcpo_last["texts"]) == list(plain.gcpo_last["texts"])
    for key in ("loss", "grad_norm", "kl", "entropy"):
        a, b = _logged(ours, key), _logged(plain, key)
        assert len(a) == 2 and torch.allclose(
            torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64), rtol=1e-5, atol=1e-7
        ), (key, a, b)
    _same_update(ours, plain, model_dir)


def _same_update(ours, plain, model_dir):
    """The two runs moved every weight by the same step (SGD: the step is the gradient, so a wrong
    log-prob path shows; Adam would turn the rounding noise of zero-expectation gradients such as
    k_proj's bias into steps of size lr)."""
    from transformers import AutoModelForCausalLM

    init = dict(AutoModelForCausalLM.from_pretrained(model_dir).named_parameters())
    moved = 0.0
    for (name, p), q in zip(ours.model.named_parameters(), plain.model.parameters()):
        a, b = p.detach() - init[name], q.detach() - init[name]
        moved = max(moved, float(b.abs().max()))
        assert float((a - b).abs().max()) <= 1e-4 * float(b.abs().max()) + 1e-9, name
    assert moved > 1e-5  # the weights did train


@pytest.mark.slow
@pytest.mark.trl
def test_shared_prompt_under_peft_reference_by_disabled_adapter(tmp_path):
    peft = pytest.importorskip("peft")
    path = tmp_path / "llama"
    tok = tiny_tokenizer()
    tiny_causal_lm("llama", vocab_size=len(tok), seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    lora = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")
    checks = []
    ours = _train(str(path), tmp_path / "on", checks=checks, peft_config=peft.LoraConfig(**lora), learning_rate=5e-2)
    plain = _train(
        str(path), tmp_path / "off", peft_config=peft.LoraConfig(**lora), share_prompt=False, learning_rate=5e-2
    )
    assert ours.ref_model is None and _logged(ours, "gcpo/shared_prompt") == [1.0, 1.0]
    for (lp, ent, _), (tlp, tent, _), *_ in checks:
        assert _close(lp, tlp) and (ent is None or _close(ent, tent))
    for key in ("loss", "grad_norm", "kl"):
        a, b = _logged(ours, key), _logged(plain, key)
        assert torch.allclose(torch.tensor(a), torch.tensor(b), rtol=1e-5, atol=1e-7), (key, a, b)
    trained = {n: p for n, p in plain.model.named_parameters() if p.requires_grad}
    assert trained and all(
        torch.allclose(p, trained[n], rtol=1e-5, atol=1e-7) for n, p in ours.model.named_parameters() if p.requires_grad
    )


def test_dropout_falls_back_named():
    model = tiny_causal_lm("gpt2", vocab_size=40).train()  # gpt2's configs drop out at 0.1
    assert sp.active_dropout(model) and not sp.active_dropout(model.eval())
    assert "dropout" in sp.call_fallback(False, {}, dropout=True)


@pytest.mark.slow
@pytest.mark.trl
def test_gradient_checkpointing_falls_back_named_and_counted(tmp_path, caplog):
    path = tmp_path / "llama"
    tok = tiny_tokenizer()
    tiny_causal_lm("llama", vocab_size=len(tok), seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    with caplog.at_level("INFO", logger="gcpo_train.trl.shared_prompt"):
        trainer = _train(str(path), tmp_path / "gc", gradient_checkpointing=True)
    # step 1: old-policy and reference passes shared (TRL turns checkpointing off there), 2 training forwards not
    assert _logged(trainer, "gcpo/shared_prompt") == [0.5, 0.0]
    assert [r for _, r in trainer.gcpo_prompt_fallbacks] == [sp.call_fallback(False, {}, checkpointing=True)]
    assert _logged(trainer, "gcpo/shared_prefill") == [1.0]  # generation runs without checkpointing: it shares
    assert sum("gradient checkpointing" in r.getMessage() for r in caplog.records) == 1  # logged once, not per call


def test_call_fallbacks_name_multimodal_and_moe():
    assert sp.call_fallback(False, {"pixel_values": None, "image_grid_thw": None}) is None
    assert "pixel_values" in sp.call_fallback(False, {"pixel_values": torch.zeros(1), "image_grid_thw": None})
    assert "aux loss" in sp.call_fallback(True, {})


def test_static_fallbacks_zero3_fsdp_and_signature():
    base = dict(
        args=SimpleNamespace(share_prompt=True, gradient_checkpointing=False),
        model=tiny_causal_lm("llama", vocab_size=40),
        accelerator=SimpleNamespace(state=SimpleNamespace()),
        is_fsdp_enabled=False,
        is_deepspeed_enabled=False,
        _entropy_bonus_enabled=False,
    )
    assert sp.static_fallback(SimpleNamespace(**base), trl.GRPOTrainer) is None
    assert "FSDP" in sp.static_fallback(SimpleNamespace(**{**base, "is_fsdp_enabled": True}), trl.GRPOTrainer)
    zero3 = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=3)))
    assert "ZeRO-3" in sp.static_fallback(
        SimpleNamespace(**{**base, "is_deepspeed_enabled": True, "accelerator": zero3}), trl.GRPOTrainer
    )
    zero2 = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=2)))
    assert (
        sp.static_fallback(
            SimpleNamespace(**{**base, "is_deepspeed_enabled": True, "accelerator": zero2}), trl.GRPOTrainer
        )
        is None
    )
    assert "entropy bonus" in sp.static_fallback(
        SimpleNamespace(**{**base, "_entropy_bonus_enabled": True}), trl.GRPOTrainer
    )

    class Other:
        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, extra=None):
            pass

    assert sp.hook_matches(trl.GRPOTrainer) and not sp.hook_matches(Other)
    assert "signature" in sp.static_fallback(SimpleNamespace(**base), Other)


def test_prompt_groups_match_identical_rows_only():
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 5, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])  # row 3: same tokens, another mask
    assert sp.prompt_groups(ids, mask) == [[0, 1], [2], [3]]


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_shared_prefill_generate_samples_what_generate_samples(family):
    """Left-padded prompts of different lengths, each repeated (TRL's layout) and one row alone:
    the wrapped generate samples the same tokens from the same seed, and runs the prefix once
    per distinct prompt."""
    model = tiny_causal_lm(family, vocab_size=60)
    gen = torch.Generator().manual_seed(3)
    lengths, G = [7, 4, 9], 3
    rows = [torch.randint(4, 60, (n,), generator=gen) for n in lengths]
    P = max(lengths)
    ids = torch.zeros(len(rows), P, dtype=torch.long)
    att = torch.zeros(len(rows), P, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, P - len(r) :], att[i, P - len(r) :] = r, 1
    ids = torch.cat([ids[:2].repeat_interleave(G, 0), ids[2:]])
    att = torch.cat([att[:2].repeat_interleave(G, 0), att[2:]])
    kw = dict(max_new_tokens=5, do_sample=True, top_k=0, pad_token_id=0, eos_token_id=None)
    torch.manual_seed(0)
    plain = model.generate(input_ids=ids, attention_mask=att, **kw)
    prefix_rows = []  # rows of every forward that starts from an empty cache (a prefill)

    def counting(module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # transformers >= 5.24 / before
        if cache is None or cache.get_seq_length() == 0:
            prefix_rows.append(kwargs["input_ids"].shape[0])

    model.register_forward_pre_hook(counting, with_kwargs=True)
    torch.manual_seed(0)
    shared = sp.shared_prefill_generate(model, model.generate)(input_ids=ids, attention_mask=att, **kw)
    assert torch.equal(plain, shared)
    assert prefix_rows == [3]  # one prefix forward, of the 3 distinct prompts (not 7 rows)
    assert sp.prefill_plan(ids[:1], att[:1]) is None  # nothing to share
