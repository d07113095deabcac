"""The packaged policy's converted folder (gcpo_analysis.packaged_policy): it loads exactly what
the GGUF file loads, it is keyed by content, and a broken or unwritable cache never passes for a
good one."""

import os
import warnings
from pathlib import Path

import pytest

from gcpo_analysis import packaged_policy as pp


def fake_convert(gguf_folder, gguf, out):
    """A stand-in for the GGUF read: two small files and the marker, as save_converted writes them."""
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"w" * 64)
    pp.write_marker(out, gguf_folder / gguf)


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
    with pytest.warns(UserWarning, match="is refused: .*removed and converted again on the next load"):
        assert pp.converted_or_fallback(folder, "m.gguf")[0] is None  # this load reads the GGUF file
    assert not made.exists()
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
    with pytest.warns(UserWarning, match="cannot write the cache .*GCPO_CACHE_DIR"):
        assert pp.packaged_policy_folder(folder, "m.gguf") is None
    assert calls == []


def test_the_default_root_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("GCPO_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pp.cache_root() == tmp_path / "gcpo"


def test_the_default_root_ignores_a_relative_xdg_cache_home(monkeypatch, tmp_path):
    """The XDG specification: a relative XDG_CACHE_HOME is invalid and ignored (not taken
    relative to whatever folder gcpo runs in)."""
    monkeypatch.delenv("GCPO_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert pp.cache_root() == tmp_path / ".cache" / "gcpo"


def _target(folder):
    return Path(pp.cache_root()) / "packaged" / pp.folder_name(folder / "m.gguf")


def test_a_planted_folder_whose_record_names_another_gguf_is_refused(gguf_file, tmp_path):
    """A folder under the cache name, complete and self-consistent, but converted from another file."""
    folder, calls = gguf_file
    other = tmp_path / "other.gguf"
    other.write_bytes(b"another model's bytes")
    target = _target(folder)
    target.mkdir(parents=True)
    (target / "config.json").write_text('{"num_hidden_layers": 2}')
    (target / "model.safetensors").write_bytes(b"r" * 64)
    pp.write_marker(target, other)
    with pytest.warns(UserWarning, match="record names another GGUF file.*reading the GGUF file"):
        converted, why = pp.converted_or_fallback(folder, "m.gguf")
    assert converted is None and "refused" in why
    assert calls == [] and not target.exists()  # not served; the next load converts afresh


@pytest.mark.parametrize("same_time", [False, True])
def test_files_altered_under_a_matching_record_are_refused(gguf_file, same_time):
    """The record is the genuine one; a file's bytes are replaced by others of the same size. A
    changed time makes the load recompute the SHA-256; an unchanged time is the fast path's trust
    (size and time match), so that case is served -- the documented limit of the fast path."""
    folder, calls = gguf_file
    made = pp.packaged_policy_folder(folder, "m.gguf")
    weights = made / "model.safetensors"
    before = weights.stat()
    weights.write_bytes(b"X" * before.st_size)
    if same_time:
        os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert pp.packaged_policy_folder(folder, "m.gguf") == made
        return
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    with pytest.warns(UserWarning, match="model.safetensors has another SHA-256"):
        converted, why = pp.converted_or_fallback(folder, "m.gguf")
    assert converted is None and "refused" in why and len(calls) == 1


def test_an_added_file_is_refused(gguf_file):
    folder, _ = gguf_file
    made = pp.packaged_policy_folder(folder, "m.gguf")
    (made / "tokenizer_config.json").write_text("{}")
    with pytest.warns(UserWarning, match="are not the recorded"):
        assert pp.packaged_policy_folder(folder, "m.gguf") is None


def test_a_load_rehashes_only_the_gguf_when_sizes_and_times_match(gguf_file, monkeypatch):
    folder, _ = gguf_file
    made = pp.packaged_policy_folder(folder, "m.gguf")
    hashed = []
    real = pp.file_sha256
    monkeypatch.setattr(pp, "file_sha256", lambda path: (hashed.append(Path(path).name), real(path))[1])
    assert pp.packaged_policy_folder(folder, "m.gguf") == made
    assert hashed == ["m.gguf"]


@pytest.mark.parametrize("entry", ["file", "symlink"])
def test_a_stale_non_folder_entry_at_the_cache_path_falls_back(gguf_file, tmp_path, entry):
    folder, calls = gguf_file
    target = _target(folder)
    target.parent.mkdir(parents=True)
    if entry == "file":
        target.write_text("stale")
    else:
        elsewhere = tmp_path / "elsewhere"
        fake_convert(folder, "m.gguf", elsewhere)
        target.symlink_to(elsewhere, target_is_directory=True)
    with pytest.warns(UserWarning, match="is not a folder .*reading the GGUF file"):
        converted, why = pp.converted_or_fallback(folder, "m.gguf")
    assert converted is None and "not a folder" in why and calls == []


@pytest.mark.parametrize("error", ["OSError", "SafetensorError"])
def test_a_failed_write_falls_back_with_a_warning(gguf_file, monkeypatch, error):
    """A full disk while the converted copy is written: the load reads the GGUF file, nothing is left."""
    folder, _ = gguf_file
    safetensors = pytest.importorskip("safetensors")
    raised = OSError(28, "No space left on device") if error == "OSError" else safetensors.SafetensorError("I/O error")

    def full_disk(f, g, out):
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"partial")
        raise raised

    monkeypatch.setattr(pp, "convert", full_disk)
    with pytest.warns(UserWarning, match=f"writing the converted copy .* failed \\({error}"):
        converted, why = pp.converted_or_fallback(folder, "m.gguf")
    assert converted is None and error in why
    assert not _target(folder).exists() and list(_target(folder).parent.iterdir()) == []


def test_load_policy_serves_the_gguf_not_a_planted_model_and_records_why(tmp_path, monkeypatch):
    """End to end with tiny models: the "GGUF read" yields a tiny llama; a planted 2-layer random
    model under the cache name is not served, and the returned model says it read the GGUF file."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from gcpo_analysis import models
    from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

    monkeypatch.setenv("GCPO_CACHE_DIR", str(tmp_path / "cache"))
    pkg = tmp_path / "pkg"
    tiny_causal_lm("llama", seed=0).save_pretrained(pkg)  # what "reading the GGUF file" gives
    tiny_tokenizer().save_pretrained(pkg)
    (pkg / "m.gguf").write_bytes(b"gguf bytes")
    monkeypatch.setattr(models, "packaged_policy_gguf", lambda: (pkg, "m.gguf"))
    monkeypatch.setattr(models, "require", lambda module, extra="models": __import__(module))
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        real = auto.from_pretrained.__func__
        monkeypatch.setattr(
            auto,
            "from_pretrained",
            classmethod(lambda cls, src, *a, _real=real, gguf_file=None, **kw: _real(cls, src, *a, **kw)),
        )
    target = _target(pkg)
    planted = tiny_causal_lm("llama", seed=1, num_hidden_layers=2)
    planted.save_pretrained(target)
    tiny_tokenizer().save_pretrained(target)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"another file")
    pp.write_marker(target, other)
    with pytest.warns(UserWarning, match="record names another GGUF file"):
        model, _ = models.load_policy("packaged")
    genuine = tiny_causal_lm("llama", seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), genuine.state_dict().values()))
    assert model.gcpo_policy_load["converted_copy"] is False
    assert "record names another GGUF file" in model.gcpo_policy_load["fallback"]


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
