"""Run TRL's own GRPO test file against GRPOTrainer and against GCPOTrainer.

    python scripts/trl_suite.py /path/to/trl-checkout [-k EXPR] [--work DIR] [--out bench/results/trl_suite.md]

TRL's tests are not in its PyPI wheel, so they are read from a checkout (a git clone, or
``git --git-dir=... worktree add``) and copied into a scratch folder (``--work``), never into
this repository. The harness then

1. builds local stand-ins for the hub ids the file loads (no network): tiny random Qwen2, Qwen3,
   Llama and Mistral causal LMs and Qwen2/Qwen3/Llama sequence classifiers, sized as TRL's
   ``scripts/generate_tiny_models`` sizes them (hidden 8/16, 2 layers, bf16) but with the
   SmolLM2 tokenizer of the packaged policy (TRL's use each model family's own tokenizer, which
   needs the hub); and the ``trl-internal-testing/zen`` dataset, made by running the checkout's
   own ``scripts/generate_zen_dataset.py`` with its ``push_to_hub`` captured;
2. writes a pytest plugin into the scratch folder that maps those hub ids to the stand-ins
   (``from_pretrained`` of transformers' Auto, model, tokenizer, processor and config classes,
   and ``datasets.load_dataset``), adds the ``trl.import_utils.is_*_available`` probes the
   file imports and the installed trl lacks (the same probe: can the package be imported), and,
   for a GCPO pass, puts a GCPOTrainer/GCPOConfig in the test
   module's ``GRPOTrainer``/``GRPOConfig`` names (``modulator`` preset, and
   ``reward_range="running"`` since the file's rewards have no declared bounds); on a machine
   without a GPU every pass's config gets ``use_cpu=True`` (TRL's bf16 default is refused otherwise);
3. runs the file three times (``grpo``: TRL's trainer; ``none``: GCPOTrainer with
   ``modulator="none"``; ``bot_rd``), each with ``--junitxml``;
4. writes the table: passed, failed and skipped per pass, and every test that passes on
   GRPOTrainer but not on a GCPO pass, with its reason (the failure's first line).

Hub ids without a stand-in (vision models, other architectures) fail alike on every pass
(offline); they are counted, and listed only where the outcomes differ.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("test_grpo_trainer.py", "conftest.py", "testing_utils.py", "testing_constants.py", "__init__.py")
PASSES = {"grpo": None, "none": "none", "bot_rd": "bot_rd"}
ZEN = "trl-internal-testing/zen"

# hub id -> (transformers config class, model class, config overrides); sizes as TRL's generator scripts
STAND_INS = {
    "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "Qwen/Qwen2.5-0.5B-Instruct": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "trl-internal-testing/tiny-Qwen3ForCausalLM": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "trl-internal-testing/tiny-LlamaForCausalLM-3.2": ("LlamaConfig", "LlamaForCausalLM", {}),
    "trl-internal-testing/tiny-MistralForCausalLM-0.2": ("MistralConfig", "MistralForCausalLM", {}),
    "trl-internal-testing/tiny-Qwen3MoeForCausalLM": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    ),
    "trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5": (
        "Qwen2Config",
        "Qwen2ForSequenceClassification",
        {"num_labels": 1, "hidden_size": 16},
    ),
    "trl-internal-testing/tiny-Qwen3ForSequenceClassification": (
        "Qwen3Config",
        "Qwen3ForSequenceClassification",
        {"num_labels": 1, "hidden_size": 16},
    ),
    "trl-internal-testing/tiny-LlamaForSequenceClassification-3.2": (
        "LlamaConfig",
        "LlamaForSequenceClassification",
        {"num_labels": 1, "hidden_size": 16},
    ),
}


def stand_in_name(hub_id: str) -> str:
    return hub_id.replace("/", "__")


def build_models(folder: Path) -> dict[str, str]:
    """Every ``STAND_INS`` model saved under ``folder`` with the SmolLM2 tokenizer; hub id -> path."""
    import torch
    import transformers

    out = {hub_id: str(folder / stand_in_name(hub_id)) for hub_id in STAND_INS}
    if all((Path(p) / "config.json").exists() for p in out.values()):
        return out
    from gcpo_analysis.models import packaged_policy_gguf

    gguf_folder, gguf = packaged_policy_gguf()  # the packaged SmolLM2-135M-Instruct's tokenizer
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_folder), gguf_file=gguf)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    for hub_id, (config_cls, model_cls, overrides) in STAND_INS.items():
        path = folder / stand_in_name(hub_id)
        if (path / "config.json").exists():
            continue
        torch.manual_seed(0)
        kw = dict(
            vocab_size=len(tokenizer),
            hidden_size=8,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_hidden_layers=2,
            intermediate_size=32,
            head_dim=None,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        kw.update(overrides)
        kw["head_dim"] = kw["hidden_size"] // kw["num_attention_heads"]
        config = getattr(transformers, config_cls)(**kw)
        model = getattr(transformers, model_cls)(config).to(dtype=torch.bfloat16)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        if model_cls.endswith("CausalLM"):
            transformers.GenerationConfig(
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            ).save_pretrained(path)
    return out


def build_zen(checkout: Path, folder: Path) -> str:
    """``trl-internal-testing/zen``: the checkout's generator script run with ``push_to_hub``
    captured; each config saved as a DatasetDict under ``folder/<config>``."""
    import importlib.util

    import datasets

    if (folder / "standard_prompt_only").exists():
        return str(folder)
    spec = importlib.util.spec_from_file_location("generate_zen_dataset", checkout / "scripts/generate_zen_dataset.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    captured = {}

    def capture(self, repo_id, config_name="default", **_):
        captured[config_name] = self

    original = datasets.DatasetDict.push_to_hub
    datasets.DatasetDict.push_to_hub = capture  # type: ignore[method-assign]
    try:
        module.main(test_size=0.1, push_to_hub=True, repo_id=ZEN)
    finally:
        datasets.DatasetDict.push_to_hub = original  # type: ignore[method-assign]
    for name, dd in captured.items():
        dd.save_to_disk(str(folder / name))
    return str(folder)


PLUGIN = '''"""Written by gcpo's scripts/trl_suite.py: hub ids -> local stand-ins; GRPOTrainer -> GCPOTrainer."""
import dataclasses
import json
import os
from functools import wraps

import datasets
import transformers

MAP = json.loads(os.environ["GCPO_SUITE_MODELS"])
ZEN = os.environ["GCPO_SUITE_ZEN"]
MODULATOR = os.environ.get("GCPO_SUITE_MODULATOR") or None


def _wrap(cls):
    original = cls.__dict__["from_pretrained"].__func__

    @wraps(original)
    def from_pretrained(klass, name, *args, **kwargs):
        if isinstance(name, str) and name in MAP:
            name = MAP[name]
            kwargs.pop("revision", None)
        return original(klass, name, *args, **kwargs)

    cls.from_pretrained = classmethod(from_pretrained)


from transformers.models.auto.auto_factory import _BaseAutoModelClass  # noqa: E402

for _cls in (
    _BaseAutoModelClass,
    transformers.AutoConfig,
    transformers.AutoTokenizer,
    transformers.AutoProcessor,
    transformers.PreTrainedModel,
    transformers.PreTrainedTokenizerBase,
    transformers.ProcessorMixin,
    transformers.PretrainedConfig,
    transformers.GenerationConfig,
):
    if "from_pretrained" in _cls.__dict__:
        _wrap(_cls)

# availability probes the test file imports and the installed trl lacks (a version gap): the same
# probe, whether the package can be imported
import importlib.util  # noqa: E402

import trl.import_utils as _iu  # noqa: E402

for _pkg in ("joblib", "harbor", "openreward", "math_verify", "mergekit", "jmespath", "liger_kernel", "vllm"):
    if not hasattr(_iu, f"is_{_pkg}_available"):
        setattr(_iu, f"is_{_pkg}_available", lambda _p=_pkg: importlib.util.find_spec(_p) is not None)

_load_dataset = datasets.load_dataset


def load_dataset(path, name=None, *args, split=None, streaming=False, **kwargs):
    if path == "trl-internal-testing/zen":
        dd = datasets.load_from_disk(os.path.join(ZEN, name or "standard_prompt_only"))
        if streaming:
            dd = datasets.IterableDatasetDict({k: v.to_iterable_dataset() for k, v in dd.items()})
        return dd[split] if split else dd
    return _load_dataset(path, name, *args, split=split, streaming=streaming, **kwargs)


datasets.load_dataset = load_dataset

import torch  # noqa: E402
import trl  # noqa: E402

ON_CPU = not torch.cuda.is_available()


def _on_cpu(config):
    # TRL's config defaults to bf16, which transformers refuses on a machine without a GPU unless
    # use_cpu is set: the same adjustment on every pass
    if ON_CPU:
        config.use_cpu = True


@dataclasses.dataclass
class SuiteGRPOConfig(trl.GRPOConfig):
    def __post_init__(self):
        _on_cpu(self)
        super().__post_init__()


TRAINER, CONFIG = trl.GRPOTrainer, SuiteGRPOConfig
if MODULATOR:
    from gcpo_train.trl import GCPOConfig, GCPOTrainer

    @dataclasses.dataclass
    class SuiteConfig(GCPOConfig):
        def __post_init__(self):
            _on_cpu(self)
            self.modulator = MODULATOR
            self.reward_range = "running"  # the file's rewards declare no bounds
            super().__post_init__()

    TRAINER, CONFIG = GCPOTrainer, SuiteConfig


def pytest_collection_modifyitems(session, config, items):
    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        if hasattr(module, "GRPOTrainer"):
            module.GRPOTrainer = TRAINER
            module.GRPOConfig = CONFIG
'''


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed | failed | skipped, first line of the reason) from a junit xml."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        status, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
                reason = (child.get("message") or child.text or "").strip().splitlines()[:1]
                reason = reason[0] if reason else child.tag
                break
            if child.tag == "skipped":
                status, reason = "skipped", (child.get("message") or "").strip()
        out[name] = (status, reason)
    return out


def run_pass(name: str, tests: Path, env: dict, keyword: str | None, log: Path) -> Path:
    junit = tests.parent / f"junit_{name}.xml"
    if junit.exists():  # resumable: a finished pass is kept
        return junit
    cmd = [sys.executable, "-m", "pytest", str(tests / "test_grpo_trainer.py"), "-p", "gcpo_suite_plugin"]
    cmd += ["-p", "no:cacheprovider", "-q", "-rN", f"--junitxml={junit}.part", "-o", "junit_family=xunit1"]
    if keyword:
        cmd += ["-k", keyword]
    pass_env = {**env, "GCPO_SUITE_MODULATOR": PASSES[name] or ""}
    t0 = time.time()
    with open(log, "w") as fh:
        subprocess.run(cmd, cwd=tests.parent, env=pass_env, stdout=fh, stderr=subprocess.STDOUT, check=False)
    Path(f"{junit}.part").rename(junit)
    print(f"pass {name}: {time.time() - t0:.0f} s", flush=True)
    return junit


def table(results: dict[str, dict], checkout_desc: str, keyword: str | None) -> str:
    lines = [
        "<!-- written by `scripts/trl_suite.py`: do not edit -->",
        "",
        "TRL's GRPO tests on GRPOTrainer and on GCPOTrainer. Test file: "
        f"`tests/test_grpo_trainer.py` of {checkout_desc}; "
        "installed trl "
        + __import__("trl").__version__
        + ", transformers "
        + __import__("transformers").__version__
        + ", CPU. "
        + (f"Subset: `-k {keyword!r}`." if keyword else "The whole file.")
        + " Hub models and datasets are "
        "local stand-ins (tiny random models with the SmolLM2 tokenizer, TRL's `zen` generator); a hub id without "
        "one fails alike on every pass (offline).",
        "",
        "| pass | trainer | passed | failed | skipped |",
        "|---|---|---:|---:|---:|",
    ]
    what = {"grpo": "trl.GRPOTrainer", "none": 'GCPOTrainer, modulator="none"', "bot_rd": "GCPOTrainer, bot_rd"}
    for name, res in results.items():
        counts = {s: sum(1 for v in res.values() if v[0] == s) for s in ("passed", "failed", "skipped")}
        lines.append(f"| {name} | {what[name]} | {counts['passed']} | {counts['failed']} | {counts['skipped']} |")
    base = results.get("grpo", {})
    for name, res in results.items():
        if name == "grpo":
            continue
        lost = sorted(t for t, (s, _) in base.items() if s == "passed" and res.get(t, ("missing", ""))[0] != "passed")
        gained = sorted(t for t, (s, _) in res.items() if s == "passed" and base.get(t, ("", ""))[0] != "passed")
        lines += ["", f"#### Passes on GRPOTrainer, not on the `{name}` pass ({len(lost)})", ""]
        if lost:
            lines += ["| test | outcome | reason |", "|---|---|---|"]
            for t in lost:
                status, reason = res.get(t, ("missing", ""))
                lines.append(f"| `{t}` | {status} | {reason.replace('|', '/')[:240]} |")
        else:
            lines.append("None.")
        if gained:
            lines += ["", f"Passes on the `{name}` pass, not on GRPOTrainer: " + ", ".join(f"`{t}`" for t in gained)]
    failed = sorted(t for t, (s, _) in base.items() if s == "failed")
    if failed:
        lines += ["", f"#### Failing on GRPOTrainer itself ({len(failed)})", "", "| test | reason |", "|---|---|"]
        lines += [f"| `{t}` | {base[t][1].replace('|', '/')[:240]} |" for t in failed]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="a TRL checkout (a folder with tests/ and scripts/)")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression: run a subset (named in the table)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (resumable: finished passes are kept)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/trl_suite.md", help="the table")
    ap.add_argument("--passes", default="grpo,none,bot_rd", help="comma-separated: grpo, none, bot_rd")
    ap.add_argument("--describe", default=None, help="how the table names the checkout (default: its git describe)")
    args = ap.parse_args(argv)
    checkout = args.checkout.resolve()
    if not (checkout / "tests" / "test_grpo_trainer.py").exists():
        raise SystemExit(f"{checkout}: no tests/test_grpo_trainer.py (pass the root of a TRL checkout)")
    passes = [p.strip() for p in args.passes.split(",") if p.strip()]
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        raise SystemExit(f"--passes: unknown {unknown}; choose from {', '.join(PASSES)}")
    work = (args.work or Path(tempfile.mkdtemp(prefix="trl_suite_"))).resolve()
    tests = work / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if (checkout / "tests" / name).exists():
            shutil.copy(checkout / "tests" / name, tests / name)
    if (checkout / "tests" / "data").exists() and not (tests / "data").exists():
        shutil.copytree(checkout / "tests" / "data", tests / "data")
    (tests / "gcpo_suite_plugin.py").write_text(PLUGIN)
    models = build_models(work / "models")
    zen = build_zen(checkout, work / "zen")
    import json

    env = {
        **os.environ,
        "GCPO_SUITE_MODELS": json.dumps(models),
        "GCPO_SUITE_ZEN": zen,
        "PYTHONPATH": os.pathsep.join([str(tests), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    results = {}
    for name in passes:
        junit = run_pass(name, tests, env, args.keyword, work / f"log_{name}.txt")
        results[name] = outcomes(junit)
    describe = (
        args.describe
        or subprocess.run(
            ["git", "-C", str(checkout), "describe", "--tags", "--always"], capture_output=True, text=True
        ).stdout.strip()
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table(results, f"TRL {describe}" if describe else str(checkout), args.keyword))
    print(f"wrote {args.out} (work folder {work})")


if __name__ == "__main__":
    main()
