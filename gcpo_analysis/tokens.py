"""Token bookkeeping shared by the study and the trainer: position ids and completion masks.

One definition each, so that the study's log-probabilities (``gradvar``, ``study.collect``) and
the trainer's (``gcpo_train.model.logprobs``, ``gcpo_train.model.policy``) score the same tokens at the same
positions (docs/conventions.md, "Position ids and completion masks"). torch is imported by the
caller: these functions only use the methods of the tensors they are given.
"""

from __future__ import annotations

from typing import Any


def position_ids(attention_mask: Any) -> Any:
    """Position of every token among its row's attended tokens, as transformers' ``generate``
    builds them (``_prepare_position_ids_for_generation``, transformers 5):

        p_t = (Σ_{s≤t} m_s) − 1   where m_t = 1,      p_t = 0   where m_t = 0.

    A left-padded row is then scored at the positions it was sampled at (its first real token
    at 0), and a right-padded one at 0, 1, 2, ... as if unpadded. On attended tokens this is
    also what gcpo computed before it had one helper ((Σ m) − 1 clamped at 0, or with pads set
    to 1): those formulas differ only on padded tokens, whose position is a convention: the
    attention mask hides a padded key from every query, and a padded query's output is masked
    out of every log-probability and gradient (``tests/analysis/test_tokens.py`` checks both claims).
    (B, T) in, (B, T) long out.
    """
    m = attention_mask.long()
    return (m.cumsum(-1) - 1).masked_fill(m == 0, 0)


def completion_mask(completion_ids: Any, eos_ids: Any) -> Any:
    """1 on a completion's tokens up to and including its first EOS, 0 after it:

        c_t = 1  iff no EOS in y_0 .. y_{t−1}.

    The EOS is the policy's last action, so it counts in n_tokens, the log-probability, the
    entropy and the gradient (docs/conventions.md); a row without EOS (cut at max_new_tokens) is
    all ones. ``eos_ids``: one id or several (a model may stop on more than one token); None or
    empty means no EOS. (B, N) ids in, (B, N) long out.
    """
    ids = [] if eos_ids is None else list(eos_ids) if isinstance(eos_ids, (list, tuple, set)) else [eos_ids]
    is_eos = completion_ids != completion_ids  # all False, on the ids' device
    for e in ids:
        is_eos = is_eos | (completion_ids == int(e))
    before = is_eos.long().cumsum(-1) - is_eos.long()  # EOS tokens strictly before t
    return (before == 0).long()
