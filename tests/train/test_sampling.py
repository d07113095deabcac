"""The fast CPU sampler (gcpo_train/sampling/kernels.py, ``sampling_kernels``) against transformers'
generate (``exact``, the default): its decode loop draws what generate draws for the same seeds;
the packed kernels change only float rounding; a group's samples depend on its seed, not on the
prompts beside it; packed weights follow the weights they pack; the knob is validated."""

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer  # noqa: E402
from gcpo_train.sampling.generate import generate_groups  # noqa: E402
from gcpo_train.sampling.kernels import PackedLinears, grow_cache, growing_kv_layer  # noqa: E402
from gcpo_train.sampling.registry import check_kernels  # noqa: E402

PROMPTS = ["who is the king of the city ?", "what was the war ?", "where is the ship of his father now ?"]
SEEDS = [5, 6, 7]
needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")


class PlainKernels:
    """The decode loop on the model's own forward: isolates the loop from the packed kernels."""

    name = "plain"

    @contextlib.contextmanager
    def applied(self, model):
        yield model


@pytest.fixture(scope="module")
def policy():
    """A tiny llama with large weights (initializer_range 0.5, not 0.02): its next-token
    distribution is peaked and depends on every position, so a wrong position, mask or cache
    entry changes the samples (with the default, nearly uniform logits it would not)."""
    tok = tiny_tokenizer()
    return tiny_causal_lm("llama", vocab_size=len(tok), initializer_range=0.5), tok


def _sample(policy, prompts=PROMPTS, seeds=SEEDS, kernels=None, **kw):
    model, tok = policy
    kw = dict(max_new_tokens=10, temperature=0.9, **kw)
    return generate_groups(model, tok, prompts, 4, seeds=seeds, kernels=kernels, **kw)


def _same_batches(a, b):
    assert torch.equal(a.input_ids, b.input_ids)
    assert torch.equal(a.attention_mask, b.attention_mask)
    assert torch.equal(a.completion_mask, b.completion_mask)
    assert a.texts == b.texts and a.n_prompt == b.n_prompt
    assert [p.tolist() for p in a.prompt_ids] == [p.tolist() for p in b.prompt_ids]


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_decode_loop_draws_what_generate_draws(policy, top_p):
    """One prompt (G rows, the shapes generate's per-group call has): every token, mask and text
    equal to transformers generate after torch.manual_seed(seed); then all three groups in one loop."""
    exact = _sample(policy, PROMPTS[:1], SEEDS[:1], top_p=top_p)
    _same_batches(_sample(policy, PROMPTS[:1], SEEDS[:1], PlainKernels(), top_p=top_p), exact)
    assert len(set(exact.texts)) > 1  # sampled, not one answer repeated
    # three groups of different prompt lengths in one batch (left-padded): the same tokens as three
    # generate calls (rounding of a row could depend on its batch; on this model it does not)
    _same_batches(_sample(policy, kernels=PlainKernels(), top_p=top_p), _sample(policy, top_p=top_p))


def test_a_group_depends_on_its_seed_not_on_its_batch(policy):
    alone = _sample(policy, PROMPTS[1:2], SEEDS[1:2], PlainKernels())
    together = _sample(policy, kernels=PlainKernels())
    P, T = alone.n_prompt, alone.n_completion
    assert torch.equal(together.input_ids[4:8, together.n_prompt - P : together.n_prompt + T], alone.input_ids)
    other_seed = _sample(policy, PROMPTS[1:2], [99], PlainKernels())
    assert not torch.equal(other_seed.input_ids, alone.input_ids)


def test_greedy_batches_decode_what_generate_decodes(policy):
    model, tok = policy
    exact = generate_groups(model, tok, PROMPTS, 1, max_new_tokens=10, do_sample=False)
    loop = generate_groups(model, tok, PROMPTS, 1, max_new_tokens=10, do_sample=False, kernels=PlainKernels())
    assert torch.equal(exact.input_ids, loop.input_ids) and exact.texts == loop.texts


@needs_onednn
def test_onednn_kernels_give_generates_samples_up_to_rounding(policy):
    """fp32 weights prepacked for oneDNN: the logits agree with the model's own to float rounding,
    so the tiny model's samples are generate's (a token could differ only at a rounding tie)."""
    model, tok = policy
    kernels = PackedLinears()
    _same_batches(_sample(policy, kernels=kernels), _sample(policy))
    ids = tok(PROMPTS[:1], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with kernels.applied(model):
            packed = model(input_ids=ids).logits
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)
    assert not any("forward" in vars(m) for m in model.modules())  # the model is restored


@pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="no oneDNN bf16 on this CPU",
)
def test_bf16_kernels_are_a_bf16_rounding_of_each_linear():
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 40)
    x = torch.randn(5, 48)
    with torch.no_grad():
        expect = torch.nn.functional.linear(
            x.bfloat16().float(), lin.weight.bfloat16().float(), lin.bias.bfloat16().float()
        )
        plain = lin(x)
        with PackedLinears(bf16=True).applied(lin):
            got = lin(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expect, rtol=1e-2, atol=1e-2)  # bf16 inputs, fp32 accumulation, bf16 output
    assert (got - plain).abs().max() > 1e-5  # rounded, not the fp32 product


@needs_onednn
def test_packed_weights_follow_the_weights_they_pack():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(3, 16)
    kernels = PackedLinears()
    with torch.no_grad():
        with kernels.applied(lin):
            before = lin(x)
        lin.weight.mul_(2.0)  # an optimizer step changes the weight in place
        with kernels.applied(lin):
            after = lin(x)
        torch.testing.assert_close(after, lin(x), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(after, before)


def test_growing_cache_writes_in_place_and_grows_past_its_capacity():
    from transformers.cache_utils import DynamicLayer

    torch.manual_seed(0)
    keys = [torch.randn(2, 3, n, 4) for n in (5, 1, 1, 1)]
    layer = DynamicLayer()
    for k in keys[:1]:
        layer.update(k, k + 1)
    plain = DynamicLayer()
    plain.update(keys[0], keys[0] + 1)

    class Cache:
        layers = [layer]

    grown = grow_cache(Cache(), capacity=7).layers[0]
    assert isinstance(grown, growing_kv_layer())
    buffer = grown._keys.data_ptr()
    for k in keys[1:]:  # 5 -> 6 -> 7 in place, then 8: past the capacity
        got, want = grown.update(k, k + 1), plain.update(k, k + 1)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert grown.get_seq_length() == plain.get_seq_length()
    assert grown._keys.data_ptr() == buffer


def test_check_kernels_refuses_what_cannot_run():
    check_kernels("exact", "cuda")
    with pytest.raises(ValueError, match="one of exact, onednn, bf16, fused, fused_bf16"):
        check_kernels("fast")
    with pytest.raises(ValueError, match="did you mean fused"):
        check_kernels("fusd")
    with pytest.raises(ValueError, match="for CPU runs"):
        check_kernels("onednn", "cuda")


def test_config_knob_validated_and_out_of_the_identity_at_its_default(tmp_path):
    from gcpo_train.config import TrainConfig

    base = dict(model="tiny:llama", dataset="narrativeqa", output_dir=str(tmp_path / "r"))
    cfg = TrainConfig(**base)
    cfg.validate()
    assert "sampling_kernels" not in cfg.identity()  # runs recorded before the knob still resume
    fast = TrainConfig(**base, sampling_kernels="onednn")
    fast.validate()
    assert fast.identity()["sampling_kernels"] == "onednn" and fast.config_hash() != cfg.config_hash()
    with pytest.raises(ValueError, match="sampling_kernels"):
        TrainConfig(**base, sampling_kernels="fast").validate()
    with pytest.raises(ValueError, match="set sampling_kernels: exact"):
        TrainConfig(**base, sampling_kernels="onednn", backend="trl").validate()


@needs_onednn
@pytest.mark.parametrize("fast", ["onednn", "fused", "fused_bf16"])
def test_a_training_step_and_its_evaluation_on_packed_kernels(tmp_path, fast):
    """The loop's step 1 with sampling_kernels 'onednn', 'fused' or 'fused_bf16' samples the
    rollouts 'exact' samples (tiny model: rounding, even bf16's, never reaches a token; the loss
    scores them in float32 whichever sampler drew them), and its greedy evaluation decodes alike."""
    pytest.importorskip("peft")
    if fast == "fused_bf16" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("no oneDNN bf16 on this CPU")
    pytest.importorskip("accelerate")
    from helpers.loop_setup import make

    frames, evals = {}, {}
    for kernels in ("exact", fast):
        trainer = make(tmp_path, kernels, steps=1, sampling_kernels=kernels, eval_n=12)
        _, frames[kernels] = trainer.train_step(1)
        evals[kernels] = trainer.evaluate(tag="t")
    assert frames["exact"]["completion"].tolist() == frames[fast]["completion"].tolist()
    np.testing.assert_allclose(frames["exact"]["logprob"], frames[fast]["logprob"], rtol=1e-5, atol=1e-6)
    assert evals["exact"]["scores"] == evals[fast]["scores"]
    # evaluation is never bf16: a bf16 sampler's run is evaluated on its fp32 twin
    twin = {"fused_bf16": "fused"}.get(fast, fast)
    assert (evals["exact"]["sampling_kernels"], evals[fast]["sampling_kernels"]) == ("exact", twin)
    assert evals[fast]["batch_size"] > evals["exact"]["batch_size"]


def test_multinomials_one_draw_is_an_exponential_race():
    """What docs/developer/benchmarks.md says of the draw the samplers keep: torch.multinomial's
    one-sample draw is argmax(p / q) with q ~ Exp(1) drawn per vocabulary entry from the same
    generator, so the exponential samples are its cost, and no cheaper draw gives its tokens."""
    p = torch.softmax(3 * torch.randn(8, 5000, generator=torch.Generator().manual_seed(0)), dim=-1)
    for seed in range(5):
        drawn = torch.multinomial(p, 1, generator=torch.Generator().manual_seed(seed)).squeeze(1)
        q = torch.empty_like(p).exponential_(generator=torch.Generator().manual_seed(seed))
        assert torch.equal(drawn, (p / q).argmax(-1))


@needs_onednn
@pytest.mark.parametrize(("given", "evaluated"), [("fused_bf16", "fused"), ("bf16", "onednn"), ("fused", "fused")])
def test_evaluation_never_decodes_on_a_given_bf16_sampler(given, evaluated):
    """The trainer hands its own sampler to ``evaluate``: a bf16 one must be swapped for its fp32
    twin there too, not only when read from the config (needs no bf16 CPU, nothing is
    decoded). A given fp32 sampler is used as it is."""
    from types import SimpleNamespace

    from gcpo_train.evaluation.evaluate import pick_kernels

    model = torch.nn.Linear(2, 2)
    kernels = SimpleNamespace(name=given)
    picked = pick_kernels(model, kernels=kernels)
    assert picked.name == evaluated
    assert (picked is kernels) == (given == evaluated)
    config = SimpleNamespace(sampling_kernels=given)
    assert pick_kernels(model, config=config).name == evaluated
    assert pick_kernels(model) is None
