"""The samplers of ``TrainConfig.sampling_kernels``: name -> how to build it, with declared properties.

A caller asks a sampler's properties (``sampler(name).packs_weights``), never its name: the
trainer checks the model with ``check_model``, ``evaluate`` builds the config's sampler with
``make_kernels``, the config refuses any but a ``fp32_exact`` sampler on the TRL backend, and
the benchmark takes the ``fp32_exact`` one as its reference. How each decodes, and why it is
faster on a CPU: ``gcpo_train.sampling.kernels`` and ``gcpo_train.sampling.fused``.

Every sampler samples π_θ at the config's temperature and top-p (nothing from the model
folder's ``generation_config``: ``generate._generate`` passes a clean one), so they differ only
in float rounding (``fp32``) or in a bf16 rounding of the weights (``bf16``).

Importing this module needs no torch (the config reads the names at import).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gcpo_analysis.errors import did_you_mean


@dataclass(frozen=True)
class Sampler:
    """One ``sampling_kernels`` choice.

    ``build(rows_hint)``: the kernels object ``generate_groups(kernels=...)`` takes (None:
    transformers ``generate``, one call per group). ``fp32_exact``: samples bit for bit as
    transformers ``generate`` in the run's dtype (the reference; also what TRL's generate
    does). ``packs_weights``: runs on weights prepacked for oneDNN (so a CPU with oneDNN only).
    ``bf16``: the linear layers in bfloat16 (a CPU with bf16 instructions; samples from a bf16
    rounding of π_θ). ``check_model(model)``: refuses a model the sampler does not implement
    (at the trainer's start, not at step 1). ``fallback``: the sampler to name when this one
    cannot run here."""

    name: str
    build: Callable[[], Any] | None
    help: str
    fp32_exact: bool = False
    packs_weights: bool = False
    bf16: bool = False
    check_model: Callable[[Any], Any] | None = None
    fallback: str = "exact"


SAMPLERS: dict[str, Sampler] = {}
DEFAULT_SAMPLER = "exact"


def register_sampler(spec: Sampler) -> Sampler:
    """Add a sampler under its name (a name is registered once)."""
    if spec.name in SAMPLERS:
        raise ValueError(f"sampler {spec.name!r} is already registered")
    if not spec.name.isidentifier():
        raise ValueError(f"a sampler's name must be an identifier, got {spec.name!r}")
    SAMPLERS[spec.name] = spec
    return spec


def sampler_names() -> list[str]:
    """The registered names, read when asked (the config's choices)."""
    return list(SAMPLERS)


def sampler(name: str) -> Sampler:
    """The sampler registered as ``name``; an unknown name is refused with close matches."""
    try:
        return SAMPLERS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"sampling_kernels must be one of {', '.join(SAMPLERS)}, got {name!r}" + did_you_mean(str(name), SAMPLERS)
        ) from None


def check_kernels(name: str, device=None) -> Sampler:
    """The sampler ``name``, refused when this machine or ``device`` cannot run it (naming the fix)."""
    spec = sampler(name)
    if not spec.packs_weights:
        return spec
    from gcpo_analysis.models import require

    torch = require("torch")
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(
            f"sampling_kernels {name!r} is for CPU runs (device {device}); use {DEFAULT_SAMPLER!r} on a GPU"
        )
    if not torch.backends.mkldnn.is_available():
        raise ValueError(f"sampling_kernels {name!r} needs PyTorch built with oneDNN (mkldnn); use {DEFAULT_SAMPLER!r}")
    if spec.bf16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        raise ValueError(
            f"sampling_kernels {name!r} needs a CPU with bf16 support (avx512_bf16/amx); use {spec.fallback!r}"
        )
    return spec


def make_kernels(name: str, device=None):
    """The kernels object of sampler ``name`` (checked; ``check_kernels``): None for transformers
    generate, else what its ``build`` gives, which carries the sampler's ``name``."""
    spec = check_kernels(name, device)
    return None if spec.build is None else spec.build()


def kernels_name(kernels) -> str:
    """The sampler's name of a ``make_kernels`` object (None: the default, transformers generate)."""
    return DEFAULT_SAMPLER if kernels is None else kernels.name


def _packed(name: str, bf16: bool):
    def build():
        from gcpo_train.sampling.kernels import PackedLinears

        return PackedLinears(bf16=bf16, name=name)

    return build


def _fused(name: str, bf16: bool):
    def build():
        from gcpo_train.sampling.fused import FusedKernels

        return FusedKernels(bf16=bf16, name=name)

    return build


def _llama_of(model):
    from gcpo_train.sampling.fused import llama_of

    return llama_of(model)


register_sampler(
    Sampler(
        DEFAULT_SAMPLER,
        None,
        "transformers generate, one call per group (samples bit for bit as before)",
        fp32_exact=True,
    )
)
register_sampler(
    Sampler(
        "onednn",
        _packed("onednn", bf16=False),
        "the step's groups in one decode loop on fp32 weights prepacked for oneDNN, each group from its own "
        "seeded generator: the same samples up to float rounding",
        packs_weights=True,
    )
)
register_sampler(
    Sampler(
        "bf16",
        _packed("bf16", bf16=True),
        "as 'onednn' with bfloat16 weights and activations: samples from a bf16 rounding of the policy",
        packs_weights=True,
        bf16=True,
        fallback="onednn",
    )
)
register_sampler(
    Sampler(
        "fused",
        _fused("fused", bf16=False),
        "as 'onednn' with a hand-written decode step for float32 Llama models (plain or peft LoRA)",
        packs_weights=True,
        check_model=_llama_of,
        fallback="onednn",
    )
)
register_sampler(
    Sampler(
        "fused_bf16",
        _fused("fused_bf16", bf16=True),
        "'fused' with bfloat16 base weights and linear-layer inputs: samples from a bf16 rounding of the policy",
        packs_weights=True,
        bf16=True,
        check_model=_llama_of,
        fallback="fused",
    )
)
