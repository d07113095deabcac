"""``gcpo export CKPT OUT``: a checkpoint of ``gcpo train`` as a standalone Hugging Face model.

A LoRA checkpoint's ``adapter/`` names its base by an absolute path (for the packaged policy, a
GGUF file inside the venv), so ``AutoPeftModelForCausalLM`` fails anywhere else. The export
rebuilds the trained policy as ``gcpo eval`` does (``checkpoint.load_trained``: the base from the
run's config, ``trainable.pt`` read with ``torch.load(weights_only=True)``), merges the LoRA
adapters into the base weights (peft ``merge_and_unload``: W + (alpha/r) B A) and writes
safetensors weights, ``config.json``, ``generation_config.json`` and the tokenizer, plus
``gcpo_export.json`` (where the weights came from). A packaged GGUF base is written dequantised,
a ``tiny:`` base like any other; full fine-tuning checkpoints need no merge.

The folder is written beside OUT under a temporary name, reloaded from there with
``AutoModelForCausalLM.from_pretrained`` and its logits compared with the trained policy's on
fixed probe texts, and only then moved into place: a failed export leaves nothing at OUT. An
existing OUT is replaced only with ``overwrite`` and only when it is empty or an earlier export
(it holds ``gcpo_export.json``), so a mistyped OUT never deletes a user's folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from gcpo_analysis import __version__
from gcpo_analysis.models import require
from gcpo_analysis.outputs import TMP_SUFFIX
from gcpo_analysis.provenance import environment
from gcpo_train.config import DTYPES
from gcpo_train.model.policy import eos_ids_of
from gcpo_train.runfiles.checkpoint import load_trained, newest_usable, read_state

PROVENANCE = "gcpo_export.json"
# Short texts whose logits the export must reproduce; any tokenizer encodes them (unknown words
# become <unk> in the tiny one).
PROBES = ("Question: who is the king of the city? Answer:", "the ship was in the house .", "2 + 3 = 5")
FLOAT32_TOLERANCE = 1e-3  # max |logit difference| / max(1, max |logit|) a float32 export may show


def check_output(out, source, overwrite: bool) -> Path:
    """OUT as an absolute path, refused when it would destroy the checkpoint or a user's folder."""
    from gcpo_analysis.outputs import check_output as check_path

    out, source = Path(out).resolve(), Path(source).resolve()
    if out == source or out in source.parents:
        raise ValueError(f"output {out} holds the checkpoint {source}; choose another folder")
    check_path(out, [source], "output")  # not inside the checkpoint or a run's pruned checkpoints/
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):  # an empty folder: nothing to lose
        return out
    if not overwrite:
        raise ValueError(f"output {out} exists; pass --overwrite to replace an earlier export")
    if not out.is_dir() or (any(out.iterdir()) and not (out / PROVENANCE).exists()):
        raise ValueError(
            f"output {out} exists and is not a gcpo export (no {PROVENANCE}); "
            f"refusing to replace it, even with --overwrite"
        )
    foreign = foreign_files(out)
    if foreign:
        names = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ValueError(
            f"--overwrite: {out} holds files the earlier export did not write ({names}); "
            f"move them out of the folder first, nothing was deleted"
        )
    return out


def foreign_files(out: Path) -> list[str]:
    """The files of an earlier export ``out`` that its ``gcpo_export.json`` does not list as
    written by it (an export from before the list: everything but the provenance is listed as
    its own only when a model's config.json is there)."""
    if not (out / PROVENANCE).exists():
        return []
    try:
        written = json.loads((out / PROVENANCE).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        written = None
    present = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir())
    if written is None:  # an export written before the list existed: only its model files are known
        return [] if (out / "config.json").exists() else [n for n in present if n != PROVENANCE]
    own = set(written) | {PROVENANCE}
    return [n for n in present if n not in own]


def load_checkpoint_policy(path):
    """(model, tokenizer, config, state, checkpoint folder) of a checkpoint folder, or of a run
    folder's newest checkpoint that loads (an unreadable one is skipped with a warning)."""
    path = Path(path)

    def load(folder):
        return read_state(folder), load_trained(folder)  # state.json first: the cheap check

    if (path / "state.json").exists():
        loaded, found = load(path), path
    elif (path / "checkpoints").is_dir():
        loaded, found = newest_usable(path, load)
        if loaded is None:
            raise ValueError(f"run folder {path} has no complete checkpoint")
    else:
        raise ValueError(f"{path} is neither a checkpoint folder (no state.json) nor a run folder (no checkpoints/)")
    state, (model, tokenizer, cfg) = loaded
    return model, tokenizer, cfg, state, found


def merge_lora(model):
    """The plain transformers model: LoRA adapters merged into the base weights, or the model
    itself under full fine-tuning."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


def drop_gguf_quantizer(model):
    """A GGUF base (the packaged policy) is dequantised on load into plain float layers, but keeps
    transformers' GGUF quantizer attached, and ``save_pretrained`` refuses a quantized model.
    The quantizer is dropped once no packed GGUF layer and no integer weight is left."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return model
    packed = [n for n, m in model.named_modules() if "gguf" in type(m).__name__.lower()]
    packed += [n for n, p in model.named_parameters() if not p.is_floating_point()]
    if packed:
        raise ValueError(
            f"the base model still holds quantized weights (e.g. {packed[:3]}); they cannot be written as safetensors"
        )
    quantizer.remove_quantization_config(model)
    return model


def probe_logits(model, tokenizer) -> list:
    """float32 logits of each probe text alone (no padding, so nothing depends on masking)."""
    torch = require("torch")
    out = []
    with torch.no_grad():
        for text in PROBES:
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
            out.append(model(input_ids=ids.to(model.device)).logits.float().cpu())
    return out


def max_abs_difference(a: list, b: list) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def provenance(source: Path, state: dict, cfg, dtype: str, logit_diff) -> dict:
    """What ``gcpo_export.json`` records: the source checkpoint, its step and config hash, the
    base and LoRA settings, the gcpo and library versions, the verified logit difference."""
    torch, transformers = require("torch"), require("transformers")
    lora = (
        {"r": cfg.lora_r, "alpha": cfg.lora_alpha, "target_modules": cfg.lora_target_modules} if cfg.use_lora else None
    )
    return {
        "source_checkpoint": str(Path(source).resolve()),
        "step": state["step"],
        "config_hash": state["config_hash"],
        "base_model": cfg.model,
        "lora_merged": lora,
        "train_dtype": cfg.dtype,
        "dtype": dtype,
        "max_abs_logit_diff": logit_diff,
        "gcpo_version": __version__,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "environment": environment(),
    }


def write_model(model, tokenizer, folder: Path) -> None:
    """safetensors + config + generation config (the EOS ids training stopped at) + tokenizer.
    The config's source path is cleared so the folder names nothing outside itself."""
    model.config._name_or_path = ""
    model.generation_config.eos_token_id = eos_ids_of(tokenizer, model) or None
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def verify(folder: Path, expected: list, tokenizer, dtype: str, checked: bool) -> float:
    """Reload the written folder with ``from_pretrained`` (model and tokenizer) and return the
    max |logit difference| from ``expected``; over tolerance is an error when ``checked``."""
    torch, transformers = require("torch"), require("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    reloaded_tok = transformers.AutoTokenizer.from_pretrained(folder)
    if reloaded_tok(PROBES[0])["input_ids"] != tokenizer(PROBES[0])["input_ids"]:
        raise RuntimeError(f"the tokenizer written to {folder} encodes the probe differently")
    reloaded = probe_logits(model, reloaded_tok)
    if not all(bool(torch.isfinite(x).all()) for x in reloaded + expected):
        raise RuntimeError(
            "the exported model's or the trained policy's logits are NaN or infinite "
            "(non-finite weights?); nothing written"
        )
    diff = max_abs_difference(reloaded, expected)
    scale = max(1.0, max(float(x.abs().max()) for x in expected))
    if checked and diff > FLOAT32_TOLERANCE * scale:
        raise RuntimeError(
            f"the exported model's logits differ from the trained policy's by {diff:.3g} "
            f"(tolerance {FLOAT32_TOLERANCE * scale:.3g}); nothing written"
        )
    return diff


def export_checkpoint(
    checkpoint, output, *, dtype: str | None = None, overwrite: bool = False, check: bool = True
) -> dict:
    """Merge ``checkpoint`` (a checkpoint folder or a run folder) into a standalone model folder
    ``output``; returns the provenance record (written as ``output/gcpo_export.json``) with the
    folder's path, size in bytes and the seconds the export took.

    ``dtype``: float32, bfloat16 or float16 (default: the run's). ``check``: reload the folder
    and compare its logits with the trained policy's (a float32 run exported in float32 must
    agree to ``FLOAT32_TOLERANCE``; other dtypes record the difference only).
    """
    require("torch")  # a clear error before any work when torch is missing
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    out = check_output(output, checkpoint, overwrite)
    from gcpo_train.runfiles.run_folder import take_lock

    # one export into OUT at a time; the lock and owner files beside OUT are removed afterwards
    lock_path, owner = out.with_name(f".{out.name}.gcpo.lock"), out.with_name(f".{out.name}.gcpo.owner.json")
    lock = take_lock(lock_path, owner, f"export folder {out}")
    try:
        return _export(checkpoint, out, dtype, overwrite, check)
    finally:
        owner.unlink(missing_ok=True)
        lock.release()
        lock_path.unlink(missing_ok=True)


def _export(checkpoint, out: Path, dtype, overwrite: bool, check: bool) -> dict:
    torch = require("torch")
    out = check_output(out, checkpoint, overwrite)  # again, now that the lock is held
    t0 = time.perf_counter()
    model, tokenizer, cfg, state, source = load_checkpoint_policy(checkpoint)
    dtype = dtype or cfg.dtype
    expected = probe_logits(model, tokenizer) if check else None
    model = drop_gguf_quantizer(merge_lora(model)).to(getattr(torch, dtype))
    # a fresh folder of a random name beside OUT (never one that exists, nor a symlink there)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=TMP_SUFFIX))
    try:
        write_model(model, tokenizer, tmp)
        diff = (
            verify(tmp, expected, tokenizer, dtype, cfg.dtype == dtype == "float32") if expected is not None else None
        )
        record = provenance(source, state, cfg, dtype, diff)
        record["files"] = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if not p.is_dir())
        (tmp / PROVENANCE).write_text(json.dumps(record, indent=2) + "\n")
        _move_into_place(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return {**record, "output": str(out), "bytes": folder_bytes(out), "seconds": time.perf_counter() - t0}


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished folder to OUT; an earlier export there is removed only afterwards."""
    if not out.exists():
        os.replace(tmp, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old.", suffix=TMP_SUFFIX))
    os.replace(out, old / out.name)
    os.replace(tmp, out)
    shutil.rmtree(old)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
