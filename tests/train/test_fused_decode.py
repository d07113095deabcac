"""``sampling_kernels: fused`` (gcpo_train/sampling/fused.py): its hand-written Llama decode step
gives the logits of the transformers model's full forward (no cache), with and without peft LoRA,
for left-padded prompts of different lengths; greedy and seeded samples equal 'onednn''s and
'exact''s on the tiny model; what it does not implement is refused, naming 'onednn'.
``fused_bf16``: the same step with the base weights and the linear layers' inputs in bfloat16,
checked against the full forward with every base linear layer rounded the same way."""

import contextlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")

from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer  # noqa: E402
from gcpo_analysis.tokens import position_ids  # noqa: E402
from gcpo_train.sampling import fused  # noqa: E402
from gcpo_train.sampling.fused import FusedKernels  # noqa: E402
from gcpo_train.sampling.generate import _encode, generate_groups  # noqa: E402
from gcpo_train.sampling.kernels import decode  # noqa: E402
from gcpo_train.sampling.prefixes import prefill_rows  # noqa: E402
from gcpo_train.sampling.registry import make_kernels  # noqa: E402

PROMPTS = ["who is the king of the city ?", "what was the war ?", "where is the ship of his father now ?"]
SEEDS = [5, 6, 7]


def _llama(lora: bool, **overrides):
    """The tests' tiny llama with large weights (a peaked next-token distribution that depends on
    every position), optionally under peft LoRA as the trainer wraps it, with random B matrices
    (peft starts B at zero, where an adapter would change nothing)."""
    tok = tiny_tokenizer()
    model = tiny_causal_lm("llama", vocab_size=len(tok), initializer_range=0.5, **overrides)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):  # transformers starts biases at zero, where a lost bias would not show
                p.copy_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
    if lora:
        pytest.importorskip("peft")
        from gcpo_train.model.policy import wrap_lora

        model = wrap_lora(model, 4, 8, 0.0)
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        model.eval()
    return model, tok


@pytest.fixture(scope="module", params=["plain", "lora", "biases"])
def policy(request):
    """The tiny llama; under LoRA; with biases on every projection (concatenated for the fused GEMMs)."""
    if request.param == "biases":
        return _llama(False, attention_bias=True, mlp_bias=True)
    return _llama(request.param == "lora")


@pytest.mark.parametrize("one_call_keys", [fused.ONE_CALL_KEYS, 0], ids=["one-call", "split"])
def test_fused_logits_are_the_full_forwards_at_every_decode_step(policy, one_call_keys, monkeypatch):
    """Every step's logits of a 12-token decode (left-padded prompts of different lengths, one of a
    single token: no prompt keys before the decode; G = 2, greedy) against one forward of the final
    rows without a cache, at the positions they predict; with either attention layout."""
    monkeypatch.setattr(fused, "ONE_CALL_KEYS", one_call_keys)
    model, tok = policy
    got, want = _decode_logits(model, tok, FusedKernels())
    assert want.abs().max() > 1.0  # peaked logits, not a near-uniform model where anything agrees
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


def _decode_logits(model, tok, kernels, reference=None, prompts=(*PROMPTS, "who")):
    """(the logits ``kernels``' step gave at each of 12 decode steps (T, rows, V), a full forward's
    logits at the same positions, run under ``reference`` (a context manager) if given)."""
    ids, att = _encode(tok, list(prompts), None, None)
    assert int(att[-1].sum()) == 1
    seen = []

    def recording(*args):
        step = kernels.decode_step(*args)

        def logits(tokens, t):
            seen.append(step(tokens, t))
            return seen[-1]

        return logits

    with kernels.applied(model):
        seqs = decode(model, ids, att, 2, max_new_tokens=12, eos_ids=[], pad_token_id=0, step=recording)
    P, T = ids.shape[1], len(seen)
    assert T == 12
    rows = 2 * len(prompts)
    assert seqs.shape == (rows, P + T)
    full_att = torch.cat([att.repeat_interleave(2, dim=0), att.new_ones(rows, T)], dim=1)
    with torch.no_grad(), reference if reference is not None else contextlib.nullcontext():
        full = model(input_ids=seqs, attention_mask=full_att, position_ids=position_ids(full_att)).logits
    return torch.stack(seen), full[:, P - 1 : P - 1 + T].transpose(0, 1)  # the logits that predict each new token


# questions on one passage, one asked twice, one a prefix of another, and a one-token prompt
SHARED = [
    "the king of the city lived in a castle . who is the king ?",
    "the king of the city lived in a castle . where is the castle ?",
    "the king of the city lived in a castle . who is the king ?",
    "the king of the city lived in a castle .",
    "what was the war ?",
    "who",
]


@pytest.mark.parametrize("one_call_keys", [fused.ONE_CALL_KEYS, 0], ids=["one-call", "split"])
def test_shared_prefix_logits_are_the_full_forwards_at_every_decode_step(policy, one_call_keys, monkeypatch):
    """``prefixes_shared``: prompts that begin alike compute their common prefix once, and every
    step's logits are still the full forward's (the same tolerance as the plain prefill)."""
    monkeypatch.setattr(fused, "ONE_CALL_KEYS", one_call_keys)
    model, tok = policy
    kernels, calls = FusedKernels(), []
    monkeypatch.setattr(fused, "prefill_rows", lambda *a: calls.append(1) or prefill_rows(*a))
    with kernels.prefixes_shared():
        assert kernels.share_prefixes
        got, want = _decode_logits(model, tok, kernels, prompts=SHARED)
    assert calls and not kernels.share_prefixes  # it shared, and the sampler's setting is back
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    plain, _ = _decode_logits(model, tok, FusedKernels(), prompts=SHARED)
    assert torch.equal(got.argmax(-1), plain.argmax(-1))


def test_the_shared_prefill_computes_each_prefix_once(monkeypatch):
    """The rows the linear layers see: the shared passage once, not once per question."""
    model, tok = _llama(False)
    seen = []
    original = fused.FusedKernels._linear

    def counting(self, key, modules):
        linear = original(self, key, modules)
        return lambda x: seen.append((key, x.shape[0])) or linear(x)

    monkeypatch.setattr(fused.FusedKernels, "_linear", counting)
    ids, att = _encode(tok, SHARED[:2], None, None)
    positions = position_ids(att)
    for share, want in ((False, 2 * (ids.shape[1] - 1)), (True, None)):
        seen.clear()
        with torch.no_grad():
            FusedKernels(share_prefixes=share).decode_step(model, ids, att, positions, 1, 2)
        rows = {n for key, n in seen if key == "0.qkv"}
        if want is not None:
            assert rows == {want}
        else:
            lengths = [int(a.sum()) - 1 for a in att]
            common = next(k for k in range(min(lengths)) if ids[0, -lengths[0] - 1 + k] != ids[1, -lengths[1] - 1 + k])
            assert common >= 5 and rows == {sum(lengths) - common}


needs_bf16 = pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no oneDNN bf16 on this CPU")


@contextlib.contextmanager
def _bf16_base_linears(model):
    """Every base ``nn.Linear`` (not LoRA's A and B) computed as fused_bf16 does: weight, bias and
    input rounded to bfloat16, the product in float32, rounded to bfloat16 (oneDNN's output)."""
    saved = []
    for name, m in model.named_modules():
        if type(m) is torch.nn.Linear and "lora_" not in name:

            def forward(x, m=m):
                b = None if m.bias is None else m.bias.bfloat16().float()
                y = torch.nn.functional.linear(x.bfloat16().float(), m.weight.bfloat16().float(), b)
                return y.bfloat16().float()

            m.forward = forward
            saved.append(m)
    try:
        yield
    finally:
        for m in saved:
            del m.forward


@needs_bf16
def test_fused_bf16_logits_are_the_bf16_rounded_forwards(policy):
    """fused_bf16 against an independent rounding of the same model (the full forward, every base
    linear layer's weight and input rounded to bf16, fp32 products): equal up to fp32 summation
    order and the last bf16 rounding of an output; and visibly not the float32 logits."""
    model, tok = policy
    got, want = _decode_logits(model, tok, FusedKernels(bf16=True), _bf16_base_linears(model))
    _, fp32 = _decode_logits(model, tok, FusedKernels())
    scale = float(want.abs().max())
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * scale)
    off_bf16, off_fp32 = (got - want).abs().mean(), (got - fp32).abs().mean()
    assert off_fp32 > 1e-4 * scale  # rounded to bf16, not the fp32 step
    assert off_bf16 < 0.5 * off_fp32  # and closer to the bf16 rounding than to fp32


@needs_bf16
def test_fused_bf16_samples_mostly_match_fused_and_the_knob_is_accepted():
    """Seeded samples from the bf16 rounding of the policy: valid, drawn, and the same as float32's
    on most rows of the tiny model (a token differs where the rounding moves a draw across a
    boundary); the name is a sampling_kernels choice."""
    model, tok = _llama(lora=True)
    runs = {
        k: generate_groups(
            model, tok, PROMPTS, 4, max_new_tokens=10, temperature=0.9, seeds=SEEDS, kernels=make_kernels(k)
        )
        for k in ("fused", "fused_bf16")
    }
    same = sum(a == b for a, b in zip(runs["fused"].texts, runs["fused_bf16"].texts))
    assert same >= len(runs["fused"].texts) // 2
    assert len(set(runs["fused_bf16"].texts)) > 3
    assert make_kernels("fused_bf16").name == "fused_bf16"


def test_fused_greedy_and_seeded_samples_are_onednns_and_generates(policy):
    model, tok = policy
    greedy = {
        k: generate_groups(model, tok, PROMPTS, 1, max_new_tokens=10, do_sample=False, kernels=make_kernels(k))
        for k in ("exact", "onednn", "fused")
    }
    sampled = {
        k: generate_groups(
            model, tok, PROMPTS, 4, max_new_tokens=10, temperature=0.9, seeds=SEEDS, kernels=make_kernels(k)
        )
        for k in ("exact", "onednn", "fused")
    }
    for runs in (greedy, sampled):
        assert torch.equal(runs["fused"].input_ids, runs["onednn"].input_ids)
        assert torch.equal(runs["fused"].input_ids, runs["exact"].input_ids)
        assert runs["fused"].texts == runs["exact"].texts
    assert len(set(sampled["fused"].texts)) > 3  # drawn, not one answer repeated


def test_packed_weights_are_reused_and_follow_an_optimizer_step():
    """The base weights are packed once; an in-place change of a weight (a full fine-tuning step)
    repacks it, and a changed LoRA matrix is read at the next decode."""
    model, tok = _llama(lora=True)
    kernels = make_kernels("fused")

    def greedy():
        return generate_groups(model, tok, PROMPTS, 1, max_new_tokens=8, do_sample=False, kernels=kernels).input_ids

    first = greedy()
    packed = {name: hit[1] for name, hit in kernels._packed.items()}
    assert torch.equal(greedy(), first)
    assert all(kernels._packed[name][1] is p for name, p in packed.items())  # not repacked
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "down_proj.base_layer" in name:
                p.mul_(-2.0)
    changed = greedy()
    assert not torch.equal(changed, first)
    assert kernels._packed["0.down"][1] is not packed["0.down"] and kernels._packed["0.qkv"][1] is packed["0.qkv"]
    assert torch.equal(changed, generate_groups(model, tok, PROMPTS, 1, max_new_tokens=8, do_sample=False).input_ids)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: tiny_causal_lm("qwen2"), "implements LlamaForCausalLM, not Qwen2ForCausalLM"),
        (lambda: tiny_causal_lm("gpt2"), "not GPT2LMHeadModel"),
        (lambda: tiny_causal_lm("llama", hidden_act="gelu"), "hidden_act 'gelu'"),
        (lambda: tiny_causal_lm("llama", sliding_window=8), "sliding attention window"),
        (lambda: tiny_causal_lm("llama").double(), "dtype torch.float64"),
        (
            lambda: tiny_causal_lm(
                "llama", rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
            ),
            "rope_type 'dynamic'",
        ),
    ],
)
def test_models_it_does_not_implement_are_refused(build, match):
    with pytest.raises(ValueError, match=match) as err, FusedKernels().applied(build()):
        pass
    assert "use sampling_kernels 'onednn'" in str(err.value)


def test_lora_it_does_not_implement_is_refused():
    peft = pytest.importorskip("peft")
    from gcpo_train.model.policy import wrap_lora

    tok = tiny_tokenizer()

    def sample(model):
        return generate_groups(model, tok, PROMPTS, 1, max_new_tokens=2, kernels=FusedKernels())

    def llama():
        return tiny_causal_lm("llama", vocab_size=len(tok))

    active_dropout = wrap_lora(llama(), 4, 8, 0.1).train()
    with pytest.raises(ValueError, match="LoRA dropout 0.1 active"):
        sample(active_dropout)
    sample(active_dropout.eval())  # in eval mode the dropout is the identity: nothing to refuse
    dora = peft.get_peft_model(llama(), peft.LoraConfig(r=4, target_modules=["q_proj"], use_dora=True))
    with pytest.raises(ValueError, match="LoRA variant"):
        sample(dora.eval())
    on_embeddings = peft.get_peft_model(llama(), peft.LoraConfig(r=4, target_modules=["embed_tokens"]))
    with pytest.raises(ValueError, match="plain Embedding at model.embed_tokens"):
        sample(on_embeddings.eval())


def test_the_loop_refuses_fused_for_a_model_it_does_not_implement(tmp_path):
    pytest.importorskip("peft")
    pytest.importorskip("accelerate")
    from helpers.loop_setup import make

    with pytest.raises(ValueError, match="not Qwen2ForCausalLM; use sampling_kernels 'onednn'"):
        make(tmp_path, model="tiny:qwen2", sampling_kernels="fused")
