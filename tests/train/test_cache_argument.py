"""transformers 5.24 renamed the models' ``past_key_values`` argument (and output field) to
``cache``. The shared-prompt paths read the name from the model's forward signature,
so they run under either; a model that takes no cache falls back to full rows with a warning
and a record, never silently. The CI's second leg runs the whole fast suite on the newest
transformers; these tests cover the other name under whichever version is installed."""

import inspect
import logging
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gcpo_analysis.prompt_cache import cache_argument, output_cache, shared_prompt_logits  # noqa: E402
from gcpo_analysis.tiny_models import tiny_causal_lm  # noqa: E402


class Renamed(torch.nn.Module):
    """A model whose forward takes the cache under the other name than the installed
    transformers' (``cache`` <-> ``past_key_values``) and returns it under that name."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.theirs = cache_argument(inner)
        self.ours = "past_key_values" if self.theirs == "cache" else "cache"

        def forward(input_ids, attention_mask=None, position_ids=None, use_cache=None, logits_to_keep=0, **kw):
            if self.ours in kw:
                kw[self.theirs] = kw.pop(self.ours)
            out = self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=use_cache,
                logits_to_keep=logits_to_keep,
                **kw,
            )
            return types.SimpleNamespace(logits=out.logits, **{self.ours: output_cache(out)})

        params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in (self.ours,)]
        sig = inspect.signature(forward)
        forward.__signature__ = sig.replace(parameters=[*sig.parameters.values()][:-1] + params)
        self.forward = forward


def test_the_installed_transformers_names_its_cache_argument():
    assert cache_argument(tiny_causal_lm("llama", vocab_size=40)) in ("cache", "past_key_values")


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_shared_prompt_logits_under_the_other_cache_name(family):
    inner = tiny_causal_lm(family, vocab_size=40, seed=1)
    model = Renamed(inner)
    assert cache_argument(model) == model.ours != cache_argument(inner)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(4, 40, (1, 6), generator=gen)
    completions = torch.randint(4, 40, (3, 5), generator=gen)
    mask = torch.ones_like(completions)
    shared = shared_prompt_logits(model, prompt, completions, mask)
    full = inner(input_ids=torch.cat([prompt.expand(3, -1), completions], 1)).logits[:, 5:-1]
    assert torch.allclose(shared, full, atol=1e-5)


def test_a_model_without_a_cache_argument_is_said_not_silent(caplog):
    from gcpo_train.trl import shared_prompt as sp

    class NoCache(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return input_ids

    assert cache_argument(NoCache()) is None
    trainer = types.SimpleNamespace(
        args=types.SimpleNamespace(share_prompt=True),
        model=NoCache(),
        accelerator=types.SimpleNamespace(state=None),
    )
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    reason = sp.static_fallback(trainer, GRPOTrainer)
    assert reason is not None and "takes no key/value cache" in reason

    noter = types.SimpleNamespace(model=NoCache(), _metrics={"train": {"gcpo/shared_prompt": []}})
    noter.model.train()
    with caplog.at_level(logging.INFO, logger="gcpo_train.trl.shared_prompt"):
        sp.SharedPromptMixin._gcpo_note_fallback(noter, reason)
        sp.SharedPromptMixin._gcpo_note_fallback(noter, reason)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "runs G times" in warned[0].getMessage()  # a warning, once
    assert noter._metrics["train"]["gcpo/shared_prompt"] == [0.0, 0.0]  # and recorded per call
