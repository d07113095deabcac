"""The packaged policy as an ordinary model folder, converted once from its GGUF file.

transformers reads a GGUF file with the pure-Python ``gguf`` reader: the tokenizer's 49,152-entry
vocabulary and merges are parsed field by field, once for the tokenizer and twice for the model.
That is 20–60 s of every load of SmolLM2-135M-Instruct on 2 cores, for a forward pass that takes
milliseconds. So the first load converts the file once, exactly as
``from_pretrained(gguf_file=...)`` reads it (the dequantised float32 weights, the config, the
tokenizer with its chat template), and saves that as a model folder (``model.safetensors``,
``config.json``, ``tokenizer.json``) under the cache folder; every later load reads the folder
in about a second.

- **Keyed by content.** The folder's name holds the GGUF file's SHA-256 and the transformers
  version that converted it; another file or another converter gets another folder.
- **Never half-written.** The folder is written under a temporary name and renamed into place;
  a killed conversion leaves no folder that a later load would trust. Two processes converting
  at once each write their own, and the second rename finds the first in place.
- **Checked before use.** ``gcpo_packaged.json``, written last, records each file's size; a
  folder whose files do not match is set aside with a warning and converted again.
- **No code in it.** Weights are safetensors (never a pickle); nothing in the folder runs.

The cache folder is ``$GCPO_CACHE_DIR`` (default ``$XDG_CACHE_HOME/gcpo``, else ``~/.cache/gcpo``).
``GCPO_CACHE_DIR=off`` reads the GGUF file on every load, as before. If the cache folder cannot
be written, the load reads the GGUF file and says so in a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

MARKER = "gcpo_packaged.json"


def cache_root() -> Path | None:
    """The cache folder, or None when ``GCPO_CACHE_DIR=off``."""
    env = os.environ.get("GCPO_CACHE_DIR", "").strip()
    if env.lower() == "off":
        return None
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gcpo"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_name(gguf_path: Path) -> str:
    import transformers

    return f"{gguf_path.stem}-{file_sha256(gguf_path)[:16]}-transformers-{transformers.__version__}"


def _intact(folder: Path) -> bool:
    """The folder's marker exists and every file it lists has the recorded size."""
    try:
        record = json.loads((folder / MARKER).read_text())
        return all((folder / name).stat().st_size == size for name, size in record["files"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def convert(gguf_folder: Path, gguf: str, out: Path) -> None:
    """Read the GGUF file as ``from_pretrained(gguf_file=...)`` does (float32) and save it as a
    model folder at ``out`` (which must not exist)."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_folder), gguf_file=gguf)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf_folder), gguf_file=gguf, dtype=torch.float32)
    save_converted(model, tokenizer, out, source=gguf_folder / gguf)


def save_converted(model, tokenizer, out: Path, source: Path) -> None:
    """``model`` and ``tokenizer`` (read from the GGUF file ``source``) as a model folder at
    ``out``, with the marker written last."""
    out.mkdir(parents=True)
    # save_pretrained refuses a model loaded from GGUF while transformers' GGUF quantizer is attached,
    # though its weights are plain float32 tensors by now (the same step as gcpo export's)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    record = {"source": str(source), "sha256": file_sha256(source), "files": files}
    from .frames import write_json

    write_json(out / MARKER, record, newline=True)


def packaged_policy_folder(gguf_folder: Path, gguf: str) -> Path | None:
    """The converted folder of ``gguf_folder/gguf`` (made now if missing), or None when the cache
    is off or cannot be written (the caller then reads the GGUF file; a warning says why)."""
    root = cache_root()
    if root is None:
        return None
    target = root / "packaged" / folder_name(gguf_folder / gguf)
    if target.is_dir():
        if _intact(target):
            return target
        warnings.warn(
            f"the converted packaged policy {target} is incomplete: it is set aside and converted again", stacklevel=3
        )
        shutil.rmtree(target, ignore_errors=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    except OSError as err:
        warnings.warn(
            f"cannot write the packaged policy's cache under {root} ({err}): reading the GGUF file on every load "
            "(set GCPO_CACHE_DIR to a writable folder)",
            stacklevel=3,
        )
        return None
    try:
        convert(gguf_folder, gguf, scratch / "model")
        try:
            (scratch / "model").rename(target)
        except OSError:  # another process put its folder there first
            if not _intact(target):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target
