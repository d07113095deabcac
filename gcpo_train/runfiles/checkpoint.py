"""Atomic checkpoints: trainable weights, optimizer, scheduler, RNG states, data position, config.

Layout: ``output_dir/checkpoints/step_000100/`` with ``trainable.pt`` (the parameters that
require grad: LoRA adapters, or all weights under full fine-tuning), ``optimizer.pt``,
``scheduler.pt``, ``rng.pt`` (the torch RNG state, a tensor), ``rng.json`` (Python's and
numpy's RNG states), ``state.json`` (step, data position, config hash) and ``config.json``;
LoRA runs also get ``adapter/`` (peft ``save_pretrained``)
for use outside gcpo. Written into a temporary folder, then ``os.replace``d into place, so a
run killed mid-write never leaves a half checkpoint behind.

Checkpoints are untrusted input (users resume folders they downloaded): every ``.pt`` is read
with ``torch.load(weights_only=True)``, which unpickles tensors and plain containers only, and
the RNG states that are not tensors are JSON. A file that fails the safe load is refused with
its path named; ``load_latest_usable`` falls back to the newest checkpoint that loads.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from gcpo_analysis.models import require
from gcpo_analysis.outputs import TMP_SUFFIX, is_temporary
from gcpo_train.config import TrainConfig

T = TypeVar("T")


def checkpoint_dir(output_dir, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f"step_{step:06d}"


class UnreadableCheckpoint(ValueError):
    """A checkpoint file that is truncated, corrupt or not a safe (weights-only) pickle."""


def _ascii_digits(text: str) -> bool:
    """Digits 0-9 only: str.isdigit alone takes superscripts ('step_²'), which int() refuses."""
    return text.isascii() and text.isdigit()


def complete_checkpoints(output_dir) -> list[Path]:
    """Checkpoint folders that finished writing (state.json present), newest first."""
    root = Path(output_dir) / "checkpoints"
    if not root.exists():
        return []
    done = [p for p in root.glob("step_*") if p.is_dir() and (p / "state.json").exists() and _ascii_digits(p.name[5:])]
    return sorted(done, key=lambda p: int(p.name[5:]), reverse=True)


def latest_checkpoint(output_dir) -> Path | None:
    """The checkpoint folder with the highest step, or None (temporary folders are ignored)."""
    done = complete_checkpoints(output_dir)
    return done[0] if done else None


def prune_checkpoints(output_dir, keep: int | None) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints (None or 0 keeps all); returns
    the deleted folders. Only ``step_*`` folders under ``output_dir/checkpoints`` are touched."""
    if not keep:
        return []
    old = complete_checkpoints(output_dir)[keep:]
    for path in old:
        shutil.rmtree(path)
    return old


def load_latest_usable(output_dir, **objects) -> tuple[dict, Path] | tuple[None, None]:
    """Restore the newest checkpoint that loads (``load_checkpoint``); an unreadable one is
    skipped with a warning naming the bad file. (None, None) when there is no checkpoint;
    ``UnreadableCheckpoint`` naming every bad file when none is usable. A checkpoint of another
    configuration is an error, not a fallback."""
    return newest_usable(output_dir, lambda path: load_checkpoint(path, **objects))


def newest_usable(output_dir, load: Callable[[Path], T]) -> tuple[T, Path] | tuple[None, None]:
    """``(load(path), path)`` for the newest complete checkpoint that ``load`` reads without
    ``UnreadableCheckpoint``; the fallback rule of ``load_latest_usable`` for any reader."""
    bad = []
    for path in complete_checkpoints(output_dir):
        try:
            return load(path), path
        except UnreadableCheckpoint as err:
            warnings.warn(f"skipping checkpoint {path.name}: {err}; trying the previous one", stacklevel=2)
            bad.append(str(err))
    if bad:
        raise UnreadableCheckpoint(f"no usable checkpoint in {Path(output_dir) / 'checkpoints'}: " + "; ".join(bad))
    return None, None


def trainable_state(model) -> dict:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def nonfinite_tensors(tensors: dict) -> list[str]:
    """Names of the tensors holding a NaN or an infinity (floating point only)."""
    torch = require("torch")
    return [n for n, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]


class DivergedRun(ValueError):
    """The trainable weights stopped being finite (a diverged step)."""


def check_finite_weights(model, step: int) -> None:
    """Stop the run at the step whose update made a trainable weight NaN or infinite, before
    anything of that step is logged or saved (the newest checkpoint stays the last finite one)."""
    bad = nonfinite_tensors({n: p.detach() for n, p in model.named_parameters() if p.requires_grad})
    if bad:
        raise DivergedRun(
            f"step {step}: the update made {len(bad)} trainable tensor(s) NaN or infinite "
            f"(e.g. {bad[0]}); the run diverged and was stopped, nothing of step {step} was "
            f"saved (lower learning_rate, or check the rewards)"
        )


def save_checkpoint(
    output_dir, step: int, *, model, optimizer, scheduler, config: TrainConfig, data_position: int
) -> Path:
    """Write checkpoint ``step`` atomically (tmp folder + ``os.replace``); returns its path.
    Non-finite weights are refused (``DivergedRun``); a failed write (a full disk) removes the
    temporary folder and raises OSError naming the checkpoint."""
    final = checkpoint_dir(output_dir, step)
    weights = trainable_state(model)
    bad = nonfinite_tensors(weights)
    if bad:
        raise DivergedRun(
            f"step {step}: {len(bad)} trainable tensor(s) are NaN or infinite (e.g. {bad[0]}); checkpoint not saved"
        )
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.iterdir():  # left by a killed run (this run holds the folder's lock)
        if is_temporary(stale.name) and stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
    # a fresh folder of a random name (never one that exists, nor a symlink left there)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=TMP_SUFFIX))
    try:
        _write_checkpoint(
            tmp,
            weights,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            config=config,
            step=step,
            data_position=data_position,
        )
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(
            err.errno,
            f"checkpoint {final.name} not written ({err.strerror or err}); the newest complete checkpoint is unchanged",
            str(tmp),
        ) from None
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def _write_checkpoint(tmp: Path, weights: dict, *, model, optimizer, scheduler, config, step, data_position) -> None:
    torch = require("torch")
    torch.save(weights, tmp / "trainable.pt")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save({"torch": torch.get_rng_state()}, tmp / "rng.pt")
    (tmp / "rng.json").write_text(json.dumps(rng_states_to_json()))
    if config.use_lora and hasattr(model, "save_pretrained"):
        model.save_pretrained(tmp / "adapter")
    (tmp / "config.json").write_text(json.dumps(config.to_dict(), indent=2, default=str))
    (tmp / "state.json").write_text(
        json.dumps({"step": step, "data_position": data_position, "config_hash": config.config_hash()}, indent=2)
    )


def check_compatible(path: Path, config: TrainConfig) -> dict:
    """Refuse a checkpoint written under another configuration, naming the differing keys."""
    state = read_state(path)
    if state["config_hash"] == config.config_hash():
        return state
    saved = _read_json(Path(path) / "config.json", ())
    mine = config.identity()
    keys = sorted(
        k
        for k in set(saved) | set(mine)
        if k in mine and json.dumps(saved.get(k), default=str) != json.dumps(mine.get(k), default=str)
    )
    diffs = ", ".join(f"{k}: checkpoint={saved.get(k)!r} vs now={mine.get(k)!r}" for k in keys)
    raise ValueError(
        f"checkpoint {path} was written with another configuration; differing keys: "
        f"{diffs or '(hash differs, no key differs: gcpo version change?)'}"
    )


def read_state(path) -> dict:
    """``state.json`` of a checkpoint folder: step, data position, config hash."""
    return _read_json(Path(path) / "state.json", ("step", "data_position", "config_hash"))


def _read_json(path: Path, keys) -> dict:
    try:
        obj = json.loads(path.read_text())
        missing = [k for k in keys if k not in obj]
    except (OSError, ValueError, TypeError) as err:
        raise UnreadableCheckpoint(f"{path} is unreadable ({type(err).__name__}: {err})") from None
    if missing:
        raise UnreadableCheckpoint(f"{path} lacks {missing}")
    return obj


def load_trainable(model, path: Path) -> None:
    """Copy ``trainable.pt`` into the model's trainable parameters. The names must match exactly:
    an empty or partial file (which would silently keep some freshly initialised adapters) and
    non-finite values are refused as ``UnreadableCheckpoint``, so resume falls back to an older one."""
    torch = require("torch")
    file = Path(path) / "trainable.pt"
    saved = safe_load(file)
    params = dict(model.named_parameters())
    if not isinstance(saved, dict) or not all(torch.is_tensor(v) for v in saved.values()):
        raise UnreadableCheckpoint(f"{file} is not a mapping of parameter names to tensors")
    missing = [n for n in saved if n not in params]
    if missing:
        raise ValueError(f"checkpoint {path} has parameters the model lacks, e.g. {missing[:3]}")
    absent = [n for n, p in params.items() if p.requires_grad and n not in saved]
    if absent:
        raise UnreadableCheckpoint(
            f"{file} lacks {len(absent)} of the model's {len(absent) + len(saved)} "
            f"trainable tensors (e.g. {absent[0]}): an empty or partial file"
        )
    bad = nonfinite_tensors(saved)
    if bad:
        raise UnreadableCheckpoint(f"{file} holds NaN or infinite weights ({len(bad)} tensor(s), e.g. {bad[0]})")
    with torch.no_grad():
        for name, value in saved.items():
            params[name].copy_(value.to(params[name].device, params[name].dtype))


def rng_states_to_json() -> dict:
    """Python's and numpy's global RNG states as JSON-safe lists (no pickle)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)],
    }


def rng_states_from_json(obj: dict) -> None:
    version, internal, gauss = obj["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = obj["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


# what torch's weights-only unpickler says of bytes it cannot parse at all (garbage, a cut
# write), as opposed to a well-formed pickle of objects it will not build
_NOT_A_PICKLE = ("Unsupported operand", "String is too long", "negative argument")


def safe_load(path: Path):
    """``torch.load(path, weights_only=True)``; a file that is not a plain tensor/container
    pickle is refused with its path named, saying which of two things it is: bytes torch cannot
    read at all (a corrupt or truncated write: the fix is the previous checkpoint) or a readable
    pickle of other objects (a crafted file: unpickling it could run code). torch reports both
    as "Weights only load failed", so the unpickler's own reason tells them apart."""
    torch = require("torch")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError for crafted objects and garbage, EOF/zip errors for truncation
        text = str(err).strip()
        reason = (text.rpartition("WeightsUnpickler error:")[2].strip().splitlines() or [""])[0]
        if isinstance(err, OSError):  # missing, unreadable: the file's state is unknown, not corrupt
            why = f"{type(err).__name__}: {text.splitlines()[0] if text else 'unreadable'}"
        elif "Weights only load failed" in text and not reason.startswith(_NOT_A_PICKLE):
            why = "it holds objects other than tensors and plain containers (unpickling it could run code)"
        else:
            detail = reason if "Weights only load failed" in text else (text.splitlines()[0] if text else "no data")
            why = f"not a readable tensor file (corrupt or truncated; {type(err).__name__}: {detail})"
        raise UnreadableCheckpoint(f"refusing checkpoint file {path}: {why}") from None


def load_checkpoint(path: Path, *, model, optimizer, scheduler, config: TrainConfig) -> dict:
    """Restore weights, optimizer, scheduler and RNG states; returns state.json (step, position).
    Every file is read and checked before anything is restored, so a bad file leaves the
    model and optimizer untouched."""
    torch = require("torch")
    path = Path(path)
    state = check_compatible(path, config)
    optim_state = safe_load(path / "optimizer.pt")
    sched_state = safe_load(path / "scheduler.pt")
    rng = safe_load(path / "rng.pt")
    rng_json = _read_json(path / "rng.json", ("python", "numpy"))
    load_trainable(model, path)
    optimizer.load_state_dict(optim_state)
    scheduler.load_state_dict(sched_state)
    rng_states_from_json(rng_json)
    torch.set_rng_state(rng["torch"])
    return state


def saved_config(path) -> TrainConfig:
    """The TrainConfig a checkpoint folder was written with (its ``config.json``), no weights read."""
    path = Path(path)
    saved = _read_json(path / "config.json", ())
    if not isinstance(saved, dict):
        raise UnreadableCheckpoint(f"{path / 'config.json'} is not a mapping of config fields")
    import dataclasses

    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(saved) - names)
    if unknown:
        raise UnreadableCheckpoint(
            f"{path / 'config.json'} has unknown config key(s) {unknown} (written by another gcpo version, or edited?)"
        )
    # reporting backends of the run that wrote it are not needed (nor maybe installed) to load it
    return TrainConfig(**{**saved, "tensorboard": False, "report_to": None})


def load_trained(path, device=None):
    """(model, tokenizer, config) from a checkpoint folder written by the trainer."""
    from gcpo_train.model.policy import load_model_and_tokenizer, wrap_lora

    path = Path(path)
    cfg = saved_config(path)
    model, tok = load_model_and_tokenizer(cfg.model, cfg.dtype)
    if cfg.use_lora:
        model = wrap_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
    load_trainable(model, path)
    if device:
        model.to(device)
    model.eval()
    return model, tok, cfg
