"""group_gradient_gram (one forward + one backward) against G separate backward passes."""

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gcpo_analysis.gradvar import (  # noqa: E402
    flat_gram,
    gradient_variance,
    group_gradient_gram,
    naive_gram,
    naive_group_gradients,
)
from gcpo_analysis.tiny_models import tiny_causal_lm  # noqa: E402

RTOL = 1e-4


def _batch(G=4, T=12, vocab=128, left=True, seed=0, token_range=None):
    """Sequences of different lengths, padded left or right, completion = tail after 3 tokens.

    Token 7 repeats within and across rows; token 0 (the pad id, and the embedding's
    padding_idx) also occurs at a real position.
    """
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, token_range or vocab, (G, T), generator=g)
    am = torch.ones(G, T, dtype=torch.long)
    cm = torch.zeros(G, T, dtype=torch.long)
    for i in range(G):
        n = T - (i % 3)
        if left:
            am[i, : T - n] = 0
            ids[i, : T - n] = 0
            cm[i, T - n + 3 :] = 1
        else:
            am[i, n:] = 0
            ids[i, n:] = 0
            cm[i, 3:n] = 1
    ids[:, 5] = 7
    ids[0, 6] = 7
    ids[1, 8] = 0
    return ids, am, cm


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("family", ["llama", "llama-tied", "qwen2", "gpt2"])
@pytest.mark.parametrize("left", [True, False])
def test_gram_matches_naive(family, left):
    model = tiny_causal_lm(family)
    ids, am, cm = _batch(left=left)
    K = group_gradient_gram(model, ids, am, cm)
    R = naive_gram(model, ids, am, cm)
    assert K.shape == (4, 4) and K.dtype == np.float64
    assert _rel(K, R) <= RTOL
    assert np.abs(R - np.diag(np.diag(R))).max() > 1e-3 * np.abs(R).max()  # off-diagonals matter


@pytest.mark.parametrize("family", ["llama-tied", "gpt2", "qwen2"])
@pytest.mark.parametrize("method", ["ghost", "materialise"])
def test_both_gram_forms_exact(family, method):
    model = tiny_causal_lm(family)
    ids, am, cm = _batch(G=3, T=10, token_range=12)  # many repeated tokens
    K = group_gradient_gram(model, ids, am, cm, method=method)
    assert _rel(K, naive_gram(model, ids, am, cm)) <= RTOL


def test_tied_cross_terms_are_needed():
    """The tied weight's Gram is not the sum of its embedding and lm_head Grams: cross terms."""
    import copy

    model = tiny_causal_lm("llama-tied")
    emb = model.get_input_embeddings().weight
    assert emb is model.get_output_embeddings().weight
    ids, am, cm = _batch()
    K = group_gradient_gram(model, ids, am, cm, params=[emb])
    untied = copy.deepcopy(model)
    untied.lm_head.weight = torch.nn.Parameter(untied.lm_head.weight.detach().clone())
    parts = [untied.get_input_embeddings().weight, untied.lm_head.weight]
    g = naive_group_gradients(untied, ids, am, cm, params=parts).double()
    n = parts[0].numel()
    g_emb, g_head = g[:, :n], g[:, n:]
    tied = (g_emb + g_head).numpy()
    pure = (g_emb @ g_emb.T + g_head @ g_head.T).numpy()
    assert _rel(K, tied @ tied.T) <= RTOL
    assert _rel(pure, tied @ tied.T) > 1e-2


def test_padding_side_does_not_change_gram():
    model = tiny_causal_lm("llama")
    ids_l, am_l, cm_l = _batch(left=True)
    ids_r = torch.zeros_like(ids_l)
    am_r, cm_r = torch.zeros_like(am_l), torch.zeros_like(cm_l)
    for i in range(ids_l.shape[0]):
        keep = am_l[i].bool()
        n = int(keep.sum())
        ids_r[i, :n], am_r[i, :n], cm_r[i, :n] = ids_l[i][keep], 1, cm_l[i][keep]
    K_l = group_gradient_gram(model, ids_l, am_l, cm_l)
    K_r = group_gradient_gram(model, ids_r, am_r, cm_r)
    assert _rel(K_l, K_r) <= RTOL


def test_lora_params():
    peft = pytest.importorskip("peft")
    base = tiny_causal_lm("llama")
    cfg = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0, init_lora_weights=False
    )
    model = peft.get_peft_model(base, cfg)
    model.eval()
    ids, am, cm = _batch()
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    K = group_gradient_gram(model, ids, am, cm, params="lora")
    R = naive_gram(model, ids, am, cm, params="lora")
    assert _rel(K, R) <= RTOL
    assert flags == {n: p.requires_grad for n, p in model.named_parameters()}
    assert all(p.grad is None for p in model.parameters())
    n_lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    assert naive_group_gradients(model, ids, am, cm, params="lora").shape == (4, n_lora)


def test_param_subset_and_no_grad_written():
    model = tiny_causal_lm("gpt2")
    ids, am, cm = _batch()
    sub = [model.transformer.wpe.weight, model.transformer.h[1].ln_1.bias, model.transformer.h[0].attn.c_attn.weight]
    K = group_gradient_gram(model, ids, am, cm, params=sub)
    assert _rel(K, naive_gram(model, ids, am, cm, params=sub)) <= RTOL
    assert all(p.grad is None for p in model.parameters())


def test_unsupported_module_is_named():
    model = tiny_causal_lm("llama")

    class Scaler(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(32))

        def forward(self, x):
            return x * self.scale

    model.model.layers[0].extra = Scaler()
    ids, am, cm = _batch()
    with pytest.raises(ValueError, match=r"model\.layers\.0\.extra.*Scaler"):
        group_gradient_gram(model, ids, am, cm)


def test_bad_masks_raise():
    model = tiny_causal_lm("llama")
    ids, am, cm = _batch()
    bad = cm.clone()
    bad[0, 0] = 1
    with pytest.raises(ValueError, match="first token"):
        group_gradient_gram(model, ids, am, bad)
    bad = cm.clone()
    bad[2] = 0
    with pytest.raises(ValueError, match="row 2"):
        group_gradient_gram(model, ids, am, bad)
    with pytest.raises(ValueError, match="params"):
        group_gradient_gram(model, ids, am, cm, params="some")


def test_gradient_variance_from_model_matches_definition():
    model = tiny_causal_lm("qwen2")
    ids, am, cm = _batch()
    g = naive_group_gradients(model, ids, am, cm).double().numpy()
    adv = np.array([1.2, -0.4, 0.0, -0.8])
    h = adv[:, None] * g
    direct = float(np.mean(np.sum((h - h.mean(0)) ** 2, axis=1)))
    v = gradient_variance(group_gradient_gram(model, ids, am, cm), adv)
    assert abs(v - direct) <= RTOL * direct


@settings(max_examples=40, deadline=None)
@given(G=st.integers(1, 6), P=st.integers(1, 9), seed=st.integers(0, 10_000))
def test_gradient_variance_property(G, P, seed):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(G, P))
    adv = rng.normal(size=G)
    h = adv[:, None] * g
    direct = float(np.mean(np.sum((h - h.mean(0)) ** 2, axis=1)))
    v = gradient_variance(flat_gram(torch.as_tensor(g)), adv)
    assert v >= 0
    assert abs(v - direct) <= 1e-9 * max(1.0, direct)
    assert gradient_variance(g @ g.T, np.zeros(G)) == 0.0


def test_gradient_variance_bad_input():
    with pytest.raises(ValueError, match="square"):
        gradient_variance(np.ones((2, 3)), np.ones(2))
    with pytest.raises(ValueError, match="advantages"):
        gradient_variance(np.eye(3), np.ones(2))
    with pytest.raises(ValueError, match="positive semi-definite"):
        gradient_variance(-np.eye(2), np.array([1.0, -1.0]))


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("GCPO_SLOW") != "1", reason="loads SmolLM2-135M (~45 s); set GCPO_SLOW=1")
def test_smollm2_tied_gram():
    from gcpo_analysis.models import load_policy

    model, _ = load_policy()
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=g)
    am = torch.ones_like(ids)
    am[1, :3] = 0
    cm = torch.zeros_like(ids)
    cm[:, 10:] = 1
    params = [model.get_input_embeddings().weight, *model.model.layers[0].parameters(), *model.model.norm.parameters()]
    K = group_gradient_gram(model, ids, am, cm, params=params)
    assert _rel(K, naive_gram(model, ids, am, cm, params=params)) <= RTOL


@pytest.mark.parametrize("family", ["llama-tied", "gpt2"])
def test_heavy_padding(family):
    """Most positions are padding in every row, so zero-gradient positions are dropped."""
    model = tiny_causal_lm(family)
    ids, am, cm = _batch(G=3, T=10, left=False)
    pad = torch.zeros(3, 24, dtype=torch.long)
    ids, am, cm = torch.cat([ids, pad], 1), torch.cat([am, pad], 1), torch.cat([cm, pad], 1)
    for method in ("ghost", "materialise"):
        K = group_gradient_gram(model, ids, am, cm, method=method)
        assert _rel(K, naive_gram(model, ids, am, cm)) <= RTOL


def _shared_batch(G=4, P=5, T=6, vocab=128, seed=1):
    """One prompt of P tokens continued by G completions of different lengths, right-padded (as
    ``gcpo study`` builds a group); token 7 repeats across the prompt and the completions."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, vocab, (1, P), generator=g).expand(G, P)
    comp = torch.randint(1, vocab, (G, T), generator=g)
    am = torch.ones(G, P + T, dtype=torch.long)
    for i in range(G):
        am[i, P + T - (i % 3) :] = 0
    ids = torch.cat([prompt, comp], 1).masked_fill(am == 0, 0)
    ids[:, 2] = 7
    ids[0, P + 1] = 7
    cm = am.clone()
    cm[:, :P] = 0
    return ids, am, cm


@pytest.mark.parametrize("family", ["llama", "llama-tied", "qwen2", "gpt2"])
def test_shared_prompt_gram_matches_naive(family, monkeypatch):
    """A group of one prompt runs it once (the per-row prompt passes ran), and K equals the
    naive per-row backward and the full-row route."""
    from gcpo_analysis.gradvar.hooks import GramCapture

    calls = []
    real = GramCapture.prompt_backward
    monkeypatch.setattr(GramCapture, "prompt_backward", lambda self: calls.append(self.G) or real(self))
    model = tiny_causal_lm(family)
    ids, am, cm = _shared_batch()
    R = naive_gram(model, ids, am, cm)
    K = group_gradient_gram(model, ids, am, cm)
    assert calls == [4]
    assert _rel(K, R) <= RTOL
    assert _rel(group_gradient_gram(model, ids, am, cm, share_prompt=False), R) <= RTOL
    assert calls == [4]  # the full-row route ran no prompt pass
    for method in ("ghost", "materialise"):
        assert _rel(group_gradient_gram(model, ids, am, cm, method=method), R) <= RTOL


def test_shared_prompt_gram_lora():
    peft = pytest.importorskip("peft")
    model = tiny_causal_lm("llama")
    model = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    for name, p in model.named_parameters():  # LoRA B starts at 0: move it so the rows' gradients differ
        if "lora_B" in name:
            p.data.normal_(0, 0.1)
    ids, am, cm = _shared_batch(G=3)
    K = group_gradient_gram(model, ids, am, cm, params="lora")
    assert _rel(K, naive_gram(model, ids, am, cm, params="lora")) <= RTOL


def test_shared_prompt_is_detected_only_where_it_is_shared():
    from gcpo_analysis.gradvar.batch import check_batch, shared_prompt_length

    model = tiny_causal_lm("llama")
    ids, am, cm = check_batch(*_shared_batch())
    assert shared_prompt_length(model, ids, am, cm) == 5
    other = ids.clone()
    other[1, 0] += 1  # row 1's prompt differs
    assert shared_prompt_length(model, other, am, cm) is None
    assert shared_prompt_length(model, *check_batch(*_batch(left=True))) is None  # left padding
    assert shared_prompt_length(model, ids[:1], am[:1], cm[:1]) is None  # one row: nothing to share
    gap = am.clone()
    gap[2, 7] = False  # a pad between two completion tokens: positions after it would shift
    assert shared_prompt_length(model, ids, gap, cm & gap) is None
