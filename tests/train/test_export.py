"""``gcpo export``: a trained tiny policy, merged and written as a standalone model folder, gives
the trained policy's logits when loaded with from_pretrained alone."""

import json
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("accelerate")

import transformers  # noqa: E402
from helpers.loop_setup import Exploit, make  # noqa: E402

from gcpo_analysis.cli import main  # noqa: E402
from gcpo_train.runfiles.checkpoint import UnreadableCheckpoint, load_trained  # noqa: E402
from gcpo_train.runfiles.export import PROVENANCE, export_checkpoint  # noqa: E402

TOL = 1e-5


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    make(root, "run", steps=2, checkpoint_every=1).train()
    return root / "run"


def _ids(vocab, n=3, T=10):
    return torch.randint(4, vocab, (n, T), generator=torch.Generator().manual_seed(1))


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def _absolute_paths(folder):
    """String values that are absolute paths in the folder's config files."""
    found = []

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, str) and len(v) > 1 and os.path.isabs(v):
            found.append(v)

    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        walk(json.loads((folder / name).read_text()))
    return found


def test_the_merged_export_gives_the_trained_lora_policy_with_the_run_gone(lora_run, tmp_path, monkeypatch):
    ckpt = lora_run / "checkpoints" / "step_000002"
    policy, tok, _ = load_trained(ckpt)
    ids = _ids(len(tok))
    want = _logits(policy, ids)
    with policy.disable_adapter():
        base = _logits(policy, ids)
    assert (want - base).abs().max() > 1e-3  # training moved the adapters: an unmerged export fails here
    record = export_checkpoint(lora_run, tmp_path / "out")
    out = tmp_path / "out"
    assert record["step"] == 2 and record["max_abs_logit_diff"] <= TOL
    assert record["config_hash"] == json.loads((ckpt / "state.json").read_text())["config_hash"]
    assert json.loads((out / PROVENANCE).read_text())["source_checkpoint"] == str(ckpt.resolve())
    assert (out / "model.safetensors").exists() and not list(out.glob("adapter*")) and not list(out.glob("*.pt"))
    assert _absolute_paths(out) == []

    # nothing outside the folder is needed: the run is moved away, gcpo's model builders refuse
    def refuse(*a, **k):
        raise AssertionError("the export must load without gcpo's base model")

    monkeypatch.setattr("gcpo_analysis.tiny_models.tiny_causal_lm", refuse)
    monkeypatch.setattr("gcpo_analysis.models.load_policy", refuse)
    moved = lora_run.with_name("run-moved")
    os.replace(lora_run, moved)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
        reloaded = transformers.AutoTokenizer.from_pretrained(out)
    finally:
        os.replace(moved, lora_run)
    assert (_logits(model, ids) - want).abs().max() <= TOL
    assert reloaded("who is the king ?")["input_ids"] == tok("who is the king ?")["input_ids"]
    assert model.generation_config.eos_token_id == [tok.eos_token_id]


def test_a_full_finetune_with_tied_embeddings_exports_as_is(tmp_path):
    make(tmp_path, "full", steps=1, checkpoint_every=1, use_lora=False, model="tiny:llama-tied").train()
    ckpt = tmp_path / "full" / "checkpoints" / "step_000001"
    policy, tok, _ = load_trained(ckpt)
    record = export_checkpoint(ckpt, tmp_path / "out")
    assert record["lora_merged"] is None and record["max_abs_logit_diff"] <= TOL
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    ids = _ids(len(tok))
    assert (_logits(model, ids) - _logits(policy, ids)).abs().max() <= TOL


def test_a_crafted_trainable_pt_is_refused_and_a_run_folder_falls_back(tmp_path):
    make(tmp_path, "run", steps=2, checkpoint_every=1).train()
    run = tmp_path / "run"
    marker = tmp_path / "code-ran"
    bad = run / "checkpoints" / "step_000002" / "trainable.pt"
    torch.save({"weight": Exploit(marker)}, bad)
    with pytest.raises(UnreadableCheckpoint, match="trainable.pt.*other than tensors"):
        export_checkpoint(bad.parent, tmp_path / "out")
    assert not marker.exists() and not (tmp_path / "out").exists()
    with pytest.warns(UserWarning, match="skipping checkpoint step_000002"):
        record = export_checkpoint(run, tmp_path / "out")
    assert record["step"] == 1 and not marker.exists()


def test_out_is_never_overwritten_unless_asked_and_never_a_users_folder(lora_run, tmp_path):
    ckpt = lora_run / "checkpoints" / "step_000001"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="exists; pass --overwrite"):
        export_checkpoint(ckpt, mine)
    with pytest.raises(ValueError, match="not a gcpo export"):
        export_checkpoint(ckpt, mine, overwrite=True)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    for inside in (lora_run, lora_run.parent, ckpt):
        with pytest.raises(ValueError, match="holds the checkpoint"):
            export_checkpoint(ckpt, inside, overwrite=True)

    out = tmp_path / "out"
    export_checkpoint(ckpt, out)
    with pytest.raises(ValueError, match="exists; pass --overwrite"):
        export_checkpoint(lora_run, out)
    assert json.loads((out / PROVENANCE).read_text())["step"] == 1
    assert export_checkpoint(lora_run, out, overwrite=True)["step"] == 2
    assert json.loads((out / PROVENANCE).read_text())["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "out"]  # no temporary folder left


def test_cli_exports_in_another_dtype_and_refuses_an_existing_out(lora_run, tmp_path, capsys):
    out = tmp_path / "bf16"
    assert main(["export", str(lora_run), str(out), "--dtype", "bfloat16"]) == 0
    assert "max |logit difference|" in capsys.readouterr().out
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert model.dtype == torch.bfloat16 and json.loads((out / PROVENANCE).read_text())["dtype"] == "bfloat16"
    assert main(["export", str(lora_run), str(out), "--no_check"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["export", str(lora_run), str(out), "--no-check", "--overwrite"]) == 0
    assert not [w for w in caught if "skipping checkpoint" in str(w.message)]
    assert json.loads((out / PROVENANCE).read_text())["max_abs_logit_diff"] is None
    assert main(["export", str(tmp_path / "nothing"), str(tmp_path / "o2")]) == 2
    assert "neither a checkpoint folder" in capsys.readouterr().err


def test_cli_overwrite_keeps_a_file_the_user_added_to_an_export(lora_run, tmp_path, capsys):
    """`export OUT --overwrite` replaced the whole folder, files the user added included;
    now gcpo_export.json lists the files the export wrote and any other is a refusal."""
    out = tmp_path / "model"
    assert main(["export", str(lora_run), str(out), "--no-check"]) == 0
    written = json.loads((out / PROVENANCE).read_text())["files"]
    assert "config.json" in written and PROVENANCE not in written
    (out / "README_mine.md").write_text("my model card")
    capsys.readouterr()
    assert main(["export", str(lora_run), str(out), "--no-check", "--overwrite"]) == 2
    assert "README_mine.md" in capsys.readouterr().err
    assert (out / "README_mine.md").read_text() == "my model card"
    (out / "README_mine.md").unlink()
    assert main(["export", str(lora_run), str(out), "--no-check", "--overwrite"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary folder left


def test_an_empty_folder_is_exported_into(lora_run, tmp_path, capsys):
    """export CKPT EMPTY_FOLDER was refused ("exists; pass --overwrite"), though there was nothing
    to replace (round four, still failing in round five); a folder with a file is still refused."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", str(lora_run), str(empty), "--no-check"]) == 0
    assert json.loads((empty / PROVENANCE).read_text())["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # no temporary folder left
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("keep me")
    assert main(["export", str(lora_run), str(full), "--no-check"]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err and (full / "notes.txt").read_text() == "keep me"
