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
- **Checked before use.** ``gcpo_packaged.json``, written last, records the GGUF file's SHA-256
  and each file's size, modification time and SHA-256. A load compares sizes and times (cheap) and
  recomputes a file's SHA-256 only where they changed. A folder whose record names another GGUF
  file, or whose files do not match their record, is refused with a warning: that load reads the
  GGUF file, the folder is removed, and the next load converts again. The fast path trusts a file
  whose size and time match; ``GCPO_CACHE_DIR=off`` reads the GGUF file every time.
- **No code in it.** Weights are safetensors (never a pickle); nothing in the folder runs.

The cache folder is ``$GCPO_CACHE_DIR`` (default ``$XDG_CACHE_HOME/gcpo``, else ``~/.cache/gcpo``;
a relative ``XDG_CACHE_HOME`` is ignored, as the XDG specification asks). ``GCPO_CACHE_DIR=off``
reads the GGUF file on every load. Whenever the converted folder is not used (cache off, refused,
a file in its place, a write that failed, e.g. a full disk), the load reads the GGUF file, a warning
says why (but for ``off``), and ``load_policy`` records it on the model (``gcpo_policy_load``),
which run cards and ``run.json`` copy.
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
    """The cache folder, or None when ``GCPO_CACHE_DIR=off``. A relative ``XDG_CACHE_HOME`` is
    ignored (the XDG Base Directory specification: such a value is invalid)."""
    env = os.environ.get("GCPO_CACHE_DIR", "").strip()
    if env.lower() == "off":
        return None
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "gcpo"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_name(gguf_path: Path, sha256: str | None = None) -> str:
    import transformers

    sha256 = sha256 or file_sha256(gguf_path)
    return f"{gguf_path.stem}-{sha256[:16]}-transformers-{transformers.__version__}"


def file_record(path: Path) -> dict:
    """What the marker records of one written file: size, modification time (ns), SHA-256."""
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": file_sha256(path)}


def mismatch(folder: Path, gguf_sha256: str | None = None) -> str | None:
    """Why ``folder`` is not the converted copy of the GGUF file whose SHA-256 is ``gguf_sha256``
    (None when it is): no readable marker, a marker naming another GGUF file, a file missing,
    added or different. A file's SHA-256 is recomputed only when its size or time changed."""
    try:
        record = json.loads((folder / MARKER).read_text())
        files = record["files"]
        if gguf_sha256 is not None and record.get("sha256") != gguf_sha256:
            return f"its record names another GGUF file (SHA-256 {str(record.get('sha256'))[:16]}...)"
        present = {p.name for p in folder.iterdir()} - {MARKER}
        if present != set(files):
            return f"its files {sorted(present)} are not the recorded {sorted(files)}"
        for name, want in files.items():
            path = folder / name
            if path.is_symlink() or not path.is_file():
                return f"{name} is not a plain file"
            stat = path.stat()
            if stat.st_size != want["size"]:
                return f"{name} has {stat.st_size} bytes, the record {want['size']}"
            if stat.st_mtime_ns != want["mtime_ns"] and file_sha256(path) != want["sha256"]:
                return f"{name} has another SHA-256 than the recorded {str(want['sha256'])[:16]}..."
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return f"its record {MARKER} is missing or unreadable ({type(err).__name__}: {err})"
    return None


def _intact(folder: Path, gguf_sha256: str | None = None) -> bool:
    return mismatch(folder, gguf_sha256) is None


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
    write_marker(out, source)


def write_marker(out: Path, source: Path) -> None:
    """The marker of the folder ``out`` converted from ``source``: written last, it lists every file."""
    from .frames import write_json

    files = {p.name: file_record(p) for p in sorted(out.iterdir()) if p.is_file() and p.name != MARKER}
    write_json(out / MARKER, {"source": str(source), "sha256": file_sha256(source), "files": files}, newline=True)


def _write_errors() -> tuple[type[BaseException], ...]:
    """What a failed write raises: OSError (a full disk, no permission) and safetensors' own error."""
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - safetensors comes with transformers
        return (OSError,)
    return (OSError, SafetensorError)


def converted_or_fallback(gguf_folder: Path, gguf: str) -> tuple[Path | None, str | None]:
    """(the converted folder of ``gguf_folder/gguf``, made now if missing, None) or, when it is not
    used, (None, why): the caller reads the GGUF file. Every reason but the cache being off comes
    with a warning."""
    root = cache_root()
    if root is None:
        return None, "GCPO_CACHE_DIR=off"
    gguf_sha256 = file_sha256(gguf_folder / gguf)
    target = root / "packaged" / folder_name(gguf_folder / gguf, gguf_sha256)

    def fallback(why: str) -> tuple[None, str]:
        warnings.warn(f"the packaged policy's converted copy is not used: {why}; reading the GGUF file", stacklevel=4)
        return None, why

    if target.is_symlink() or (target.exists() and not target.is_dir()):
        return fallback(f"{target} is not a folder (remove it to let gcpo convert again)")
    if target.is_dir():
        why = mismatch(target, gguf_sha256)
        if why is None:
            return target, None
        shutil.rmtree(target, ignore_errors=True)  # the next load converts again
        return fallback(f"{target} is refused: {why}; it is removed and converted again on the next load")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    except OSError as err:
        return fallback(f"cannot write the cache under {root} ({err}); set GCPO_CACHE_DIR to a writable folder")
    try:
        try:
            convert(gguf_folder, gguf, scratch / "model")
        except _write_errors() as err:
            return fallback(f"writing the converted copy under {root} failed ({type(err).__name__}: {err})")
        try:
            (scratch / "model").rename(target)
        except OSError:  # another process put its folder there first
            why = mismatch(target, gguf_sha256)
            if why is not None:
                return fallback(f"{target} appeared during the conversion and is refused: {why}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target, None


def packaged_policy_folder(gguf_folder: Path, gguf: str) -> Path | None:
    """The converted folder of ``gguf_folder/gguf``, or None when it is not used
    (``converted_or_fallback`` says why)."""
    return converted_or_fallback(gguf_folder, gguf)[0]
