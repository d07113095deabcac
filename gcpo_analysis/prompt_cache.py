"""A group's rollouts continue one prompt: its forward runs once and its keys/values are repeated
for the G continuations (docs/conventions.md, "Shared prompts").

``run_prompt_once`` is the prompt's forward; ``shared_prompt_logits`` runs the completions on its
cache and returns the logits that predict them, the same numbers as G full-row forwards up to
float rounding, gradients included (the backward of the repeat sums the rollouts' gradients into
the prompt). Used by generation, by the trainers' log-prob passes (``gcpo_train.model.logprobs``) and by
``gradvar.group_gradient_gram``. ``on_shared(shared, repeated)`` hands a caller the prompt's
outputs that the rollouts read, before and after their repeat, so that each rollout's own gradient
on them can be taken (``gradvar.hooks.GramCapture.prompt_backward``).
"""

from __future__ import annotations

from .models import require

# The name of a model's key/value-cache argument (and output field): transformers 5.24 renamed
# ``past_key_values`` to ``cache``. Read from the model's forward signature, not the version.
CACHE_ARGUMENTS = ("cache", "past_key_values")


def forward_parameters(model) -> set:
    """Names of the keyword arguments the underlying model's ``forward`` takes (through DDP and peft)."""
    import inspect

    base = getattr(model, "module", model)  # DDP wrapper
    if hasattr(base, "get_base_model"):  # peft forwards kwargs to the base model
        base = base.get_base_model()
    return set(inspect.signature(base.forward).parameters)


def cache_argument(model) -> str | None:
    """The name under which ``model``'s forward takes a key/value cache (``CACHE_ARGUMENTS``),
    or None when it takes none (then every row runs in full: callers warn and record it)."""
    params = forward_parameters(model)
    return next((name for name in CACHE_ARGUMENTS if name in params), None)


def output_cache(out):
    """The key/value cache of a forward's output, under either name (``CACHE_ARGUMENTS``)."""
    for name in CACHE_ARGUMENTS:
        cache = getattr(out, name, None)
        if cache is not None:
            return cache
    raise TypeError(f"the model's output ({type(out).__name__}) holds no key/value cache (use_cache=True)")


def run_prompt_once(model, prompt_ids, repeats: int, attention_mask=None, on_shared=None, **model_kwargs):
    """The forward of one prompt (1, P) with its keys/values then repeated ``repeats`` times in
    the batch (``Cache.batch_repeat_interleave``): the cache the G rollouts of a group continue
    from, computed once instead of G times. Only the last position's logits are kept where the
    model allows it. Returns the model output (``.logits``; its cache: ``output_cache``).
    ``model_kwargs`` go to the forward (e.g. generate's ``position_ids`` for left-padded prompts).
    ``on_shared(shared, repeated)``: called with the cache's key/value tensors before and after
    the repeat (``track_gradvar`` takes each rollout's gradient on them)."""
    keep = {"logits_to_keep": 1} if "logits_to_keep" in forward_parameters(model) else {}
    out = model(input_ids=prompt_ids, attention_mask=attention_mask, use_cache=True, **keep, **model_kwargs)
    cache = output_cache(out)
    if on_shared is None:
        cache.batch_repeat_interleave(repeats)
        return out
    if not hasattr(cache, "layers"):
        raise TypeError(
            f"{type(cache).__name__} has no per-layer keys/values to take each rollout's gradient "
            "through the shared prompt; set share_prompt: false to track full rows"
        )

    def tensors():
        return [t for layer in cache.layers for t in (layer.keys, layer.values)]

    shared = tensors()
    cache.batch_repeat_interleave(repeats)
    on_shared(shared, tensors())
    return out


def shared_prompt_logits(
    model, prompt_ids, completion_ids, completion_mask, prompt_model=None, prompt_mask=None, on_shared=None
):
    """(g, T, vocab) logits predicting each of g completions (g, T) of one prompt (1, P), the prompt
    run once: the prompt's last logits predict the first completion token, and the completions
    run on the repeated cache at positions P, P+1, ... ``prompt_model`` runs the prompt (the model
    inside a DDP wrapper; default ``model``); ``prompt_mask`` (1, P) is a left-padded prompt's
    attention mask (None = all ones); ``on_shared``: see the module docstring."""
    torch = require("torch")
    g, T = completion_ids.shape
    P = prompt_ids.shape[1]
    prompt = run_prompt_once(
        model if prompt_model is None else prompt_model, prompt_ids, g, attention_mask=prompt_mask, on_shared=on_shared
    )
    last = prompt.logits[:, -1:, :]
    logits = last.expand(g, 1, -1)
    if on_shared is not None:
        on_shared([last], [logits])
    if T > 1:
        ones = (
            torch.ones(g, P, dtype=completion_mask.dtype, device=completion_mask.device)
            if prompt_mask is None
            else prompt_mask.to(completion_mask.dtype).expand(g, -1)
        )
        # the completions continue at P, P+1, ...: for an unpadded prompt (our loop) these are
        # tokens.position_ids of the full row; for TRL's left-padded prompt they are the
        # positions TRL's own forward uses (it passes no position ids, so the model counts from 0)
        positions = torch.arange(P, P + T - 1, device=completion_ids.device).expand(g, -1)
        rest = model(
            input_ids=completion_ids[:, :-1],
            attention_mask=torch.cat([ones, completion_mask[:, :-1]], dim=1),
            **{cache_argument(model) or "past_key_values": output_cache(prompt)},
            position_ids=positions,
            use_cache=True,
        )
        logits = torch.cat([logits, rest.logits], dim=1)
    return logits
