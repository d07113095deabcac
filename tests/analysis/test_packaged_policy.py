"""The packaged policy's converted folder (gcpo_analysis.packaged_policy): it loads exactly what
the GGUF file loads, it is keyed by content, and a broken or unwritable cache never passes for a
good one."""

import json
import warnings
from pathlib import Path

import pytest

from gcpo_analysis import packaged_policy as pp


def fake_convert(gguf_folder, gguf, out):
    """A stand-in for the GGUF read: two small files and the marker, as save_converted writes them."""
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"w" * 64)
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
    (out / pp.MARKER).write_text(json.dumps({"files": files}))


@pytest.fixture
def gguf_file(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setenv("GCPO_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "m.gguf").write_bytes(b"gguf bytes")
    calls = []
    monkeypatch.setattr(pp, "convert", lambda f, g, out: (calls.append(out), fake_convert(f, g, out)))
    return folder, calls


def test_the_folder_is_made_once_and_reused(gguf_file):
    folder, calls = gguf_file
    first = pp.packaged_policy_folder(folder, "m.gguf")
    assert first is not None and (first / pp.MARKER).exists() and len(calls) == 1
    assert pp.packaged_policy_folder(folder, "m.gguf") == first and len(calls) == 1
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".converting-")]  # scratch removed


def test_another_file_content_gets_another_folder(gguf_file):
    folder, calls = gguf_file
    first = pp.packaged_policy_folder(folder, "m.gguf")
    (folder / "m.gguf").write_bytes(b"other gguf bytes")
    second = pp.packaged_policy_folder(folder, "m.gguf")
    assert second != first and len(calls) == 2


@pytest.mark.parametrize("damage", ["truncated weights", "no marker", "marker not json"])
def test_a_damaged_folder_is_set_aside_with_a_warning_and_converted_again(gguf_file, damage):
    folder, calls = gguf_file
    made = pp.packaged_policy_folder(folder, "m.gguf")
    if damage == "truncated weights":
        (made / "model.safetensors").write_bytes(b"w")
    elif damage == "no marker":
        (made / pp.MARKER).unlink()
    else:
        (made / pp.MARKER).write_text("{not json")
    with pytest.warns(UserWarning, match="incomplete: it is set aside and converted again"):
        again = pp.packaged_policy_folder(folder, "m.gguf")
    assert again == made and len(calls) == 2 and pp._intact(again)


def test_a_folder_that_another_process_renamed_first_is_used(gguf_file, monkeypatch):
    folder, calls = gguf_file
    target = Path(pp.cache_root()) / "packaged" / pp.folder_name(folder / "m.gguf")

    def racing_convert(f, g, out):  # the other process finishes while this one converts
        fake_convert(f, g, target)
        fake_convert(f, g, out)

    monkeypatch.setattr(pp, "convert", racing_convert)
    assert pp.packaged_policy_folder(folder, "m.gguf") == target and pp._intact(target)


def test_off_reads_the_gguf_and_an_unwritable_cache_says_so(gguf_file, monkeypatch, tmp_path):
    folder, calls = gguf_file
    monkeypatch.setenv("GCPO_CACHE_DIR", "off")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pp.packaged_policy_folder(folder, "m.gguf") is None
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("GCPO_CACHE_DIR", str(blocker / "cache"))  # under a file: cannot be made
    with pytest.warns(UserWarning, match="cannot write the packaged policy's cache .*GCPO_CACHE_DIR"):
        assert pp.packaged_policy_folder(folder, "m.gguf") is None
    assert calls == []


def test_the_default_root_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("GCPO_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pp.cache_root() == tmp_path / "gcpo"


@pytest.mark.slow
def test_the_converted_folder_loads_what_the_gguf_file_loads(tmp_path):
    """Weights bit for bit, the same logits, config (but the GGUF quantisation entry), tokenizer
    ids, decoding, special tokens and chat template. One GGUF read (about 20 s on 2 cores)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from gcpo_analysis.models import packaged_policy_gguf

    try:
        folder, gguf = packaged_policy_gguf()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    ref_tok = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf, dtype=torch.float32)
    x = torch.tensor([ref_tok("Where did the story's hero go?")["input_ids"]])
    with torch.no_grad():
        ref_logits = ref(x).logits
    ref_state = {k: v.clone() for k, v in ref.state_dict().items()}
    dropped = ("quantization_config", "_name_or_path", "architectures")
    ref_config = {k: v for k, v in ref.config.to_dict().items() if k not in dropped}
    pp.save_converted(ref, ref_tok, tmp_path / "m", source=folder / gguf)
    assert pp._intact(tmp_path / "m")

    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "m"))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"), dtype=torch.float32)
    state = model.state_dict()
    assert state.keys() == ref_state.keys()
    assert all(torch.equal(state[k], ref_state[k]) for k in state)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # still tied
    config = {k: v for k, v in model.config.to_dict().items() if k not in ("_name_or_path", "architectures")}
    assert config == ref_config
    with torch.no_grad():
        assert torch.equal(model(x).logits, ref_logits)
    texts = ["Hello world!", "  a\n\nb — ünïcödé 12345 <|im_end|>", "", "x" * 300, "def f(x):\n\treturn x**2"]
    for text in texts:
        assert tok(text)["input_ids"] == ref_tok(text)["input_ids"], text
        ids = ref_tok(text)["input_ids"]
        assert tok.decode(ids, skip_special_tokens=True) == ref_tok.decode(ids, skip_special_tokens=True)
    assert tok.get_vocab() == ref_tok.get_vocab() and tok.all_special_tokens == ref_tok.all_special_tokens
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == ref_tok.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    )

    # and the same gradients, bit for bit, once both copies own aligned memory: the converted
    # weights are memory-mapped at unaligned offsets, where MKL's float32 path differs in the
    # 7th digit (models.own_parameter_memory, called by load_policy)
    from gcpo_analysis.gradvar import group_gradient_gram
    from gcpo_analysis.models import own_parameter_memory

    own_parameter_memory(ref)
    own_parameter_memory(model)
    continuations = torch.tensor([[11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34]])
    ids = torch.cat([x.expand(3, -1), continuations], 1)
    scored = torch.zeros_like(ids)
    scored[:, x.shape[1] :] = 1
    K_ref = group_gradient_gram(ref, ids, torch.ones_like(ids), scored)
    K = group_gradient_gram(model, ids, torch.ones_like(ids), scored)
    assert (K == K_ref).all()
