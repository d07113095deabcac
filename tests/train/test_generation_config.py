"""Samplers sample the policy: a model folder whose ``generation_config`` sets
``repetition_penalty``, ``top_k``, ``no_repeat_ngram_size`` and ``do_sample: false`` (as instruct
checkpoints ship) changes no sampler's tokens. Every sampler gives what a hand-rolled decode
gives: the argmax of the logits (greedy), or a draw from softmax(logits / T) cut to the top-p
nucleus on the group's seeded stream (sampling), with the logits of the model's full forward
(no cache) at every step. Before the fix, ``exact`` (transformers generate) applied the folder's
repetition penalty and n-gram ban while ``onednn``/``fused`` did not."""

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer  # noqa: E402
from gcpo_train.model.policy import eos_ids_of, load_model_and_tokenizer  # noqa: E402
from gcpo_train.sampling.generate import _encode, generate_groups  # noqa: E402
from gcpo_train.sampling.registry import SAMPLERS, make_kernels  # noqa: E402

PROMPTS = ["who is the king of the city ?", "what was the war ?"]
SEEDS = [11, 12]
T, TOP_P, G, NEW = 0.9, 0.9, 4, 12
FOLDER_SETTINGS = dict(repetition_penalty=5.0, top_k=2, no_repeat_ngram_size=2, do_sample=False)
# the fp32 samplers this machine runs (bf16 ones sample a bf16 rounding of π_θ: other tokens by design)
FP32 = [n for n, s in SAMPLERS.items() if not s.bf16 and (not s.packs_weights or torch.backends.mkldnn.is_available())]


@pytest.fixture(scope="module")
def folder_policy(tmp_path_factory):
    """A tiny llama saved with ``save_pretrained`` next to a generation_config.json that asks for
    the folder's settings, loaded back as a user's model folder is."""
    tok = tiny_tokenizer()
    model = tiny_causal_lm("llama", vocab_size=len(tok), initializer_range=0.5)
    path = tmp_path_factory.mktemp("instruct")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    # written by hand: transformers refuses to save top_k beside do_sample false, but folders hold it
    (path / "generation_config.json").write_text(
        json.dumps(dict(bos_token_id=2, eos_token_id=3, pad_token_id=0, **FOLDER_SETTINGS)), encoding="utf-8"
    )
    loaded, loaded_tok = load_model_and_tokenizer(str(path), "float32")
    assert {k: getattr(loaded.generation_config, k) for k in FOLDER_SETTINGS} == FOLDER_SETTINGS
    return loaded.eval(), loaded_tok


def _by_hand(model, tok, prompt: str, seed: int | None):
    """G continuations of ``prompt``: argmax (seed None) or torch.multinomial on
    torch.manual_seed(seed)'s stream of softmax(logits / T) over the top-p nucleus (the smallest
    set of the most likely tokens whose mass reaches p), rows drawn together at each step, rows
    past their EOS padded. Logits from the full forward of the sequence so far."""
    ids, att = _encode(tok, [prompt], None, None)
    rows = 1 if seed is None else G
    seqs, mask = ids.repeat(rows, 1), att.repeat(rows, 1)
    eos = torch.tensor(eos_ids_of(tok, model))
    done = torch.zeros(rows, dtype=torch.bool)
    if seed is not None:
        torch.manual_seed(seed)
    out = []
    with torch.no_grad():
        for _ in range(NEW):
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=seqs, attention_mask=mask, position_ids=positions).logits[:, -1].float()
            if seed is None:
                nxt = logits.argmax(-1)
            else:
                probs = torch.softmax(logits / T, dim=-1)
                order = probs.sort(dim=-1, descending=True)
                before = order.values.cumsum(-1) - order.values  # mass of the more likely tokens
                keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order.indices, before < TOP_P)
                scores = (logits / T).masked_fill(~keep, float("-inf"))
                nxt = torch.multinomial(torch.softmax(scores, dim=-1), 1).squeeze(1)
            nxt = torch.where(done, torch.tensor(tok.pad_token_id), nxt)
            out.append(nxt)
            done |= torch.isin(nxt, eos)
            seqs = torch.cat([seqs, nxt[:, None]], 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            if done.all():
                break
    return torch.stack(out, 1)


def _completions(batch, group: int, rows: int):
    """Group ``group``'s completion ids (rows × T), up to the batch's shared length."""
    return batch.completion_ids[group * rows : (group + 1) * rows]


def _same(got, want, pad: int):
    """The batch's group (padded to the batch's longest group) equals the hand-rolled decode."""
    n = want.shape[1]
    assert got.shape[1] >= n and torch.equal(got[:, :n], want)
    assert (got[:, n:] == pad).all()


@pytest.mark.parametrize("name", FP32)
def test_greedy_is_the_argmax_of_the_policy(folder_policy, name):
    model, tok = folder_policy
    batch = generate_groups(model, tok, PROMPTS, 1, max_new_tokens=NEW, do_sample=False, kernels=make_kernels(name))
    for q, prompt in enumerate(PROMPTS):
        _same(_completions(batch, q, 1), _by_hand(model, tok, prompt, None), tok.pad_token_id)


@pytest.mark.parametrize("name", FP32)
def test_samples_are_draws_from_the_policy_at_t_and_top_p(folder_policy, name):
    model, tok = folder_policy
    batch = generate_groups(
        model, tok, PROMPTS, G, max_new_tokens=NEW, temperature=T, top_p=TOP_P, seeds=SEEDS, kernels=make_kernels(name)
    )
    for q, (prompt, seed) in enumerate(zip(PROMPTS, SEEDS)):
        _same(_completions(batch, q, G), _by_hand(model, tok, prompt, seed), tok.pad_token_id)
    assert len(set(batch.texts)) > 2  # drawn, not the top_k / greedy the folder asks for


def test_the_folder_settings_would_change_the_tokens(folder_policy):
    """The test has teeth: transformers generate with the folder's settings applied gives other
    greedy tokens than the policy's argmax on this model."""
    model, tok = folder_policy
    ids, att = _encode(tok, PROMPTS[:1], None, None)
    with torch.no_grad():
        applied = model.generate(
            input_ids=ids, attention_mask=att, max_new_tokens=NEW, pad_token_id=tok.pad_token_id, eos_token_id=3
        )[:, ids.shape[1] :]
    want = _by_hand(model, tok, PROMPTS[0], None)
    n = min(applied.shape[1], want.shape[1])
    assert not torch.equal(applied[:, :n], want[:, :n])
    assert model.generation_config.repetition_penalty == 5.0  # restored after the samplers ran
