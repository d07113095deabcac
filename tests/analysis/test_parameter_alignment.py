"""``models.own_parameter_memory``: weights read from a memory-mapped file start at arbitrary
offsets, and MKL/oneDNN then take another float32 code path (a study's V moved by 2e-7). After
``load_policy`` every parameter starts on a 64-byte boundary, with its values and ties kept."""

import pytest

from gcpo_analysis import models

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def misalign(param):
    """Put ``param``'s values at a 4-byte offset inside a larger buffer."""
    buffer = torch.empty(param.numel() + 1, dtype=param.dtype)
    view = buffer[1:].view_as(param.data)
    view.copy_(param.data)
    param.data = view
    assert param.data_ptr() % models.ALIGNMENT_BYTES


def test_misaligned_parameters_are_copied_with_values_and_ties_kept():
    from gcpo_analysis.tiny_models import tiny_causal_lm

    model = tiny_causal_lm("llama-tied")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    misalign(model.model.embed_tokens.weight)  # the tied weight: one parameter, two modules
    misalign(model.model.layers[0].mlp.up_proj.weight)
    assert models.own_parameter_memory(model) == 2
    assert all(p.data_ptr() % models.ALIGNMENT_BYTES == 0 for p in model.parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight
    after = model.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert models.own_parameter_memory(model) == 0  # nothing left to move


def test_load_policy_returns_aligned_weights_from_a_safetensors_folder(tmp_path):
    from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

    tiny_causal_lm("llama-tied").save_pretrained(tmp_path)  # safetensors, memory-mapped on load
    tiny_tokenizer().save_pretrained(tmp_path)
    model, _ = models.load_policy(str(tmp_path))
    assert all(p.data_ptr() % models.ALIGNMENT_BYTES == 0 for p in model.parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight
