"""Step time of the GRPO trainer and its stages, per modulator, on the CPU smoke config.

    python bench/train_step.py [--config configs/cpu_smoke.yaml] [--steps 3]
                               [--modulators none cd bot se rd cd_rd] [--max_new_tokens 24 ...]
                               [--track-gradvar] [--track-full] [--use_lora false | --set use_lora=false]

Config overrides are gcpo train's (``gcpo_train.overrides``): ``--<field> V`` and ``--set FIELD=V``;
``--steps`` (steps per modulator) and ``--track-gradvar`` are this benchmark's own.

``--track-gradvar`` runs each modulator four ways: the default step (shared prompt), that step with
``track_gradvar`` on (the prompt still runs once; G − 1 input-gradient passes per group take each
rollout's own gradient back through it), the step without prompt sharing, and that step with
``track_gradvar``; the ``gradvar`` column is the hooks' Gram work inside forward_backward and
``gradvar_prompt`` the per-rollout prompt passes (also inside it). ``--track-full`` adds
``track_gradvar: full`` (the above plus the study's V over all parameters, one extra
forward+backward per group, timed in ``gradvar``). The four trainers are
built first and then stepped in turn (step 1 of each, step 2 of each, ...), so a change in the
load of a shared machine reaches all alike; each trainer's steps draw the same samples as the
others' only where the prompt sharing agrees (sampling is seeded per group).

Each modulator gets a fresh trainer (packaged SmolLM2-135M, LoRA r=8, G=4, 2 prompts/step,
embedding judge for clustering). The first step is a warm-up (it loads the embedder) and is
not counted; the table shows the mean over the remaining steps, in seconds, and the
modulation's share of the step: time_measure (embedding + clustering + modulate) / time_total.
``logprobs`` is the no-grad pass for the KL reference (and, for modulators that need token
entropy / log-probs before the update, the policy). Peak RSS is the process maximum so far.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STAGES = (
    "time_generate",
    "time_reward",
    "time_logprobs",
    "time_measure",
    "time_forward_backward",
    "time_gradvar",
    "time_gradvar_prompt",
    "time_gradvar_full",
    "time_step",
    "time_total",
)
VARIANTS = {
    "default": {},
    "track": {"track_gradvar": True},
    "unshared": {"share_prompt": False},
    "unshared+track": {"share_prompt": False, "track_gradvar": True},
    "track_full": {"track_gradvar": "full"},
}


def _time_steps(config_path: str, name: str, variant: str, steps: int, overrides: dict) -> tuple[float, list]:
    """(load seconds, log rows) of a fresh trainer's first ``steps`` steps."""
    from gcpo_train.config import load_config
    from gcpo_train.loop.trainer import GCPOLoopTrainer

    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(
            config_path,
            {
                **overrides,
                **VARIANTS[variant],
                "modulator": name,
                "steps": steps,
                "output_dir": out,
                "checkpoint_every": 0,
                "progress": False,
                "save_rollouts": False,
            },
        )
        t0 = time.perf_counter()
        trainer = GCPOLoopTrainer(cfg)
        load = time.perf_counter() - t0
        return load, [trainer.train_step(s)[0] for s in range(1, steps + 1)]


def _interleaved(config_path: str, name: str, variants, steps: int, overrides: dict) -> dict:
    """{variant: (load seconds, log rows)} with the variants' trainers stepped in turn."""
    from gcpo_train.config import load_config
    from gcpo_train.loop.trainer import GCPOLoopTrainer

    trainers, loads, logs = {}, {}, {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as out:
        for v in variants:
            cfg = load_config(
                config_path,
                {
                    **overrides,
                    **VARIANTS[v],
                    "modulator": name,
                    "steps": steps,
                    "output_dir": f"{out}/{v}",
                    "checkpoint_every": 0,
                    "progress": False,
                    "save_rollouts": False,
                },
            )
            t0 = time.perf_counter()
            trainers[v] = GCPOLoopTrainer(cfg)
            loads[v] = time.perf_counter() - t0
        for s in range(1, steps + 1):
            for v in variants:
                logs[v].append(trainers[v].train_step(s)[0])
    return {v: (loads[v], logs[v]) for v in variants}


def bench(config_path: str, modulators, steps: int, overrides: dict, variants=("default",)) -> list[dict]:
    import numpy as np

    rows = []
    for name in modulators:
        runs = (
            _interleaved(config_path, name, variants, steps, overrides)
            if len(variants) > 1
            else {variants[0]: _time_steps(config_path, name, variants[0], steps, overrides)}
        )
        for variant in variants:
            load, logs = runs[variant]
            timed = logs[1:] if len(logs) > 1 else logs
            row = {
                "modulator": name if variant == "default" else f"{name} {variant}",
                "load_s": load,
                "steps": len(timed),
            }
            row.update({k: float(np.mean([r.get(k, 0.0) for r in timed])) for k in STAGES})
            row["measure_share_%"] = 100 * row["time_measure"] / row["time_total"]
            row["peak_rss_MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            rows.append(row)
            print(
                f"# {row['modulator']}: {row['time_total']:.2f} s/step, modulation {row['measure_share_%']:.1f}%",
                flush=True,
            )
    return rows


def markdown(rows) -> str:
    cols = ["modulator", "steps"] + [s.replace("time_", "") for s in STAGES] + ["measure_share_%", "peak_rss_MB"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        vals = (
            [r["modulator"], str(r["steps"])]
            + [f"{r[s]:.2f}" for s in STAGES]
            + [f"{r['measure_share_%']:.1f}", f"{r['peak_rss_MB']:.0f}"]
        )
        lines.append("| " + " | ".join(vals) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    from gcpo_train.overrides import add_override_flags, overrides_from

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs" / "cpu_smoke.yaml"))
    ap.add_argument("--steps", type=int, default=3, help="steps per modulator (the first is warm-up)")
    ap.add_argument("--modulators", nargs="+", default=["none", "cd", "bot", "se", "rd", "cd_rd"])
    # gcpo train's overrides (--<field> V, --set FIELD=V) but for this benchmark's own --steps, --track-gradvar
    add_override_flags(ap, skip=("steps", "track_gradvar"))
    ap.add_argument(
        "--track-gradvar",
        "--track_gradvar",
        action="store_true",
        help="also time each modulator without prompt sharing, with and without track_gradvar",
    )
    ap.add_argument(
        "--track-full",
        "--track_full",
        action="store_true",
        help="with --track-gradvar: also time track_gradvar: full (the study's V over all parameters)",
    )
    args = ap.parse_args(argv)
    overrides = overrides_from(args)
    import torch

    print(f"torch threads: {torch.get_num_threads()}; config {args.config}; overrides {overrides}")
    variants = (
        tuple(v for v in VARIANTS if args.track_full or v != "track_full") if args.track_gradvar else ("default",)
    )
    rows = bench(args.config, args.modulators, args.steps, overrides, variants)
    print(markdown(rows))
    if args.track_gradvar:
        for name in args.modulators:
            by = {r["modulator"]: r for r in rows}
            base, shared_tracked = by[name], by[f"{name} track"]
            plain, tracked = by[f"{name} unshared"], by[f"{name} unshared+track"]
            print(
                f"# {name}: tracked step / default step = {shared_tracked['time_total'] / base['time_total']:.2f}x "
                f"(forward_backward {base['time_forward_backward']:.2f} -> "
                f"{shared_tracked['time_forward_backward']:.2f} s, Gram work {shared_tracked['time_gradvar']:.2f} s, "
                f"per-rollout prompt passes {shared_tracked['time_gradvar_prompt']:.2f} s); "
                f"unshared: tracked / untracked = {tracked['time_total'] / plain['time_total']:.2f}x "
                f"(forward_backward {plain['time_forward_backward']:.2f} -> {tracked['time_forward_backward']:.2f} s, "
                f"Gram work {tracked['time_gradvar']:.2f} s)"
            )
            if f"{name} track_full" in by:
                full = by[f"{name} track_full"]
                print(
                    f"# {name}: track_gradvar full / default step = {full['time_total'] / base['time_total']:.2f}x "
                    f"(forward_backward {full['time_forward_backward']:.2f} s, Gram work {full['time_gradvar']:.2f} s, "
                    f"the study's V pass {full['time_gradvar_full']:.2f} s)"
                )


if __name__ == "__main__":
    main()
