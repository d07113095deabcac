"""Seconds per GRPO step, one identical workload, three engines:

    python bench/trl_step.py            # 8 steps each, median of steps 3-8
    python bench/trl_step.py --steps 4  # quicker look (median of steps 3-4)

Workload (issue "GCPO inside TRL"): the packaged SmolLM2-135M-Instruct, the prompts of
configs/cpu_smoke.yaml, G = 8, one group per step, 32 new tokens, LoRA r = 8 on q_proj/v_proj,
beta = 0.002, fp32, no gradient checkpointing. Engines: ``trl.GRPOTrainer`` (plain GRPO),
``gcpo_train.trl.GCPOTrainer`` with BoT, and gcpo's own loop (``gcpo_train``) with BoT. The
measurement overhead of GCPO inside TRL is GCPOTrainer / TRL; the targets are <= 1.05x for
it and <= 0.8x TRL for gcpo's own loop.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def workload(out_dir: str, steps: int, modulator: str, backend: str):
    from gcpo_train.config import load_config

    return load_config(ROOT / "configs" / "cpu_smoke.yaml", dict(
        output_dir=out_dir, steps=steps, group_size=8, queries_per_step=1, max_new_tokens=32, lora_r=8,
        lora_alpha=16, lora_target_modules=["q_proj", "v_proj"], beta=0.002, dtype="float32",
        gradient_checkpointing=False, modulator=modulator, backend=backend, checkpoint_every=0,
        progress=False, tensorboard=False, micro_batch_size=8, save_rollouts=False))


def time_trl(cfg, gcpo: bool) -> list[float]:
    from transformers import TrainerCallback

    from gcpo_train.trl_backend import build_trl_trainer

    class StepClock(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], None

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

    trainer = build_trl_trainer(cfg, plain_trl=not gcpo, logging_steps=1, save_strategy="no")
    clock = StepClock()
    trainer.add_callback(clock)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return clock.times


def time_gcpo(cfg) -> list[float]:
    from gcpo_train.trainer import GRPOTrainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = GRPOTrainer(cfg).train()
    return [r["time_total"] for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--engines", default="trl,gcpotrainer,gcpo_train",
                    help="comma-separated subset of trl, gcpotrainer, gcpo_train")
    args = ap.parse_args()
    import torch

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = [("trl.GRPOTrainer (GRPO)", lambda: time_trl(workload(f"{tmp}/a", args.steps, "none", "trl"), gcpo=False)),
                ("GCPOTrainer (BoT)", lambda: time_trl(workload(f"{tmp}/b", args.steps, "bot", "trl"), gcpo=True)),
                ("gcpo_train (BoT)", lambda: time_gcpo(workload(f"{tmp}/c", args.steps, "bot", "gcpo")))]
        keys = dict(zip(("trl", "gcpotrainer", "gcpo_train"), runs))
        for key in args.engines.split(","):
            name, fn = keys[key]
            times = fn()
            results[name] = statistics.median(times[2:] if len(times) > 2 else times)
            print(f"{name}: steps {[round(t, 2) for t in times]}", flush=True)
    ref = results.get("trl.GRPOTrainer (GRPO)", float("nan"))
    print(f"\n{torch.get_num_threads()} torch threads, median of steps 3-{args.steps}\n")
    print("| engine | s/step | vs TRL |")
    print("|---|---:|---:|")
    for name, sec in results.items():
        print(f"| {name} | {sec:.2f} | {sec / ref:.2f}x |")


if __name__ == "__main__":
    main()
