"""The samplers' registry (gcpo_train/sampling/registry.py): each name builds what it declares,
the config's ``sampling_kernels`` choices are the registry's (a sampler registered later
counts), and nothing outside the registry compares the knob's string."""

import re
from pathlib import Path

import pytest

from gcpo_train.sampling import registry
from gcpo_train.sampling.registry import SAMPLERS, Sampler, register_sampler, sampler, sampler_names

ROOT = Path(__file__).resolve().parents[2]


def test_one_fp32_exact_sampler_the_default_and_transformers_generate():
    exact = [s for s in SAMPLERS.values() if s.fp32_exact]
    assert [s.name for s in exact] == [registry.DEFAULT_SAMPLER]
    assert exact[0].build is None and not exact[0].packs_weights and not exact[0].bf16
    assert registry.make_kernels(registry.DEFAULT_SAMPLER, "cuda") is None  # no CPU check for generate
    assert registry.kernels_name(None) == registry.DEFAULT_SAMPLER


@pytest.mark.parametrize("name", [n for n, s in SAMPLERS.items() if s.build is not None])
def test_each_packed_sampler_builds_what_it_declares(name):
    torch = pytest.importorskip("torch")
    spec = sampler(name)
    if not torch.backends.mkldnn.is_available():
        pytest.skip("PyTorch built without oneDNN")
    if spec.bf16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        with pytest.raises(ValueError, match=f"use {spec.fallback!r}"):
            registry.make_kernels(name)
        return
    kernels = registry.make_kernels(name)
    assert spec.packs_weights and hasattr(kernels, "_packed")  # the packed copies it keeps across steps
    assert kernels.name == name and registry.kernels_name(kernels) == name
    assert kernels.bf16 == spec.bf16
    assert spec.fallback in SAMPLERS and not sampler(spec.fallback).bf16
    with pytest.raises(ValueError, match="for CPU runs"):
        registry.make_kernels(name, "cuda")


def test_names_are_registered_once_and_as_identifiers():
    with pytest.raises(ValueError, match="already registered"):
        register_sampler(Sampler("onednn", None, "again"))
    with pytest.raises(ValueError, match="identifier"):
        register_sampler(Sampler("../x", None, "a path"))
    with pytest.raises(ValueError, match="did you mean onednn"):
        sampler("onedn")


def test_the_config_reads_the_registrys_names_when_it_checks(tmp_path, monkeypatch):
    from gcpo_train.config import TrainConfig

    base = dict(model="tiny:llama", dataset="narrativeqa", output_dir=str(tmp_path / "r"))
    with pytest.raises(ValueError, match="sampling_kernels"):
        TrainConfig(**base, sampling_kernels="toy").validate()
    monkeypatch.setitem(SAMPLERS, "toy", Sampler("toy", None, "a toy: transformers generate again", fp32_exact=True))
    assert "toy" in sampler_names()
    TrainConfig(**base, sampling_kernels="toy").validate()
    TrainConfig(**base, sampling_kernels="toy", backend="trl").validate()  # fp32_exact: TRL's generate too
    monkeypatch.setitem(SAMPLERS, "toy", Sampler("toy", None, "a packed toy", packs_weights=True))
    with pytest.raises(ValueError, match="is the gcpo loop's"):
        TrainConfig(**base, sampling_kernels="toy", backend="trl").validate()


def test_no_code_outside_the_registry_compares_a_samplers_name():
    """The knob's value is looked up (``sampler(name).<property>``), never compared: a comparison
    with a registered name, or a test of its prefix/suffix, anywhere in the packages, benches and
    scripts but the registry fails here."""
    names = "|".join(SAMPLERS)
    compare = re.compile(
        rf"""(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=)|"""
        rf"""\bin\s*\(\s*["']({names})["']|startswith\(\s*["']({names})|endswith\(\s*["']_?({names})|"""
        rf"""["']({names})["']\s+in\s+\w"""
    )
    found = []
    for folder in ("gcpo_train", "gcpo_analysis", "bench", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "registry.py" and path.parent.name == "sampling":
                continue
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if compare.search(line) and ("kernel" in line or "sampl" in line or re.search(rf"\b({names})\b", line)):
                    found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)
