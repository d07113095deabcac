"""The no-passage control of a ``gcpo compare`` folder (issue 35): the base policy and the final
policy of every finished arm-seed, evaluated on the same held-out queries with every passage
replaced by "(no passage)", written where ``scripts/span_gate.py --compare`` reads them:

    python scripts/narrativeqa_spans.py runs/nqa_spans_fit_blank --max_passage_tokens 192 \\
        --unique_questions --no_passage
    python scripts/nopassage_control.py runs/nqa_fp32_pilot runs/nqa_spans_fit_blank --arms none,bot_rd
    python scripts/span_gate.py runs/nqa_spans_fit --compare runs/nqa_fp32_pilot

Writes ``FOLDER/nopassage/base.json`` and ``FOLDER/nopassage/<arm>_seed_<s>_step_<N>.json``
(each with its ``.predictions.parquet``). Each evaluation is the run's own: its config (decoding,
kernels, ``max_context_tokens``) from the comparison's ``compare.json``, its last checkpoint, the
first ``eval_n`` held-out queries, with only ``data_path`` replaced. The queries must be the
with-passage evaluation's, id for id (checked before any model loads). Resumable: an evaluation
whose predictions exist is kept, so the command can run while the comparison still trains and
again when more arm-seeds have finished.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def comparison(folder: Path, blank_data: str):
    """The ``Comparison`` of ``folder`` as recorded in its ``compare.json``, on ``blank_data``."""
    from gcpo_train.compare.run import Comparison
    from gcpo_train.config import load_config

    spec_path = folder / "compare.json"
    if not spec_path.exists():
        raise SystemExit(f"{spec_path} is missing: is {folder} a gcpo compare folder?")
    spec = json.loads(spec_path.read_text())
    # compare.json keeps steps beside the config's identity (a folder may grow its steps)
    base = load_config(overrides={**spec["config"], "steps": spec["steps"], "data_path": blank_data})
    return Comparison(
        base,
        folder,
        spec["modulators"],
        spec["seeds"],
        eval_every=spec["eval_every"],
        eval_n=spec["eval_n"],
        split_seed=spec["split_seed"],
        bf16_sampling=spec.get("bf16_sampling", False),
    )


def finished_runs(folder: Path, arms: list[str] | None) -> list[tuple[str, int, int]]:
    """(arm, seed, last step) of every arm-seed with a ``done.json`` (of ``arms`` when given)."""
    runs = []
    from gcpo_train.compare.layout import finished_runs

    for run in finished_runs(folder):
        record = json.loads((run / "done.json").read_text())
        if arms is None or record["arm"] in arms:
            runs.append((record["arm"], int(record["seed"]), int(record["steps"])))
    return runs


def evaluate_blank(folder: Path, blank_data: str, arms: list[str] | None = None, progress: bool = True) -> list[Path]:
    """Evaluate what is missing; the paths of every no-passage evaluation of the folder."""
    from gcpo_train.compare.layout import arm_seed_folder
    from gcpo_train.compare.run import REFERENCE_ARM, base_key, run_config
    from gcpo_train.evaluation.evaluate import evaluate
    from gcpo_train.evaluation.heldout import check_paired_queries, read_scores

    cmp = comparison(folder, blank_data)
    from gcpo_analysis.errors import did_you_mean

    for arm in arms or []:  # a misspelt arm would select nothing, silently
        if arm not in cmp.modulators:
            raise SystemExit(
                f"--arms: {arm!r} is not an arm of {folder} ({', '.join(cmp.modulators)})"
                + did_you_mean(arm, cmp.modulators)
            )
    queries = cmp.heldout()
    out = folder / "nopassage"
    todo = []
    for seed in cmp.seeds:  # the base policy: once for a real model, per seed for a random tiny one
        cfg = run_config(cmp.base, REFERENCE_ARM, seed, folder, cmp.eval_every, cmp.eval_n, cmp.split_seed)
        key = base_key(cfg, seed)
        name = "base" if key == "all_seeds" else f"base_{key}"
        if name not in [t[0] for t in todo]:
            todo.append((name, folder / "base" / f"{key}.predictions.parquet", cfg, seed, None))
    for arm, seed, step in finished_runs(folder, arms):
        run = arm_seed_folder(folder, arm, seed)
        checkpoint = run / "checkpoints" / f"step_{step:06d}"
        name = f"{run.parent.name}_seed_{seed}_step_{step}"  # the folder's name: no ':' in a file name
        # a run already evaluated needs no checkpoint (a folder restored from its published copy has none)
        if not checkpoint.is_dir() and not (out / f"{name}.predictions.parquet").exists():
            raise SystemExit(f"{checkpoint} is missing: the no-passage control needs the run's last checkpoint")
        cfg = run_config(cmp.base, arm, seed, folder, cmp.eval_every, cmp.eval_n, cmp.split_seed)
        todo.append(
            (
                name,
                run / "eval" / f"step_{step:06d}.predictions.parquet",
                cfg,
                seed,
                checkpoint,
            )
        )
    # every pairing checked before any model loads: blank data of other questions costs no decode
    scores = {}
    for name, with_passage, *_ in todo:
        scores[name] = read_scores(with_passage, "with-passage predictions")
        check_paired_queries(queries["query_id"], scores[name], "with passage", str(with_passage))
    written = []
    for name, with_passage, cfg, seed, checkpoint in todo:
        path = out / f"{name}.json"
        written.append(path)
        if path.with_name(f"{name}.predictions.parquet").exists():
            continue
        if checkpoint is None:
            model, tokenizer = cmp.base_policy(seed)
        else:
            from gcpo_train.runfiles.checkpoint import load_trained

            model, tokenizer, _ = load_trained(checkpoint, cfg.device)
        out.mkdir(exist_ok=True)
        # the run's own config (decoding, kernels, context cap) on the blank data: only data_path differs
        evaluate(
            model,
            tokenizer=tokenizer,
            config=cfg,
            queries=queries,
            output=path,
            progress=progress,
            device=cfg.device,
            paired={"with passage": str(with_passage)},
        )
        print(f"{path}: done", file=sys.stderr)
    return written


def main(argv=None) -> int:
    from gcpo_train.compare.settings import comma_items  # the one comma-list parser (empty items refused)

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a gcpo compare folder")
    p.add_argument("data", help="the --no_passage folder of scripts/narrativeqa_spans.py (the same other options)")
    p.add_argument("--arms", default=None, help="comma-separated arms (default: every finished one)")
    p.add_argument("--no_progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    arms = comma_items(args.arms, "--arms") if args.arms else None
    paths = evaluate_blank(Path(args.folder), args.data, arms, progress=not args.no_progress)
    print(f"{len(paths)} no-passage evaluations in {Path(args.folder) / 'nopassage'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
