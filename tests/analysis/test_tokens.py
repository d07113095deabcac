"""gcpo_analysis.tokens: the one position-id rule and the one completion mask, against naive loops
and against the formulas they replaced (on the tokens those were used on), and the claim that the
position of a padded token changes nothing the study or the trainer computes."""

import pytest

torch = pytest.importorskip("torch")

from gcpo_analysis.tokens import completion_mask, position_ids  # noqa: E402

# (B, T) attention masks: all ones, left padding, right padding, both, one token, a row of pads
MASKS = {
    "all_ones": [[1, 1, 1, 1, 1]],
    "left": [[0, 0, 1, 1, 1], [0, 1, 1, 1, 1], [1, 1, 1, 1, 1]],
    "right": [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]],
    "left_and_right": [[0, 0, 1, 1, 0], [0, 1, 1, 1, 1], [1, 1, 0, 0, 0]],
    "one_token": [[1]],
    "all_pads": [[0, 0, 0], [1, 1, 1]],
}


def _naive_positions(mask):
    """Row by row: the number of attended tokens before t on an attended token, 0 on a pad."""
    out = []
    for row in mask:
        seen, pos = 0, []
        for m in row:
            pos.append(seen if m else 0)
            seen += m
        out.append(pos)
    return torch.tensor(out)


def _clamped(am):  # gcpo_train/loop/loss.py before: (Σ m − 1) clamped at 0
    return (am.long().cumsum(-1) - 1).clamp(min=0)


def _pads_one(am):  # gcpo_analysis/gradvar/batch.py before: pads set to 1
    return (am.long().cumsum(-1) - 1).masked_fill(am == 0, 1)


@pytest.mark.parametrize("name", sorted(MASKS))
def test_position_ids_count_the_attended_tokens_before(name):
    am = torch.tensor(MASKS[name])
    got = position_ids(am)
    assert got.dtype == torch.long
    assert torch.equal(got, _naive_positions(MASKS[name]))
    assert torch.equal(position_ids(am.bool()), got)  # a bool mask (gradvar's) gives the same


@pytest.mark.parametrize("name", sorted(MASKS))
def test_the_replaced_formulas_agree_on_attended_tokens(name):
    am = torch.tensor(MASKS[name])
    attended = am.bool()
    for old in (_clamped, _pads_one):
        assert torch.equal(old(am)[attended], position_ids(am)[attended])


def test_the_replaced_formulas_differ_only_on_pads():
    # right padding after real tokens: the clamped rule gives the last position again, the other 1
    am = torch.tensor(MASKS["right"])
    pads = ~am.bool()
    assert (_clamped(am) != position_ids(am))[pads].any()
    assert (_pads_one(am) != position_ids(am))[pads].all()
    assert not (_clamped(am) != position_ids(am))[~pads].any()


def _batch(vocab=50, seed=0):
    """Rows of [prompt | completion] with left-padded prompts and right-padded completions."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (3, 11), generator=gen)
    am = torch.tensor(
        [
            [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0],  # left-padded prompt, completion stopped early
            [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],  # nothing padded
            [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0],
        ]
    )
    cm = torch.zeros_like(am)
    cm[:, 6:] = am[:, 6:]  # the last 5 columns are the completion
    return ids.masked_fill(am == 0, 0), am, cm


@pytest.mark.parametrize("family", ["llama", "gpt2"])  # rotary and absolute position embeddings
def test_the_position_of_a_pad_changes_no_logprob_and_no_gradient(family):
    """One forward and backward of Σ log π(y_t) over the completion tokens with each rule: the
    same log-probabilities and the same gradient, bit for bit."""
    pytest.importorskip("transformers")
    from gcpo_analysis.tiny_models import tiny_causal_lm

    model = tiny_causal_lm(family, vocab_size=50)
    ids, am, cm = _batch()
    results = []
    for rule in (position_ids, _clamped, _pads_one):
        model.zero_grad()
        logits = model(input_ids=ids, attention_mask=am, position_ids=rule(am), use_cache=False).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
        scored = logp[cm[:, 1:].bool()]
        scored.sum().backward()
        results.append((scored.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (lp, grads), others = results[0], results[1:]
    assert grads and any(g.abs().max() > 0 for g in grads)
    for lp_other, grads_other in others:
        assert torch.equal(lp, lp_other)
        assert all(torch.equal(a, b) for a, b in zip(grads, grads_other))


def test_the_study_gram_is_the_same_with_either_rule(monkeypatch):
    """The study's exact Gram (gradvar.group_gradient_gram) on a left- and right-padded group is
    bit-identical whichever of the three rules places the pads."""
    pytest.importorskip("transformers")
    import gcpo_analysis.gradvar.batch as batch
    from gcpo_analysis.gradvar import group_gradient_gram
    from gcpo_analysis.tiny_models import tiny_causal_lm

    model = tiny_causal_lm("llama", vocab_size=50)
    ids, am, cm = _batch()
    grams = []
    for rule in (position_ids, _clamped, _pads_one):
        monkeypatch.setattr(batch, "position_ids", rule)
        grams.append(group_gradient_gram(model, ids, am, cm, params="all"))
    assert grams[0].max() > 0
    for other in grams[1:]:
        assert (grams[0] == other).all()
    # the rule is in use: counting pads too (0, 1, 2, ... on every row) moves the left-padded rows
    monkeypatch.setattr(batch, "position_ids", lambda am: torch.arange(am.shape[1]).expand(am.shape[0], -1))
    assert not (group_gradient_gram(model, ids, am, cm, params="all") == grams[0]).all()


EOS = 3


def _naive_mask(rows, eos_ids):
    out = []
    for row in rows:
        ended, mask = False, []
        for tok in row:
            mask.append(0 if ended else 1)
            ended = ended or tok in eos_ids
        out.append(mask)
    return torch.tensor(out)


def _collect_rule(gen, eos):  # gcpo_analysis/study/collect.py before
    N = gen.shape[1]
    is_eos = gen == eos
    first = torch.where(is_eos.any(1), is_eos.float().argmax(1) + 1, torch.full_like(gen[:, 0], N))
    return torch.arange(N)[None] < first[:, None]


def _policy_rule(ids, eos_ids):  # gcpo_train/model/policy.py completion_mask_from_ids before
    is_eos = torch.zeros_like(ids, dtype=torch.bool)
    for e in eos_ids:
        is_eos |= ids == e
    after = torch.cumsum(is_eos.int(), dim=1) - is_eos.int()
    return (after == 0).long()


COMPLETIONS = [
    [EOS, 0, 0, 0, 0],  # EOS as the first token (then pads)
    [7, 8, 9, 10, 11],  # no EOS: cut at max_new_tokens, all ones
    [7, 8, EOS, EOS, EOS],  # pad == eos after the EOS
    [7, EOS, 8, EOS, 9],  # tokens after the first EOS are not the completion's
    [7, 8, 9, 10, EOS],  # EOS as the last token
]


@pytest.mark.parametrize("eos_ids", [[EOS], [EOS, 9], []])
def test_completion_mask_stops_after_the_first_eos(eos_ids):
    ids = torch.tensor(COMPLETIONS)
    got = completion_mask(ids, eos_ids)
    assert got.dtype == torch.long
    assert torch.equal(got, _naive_mask(COMPLETIONS, eos_ids))
    assert torch.equal(got, _policy_rule(ids, eos_ids))


def test_completion_mask_hand_example_and_the_study_rule():
    ids = torch.tensor(COMPLETIONS)
    expected = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.long
    )
    assert torch.equal(completion_mask(ids, EOS), expected)  # one id, as the study passes it
    assert torch.equal(completion_mask(ids, [EOS]), expected)
    assert torch.equal(_collect_rule(ids, EOS).long(), expected)
    assert torch.equal(completion_mask(ids, None), torch.ones_like(ids))  # a tokenizer without EOS
