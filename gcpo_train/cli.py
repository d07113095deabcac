"""``gcpo train`` / ``gcpo eval`` / ``gcpo export`` (and ``python -m gcpo_train train|eval|export``).

Overrides (``gcpo_train.overrides``, the same on ``gcpo compare`` and ``bench/train_step.py``):
every TrainConfig field is a flag of the same name, generated from the dataclass (help text
included), and ``--set`` takes several at once: ``--config configs/cpu_smoke.yaml --steps 30
--learning_rate 1e-4 --use_lora false`` = ``--config configs/cpu_smoke.yaml --set steps=30
learning_rate=1e-4 use_lora=false``. Values are parsed as YAML scalars (true/false, null,
numbers, ``[q_proj, v_proj]``); a boolean flag alone means true (``--resume``). They win over
the YAML file, which wins over the defaults. An unknown field is refused with close matches.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gcpo_analysis.datasets import dataset_names
from gcpo_analysis.knobs import SPLITS
from gcpo_train.config import DTYPES, TrainConfig, load_config
from gcpo_train.overrides import add_override_flags, overrides_from


def add_train_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``train``: ``--config FILE``, one ``--<field>`` per TrainConfig field and ``--set``."""
    p = subparsers.add_parser(
        "train",
        help="GRPO/GCPO training (see configs/)",
        allow_abbrev=False,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", default=None, help="YAML file of TrainConfig fields")
    add_override_flags(p)
    p.set_defaults(func=run_train, _parser=p)
    return p


def add_eval_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``eval``: greedy evaluation of a checkpoint folder or a model name."""
    p = subparsers.add_parser("eval", help="greedy evaluation on a test split", allow_abbrev=False)
    p.add_argument(
        "checkpoint",
        help="checkpoint folder (output_dir/checkpoints/step_N), a run folder (its newest checkpoint), "
        "'packaged', or a model name/path",
    )
    p.add_argument("--dataset", default=None, choices=dataset_names(), help="benchmark (default: the checkpoint's)")
    p.add_argument(
        "--split", default=None, choices=SPLITS, help="split to evaluate (default: the config's eval_split, else test)"
    )
    p.add_argument("--n", type=int, default=None, help="evaluate the first n queries (default: all)")
    p.add_argument(
        "--data_path", "--data-path", default=None, help="local benchmark file (default: the packaged/default source)"
    )
    p.add_argument(
        "--max_new_tokens",
        "--max-new-tokens",
        type=int,
        default=None,
        help="completion cap (default: the checkpoint's eval_max_new_tokens or max_new_tokens)",
    )
    p.add_argument(
        "--batch_size", "--batch-size", type=int, default=8, help="prompts per greedy generation batch (default: 8)"
    )
    p.add_argument(
        "--config",
        default=None,
        help="training config YAML: evaluate its run's own held-out split (split_from_single, split_seed, "
        "eval_split) with its decoding, e.g. the base policy ('packaged') on the queries its checkpoints "
        "are evaluated on (default: the checkpoint's config, or the dataset's test split)",
    )
    p.add_argument(
        "--paired_with",
        "--paired-with",
        default=None,
        help="a predictions.parquet of another evaluation on the same queries (e.g. the base policy's): "
        "print the mean paired difference (this − that) with a 95%% bootstrap CI over queries",
    )
    p.add_argument("--output", default=None, help="JSON file for the metrics (default: print only)")
    p.add_argument("--no_progress", "--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run_eval, _parser=p)
    return p


def add_export_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``export``: a checkpoint merged into a standalone Hugging Face model folder."""
    p = subparsers.add_parser(
        "export",
        help="merge a checkpoint into a model folder that AutoModelForCausalLM.from_pretrained loads",
        allow_abbrev=False,
        description="Rebuild the trained policy of a checkpoint (LoRA merged into the "
        "base weights, or the full fine-tune), write safetensors + config + generation "
        "config + tokenizer + gcpo_export.json (provenance) to OUT, reload it and check "
        "its logits against the trained policy's.",
    )
    p.add_argument(
        "checkpoint",
        help="checkpoint folder (output_dir/checkpoints/step_N) or a run folder (its newest checkpoint that loads)",
    )
    p.add_argument("output", help="new folder for the model")
    p.add_argument(
        "--dtype", choices=DTYPES, default=None, help="weight dtype of the export (default: the run's dtype)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace OUT when it holds an earlier export")
    p.add_argument(
        "--no_check",
        "--no-check",
        action="store_true",
        help="skip reloading the export and comparing its logits with the trained policy's",
    )
    p.set_defaults(func=run_export, _parser=p)
    return p


def config_from_args(args) -> TrainConfig:
    return load_config(args.config, overrides_from(args))


def run_train(args) -> int:
    from gcpo_train.loop.trainer import GCPOLoopTrainer

    cfg = config_from_args(args)
    if cfg.backend == "trl":  # the same config through TRL's GRPOTrainer (gcpo_train.trl)
        from gcpo_train.trl.backend import run

        rows = run(cfg, flags=list(overrides_from(args)))  # the fields given on the command line
        if rows:
            print(json.dumps({k: rows[-1][k] for k in ("step", "reward", "kl", "loss") if k in rows[-1]}))
        return 0
    trainer = GCPOLoopTrainer(cfg)
    rows = trainer.train()
    if rows:
        last = rows[-1]
        print(json.dumps({k: last[k] for k in ("step", "reward_mean", "kl", "loss") if k in last}))
    return 0


def run_eval(args) -> int:
    from gcpo_analysis.knob import Knob, check_value
    from gcpo_train.evaluation.evaluate import evaluate, guard_outputs

    for flag, value in (("--n", args.n), ("--max_new_tokens", args.max_new_tokens), ("--batch_size", args.batch_size)):
        if value is not None:  # >= 1 and within int64 (10^23 tokens ran until killed)
            check_value(flag, value, Knob(1, "", ge=1), int)
    # every input resolved and checked before anything is read, loaded or written: the outputs
    # may not replace the model, the data, the config or the evaluation to pair with
    inputs = {"--config": args.config}
    paired = {"--paired_with": args.paired_with}
    sources = {"the model": args.checkpoint if Path(args.checkpoint).exists() else None, "--data_path": args.data_path}
    if args.output is not None:
        guard_outputs(args.output, {**sources, **inputs}, paired)
    base = None
    if args.paired_with:
        from gcpo_train.evaluation.heldout import read_scores

        base = read_scores(args.paired_with, "--paired_with")
    config = load_config(args.config) if args.config else None
    checkpoint = args.checkpoint
    if (Path(checkpoint) / "checkpoints").is_dir():  # a run folder, as gcpo export takes it
        from gcpo_train.runfiles.checkpoint import latest_checkpoint

        checkpoint = latest_checkpoint(checkpoint)
        if checkpoint is None:
            raise ValueError(
                f"run folder {args.checkpoint} has no complete checkpoint: train with checkpoint_every >= 1"
            )
        print(f"[eval] {args.checkpoint}: its newest checkpoint, {checkpoint}", file=sys.stderr)
    res = evaluate(
        checkpoint,
        args.dataset,
        config=config,
        split=args.split,
        n=args.n,
        data_path=args.data_path,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        output=args.output,
        progress=not args.no_progress,
        inputs=inputs,
        paired=paired,
        paired_scores=None if base is None else {"--paired_with": base},
    )
    print(json.dumps(res["metrics"], indent=2))
    if base is not None:
        import pandas as pd

        from gcpo_train.evaluation.heldout import paired_gain

        this = pd.DataFrame({"query_id": res["query_ids"], "score": res["scores"]})
        gain = paired_gain(base, this)
        print(json.dumps({"paired_with": args.paired_with, **gain}, indent=2))
    return 0


def run_export(args) -> int:
    from gcpo_train.runfiles.export import export_checkpoint

    res = export_checkpoint(
        args.checkpoint, args.output, dtype=args.dtype, overwrite=args.overwrite, check=not args.no_check
    )
    diff = res["max_abs_logit_diff"]
    print(
        f"wrote {res['output']} ({res['bytes'] / 2**20:.1f} MiB, {res['dtype']}) from step {res['step']} of "
        f"{res['source_checkpoint']} in {res['seconds']:.1f} s; max |logit difference| from the trained "
        f"policy: {'not checked' if diff is None else f'{diff:.2e}'}"
    )
    return 0
