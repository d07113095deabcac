"""The inputs both Gram routes share: the checked (G, T) batch, sequence log-probabilities and
the parameter selection.

log pi(y_i | q) is summed over the completion's tokens (EOS included; docs/conventions.md,
"Gradient variance of a query"); a tied weight is one parameter, selected once.
"""

from __future__ import annotations

import inspect

from ..models import require
from ..tokens import position_ids


def check_batch(input_ids, attention_mask, completion_mask):
    torch = require("torch")
    ids = torch.as_tensor(input_ids)
    am = torch.as_tensor(attention_mask) if attention_mask is not None else torch.ones_like(ids)
    cm = torch.as_tensor(completion_mask)
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be (G, T), got shape {tuple(ids.shape)}")
    for name, t in (("attention_mask", am), ("completion_mask", cm)):
        if tuple(t.shape) != tuple(ids.shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, input_ids has {tuple(ids.shape)}")
    am, cm = am.bool(), cm.bool()
    if cm[:, 0].any():
        raise ValueError("completion_mask[:, 0] is set: the first token has no prediction")
    if (cm & ~am).any():
        row = int(torch.nonzero(cm & ~am)[0, 0])
        raise ValueError(f"completion_mask marks padded positions (attention_mask == 0) in row {row}")
    empty = ~cm.any(1)
    if empty.any():
        raise ValueError(f"row {int(torch.nonzero(empty)[0, 0])} has an empty completion_mask")
    return ids.long(), am, cm


def sequence_logprobs(model, input_ids, attention_mask, completion_mask):
    """log pi(y_i | q) = sum_t completion_mask[i,t] * log softmax(logits[i,t-1])[input_ids[i,t]].

    One batched forward with explicit position ids (so left padding gives the same result as
    each sequence alone). Only the scored positions go through the log-softmax. Returns (G,).
    """
    torch = require("torch")
    ids, am, cm = check_batch(input_ids, attention_mask, completion_mask)
    dev = next(model.parameters()).device
    ids, am, cm = ids.to(dev), am.to(dev), cm.to(dev)
    kwargs = {}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    if "logits_to_keep" in inspect.signature(type(base).forward).parameters:
        # only positions from the first scored one's predecessor on need logits (saves the
        # lm_head output and its gradient over the prompt)
        kwargs["logits_to_keep"] = ids.shape[1] - int(torch.nonzero(cm.any(0))[0, 0]) + 1
    logits = model(
        input_ids=ids, attention_mask=am.long(), position_ids=position_ids(am), use_cache=False, **kwargs
    ).logits
    o = ids.shape[1] - logits.shape[1]  # logits[:, k] predicts token o + k + 1
    return _summed_logprobs(logits[:, :-1], ids[:, o + 1 :], cm[:, o + 1 :])


def _summed_logprobs(logits, tokens, target):
    """sum_t target[i,t] * log softmax(logits[i,t])[tokens[i,t]] per row; logits (G, n, vocab)
    predict tokens (G, n). Only the scored positions go through the log-softmax."""
    torch = require("torch")
    rows = torch.nonzero(target)  # (N, 2): (sample, position)
    lp = torch.log_softmax(logits[target].float(), -1).gather(-1, tokens[target][:, None])[:, 0]
    out = torch.zeros(tokens.shape[0], dtype=lp.dtype, device=lp.device)
    return out.index_add(0, rows[:, 0], lp)


def shared_prompt_length(model, ids, am, cm):
    """P if every row starts with the same P unpadded tokens before the first scored one of any
    row, its tokens after them are right-padded (so they sit at positions P, P+1, ...: a group of
    one prompt, as ``gcpo study`` builds it), and the model continues from a cache; else None.
    ``ids, am, cm`` as ``check_batch`` returns them (every row has a scored token)."""
    from ..prompt_cache import cache_argument

    P = int(cm.int().argmax(1).min())  # the earliest scored position of any row
    if ids.shape[0] < 2 or P < 1 or cache_argument(model) is None:
        return None
    if not bool(am[:, :P].all()) or not bool((ids[:, :P] == ids[:1, :P]).all()):
        return None
    if bool((am[:, P + 1 :] & ~am[:, P:-1]).any()):  # a real token after a pad: not right-padded
        return None
    return P


def shared_sequence_logprobs(model, input_ids, attention_mask, completion_mask, P, on_shared=None):
    """``sequence_logprobs`` with the rows' common P-token prompt run once (``prompt_cache``):
    the same values up to float rounding. Right-padded completions only: a row's tokens after its
    prompt sit at positions P, P+1, ... (what ``tokens.position_ids`` gives a row without left
    padding). ``on_shared``: see ``prompt_cache``."""
    from ..prompt_cache import shared_prompt_logits

    ids, am, cm = check_batch(input_ids, attention_mask, completion_mask)
    dev = next(model.parameters()).device
    ids, am, cm = ids.to(dev), am.to(dev), cm.to(dev)
    logits = shared_prompt_logits(model, ids[:1, :P], ids[:, P:], am[:, P:].long(), on_shared=on_shared)
    return _summed_logprobs(logits, ids[:, P:], cm[:, P:])


def select_params(model, params):
    """Selected parameters (deduplicated by identity, so a tied weight counts once)."""
    if isinstance(params, str):
        if params == "all":
            chosen = list(model.parameters())
        elif params == "lora":
            chosen = [p for n, p in model.named_parameters() if "lora_" in n]
            if not chosen:
                raise ValueError("params='lora' but the model has no parameter whose name contains 'lora_'")
        else:
            raise ValueError(f"params must be 'all', 'lora' or an iterable of parameters, got {params!r}")
    else:
        chosen = list(params)
        if not chosen:
            raise ValueError("params is an empty iterable")
    seen, out = set(), []
    for p in chosen:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out
