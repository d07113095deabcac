"""Seconds per GRPO step, one identical workload, three engines, runs interleaved:

    python bench/trl_step.py                  # 2 rounds x 3 engines x 6 steps (median of steps 3-6 of every run)
    python bench/trl_step.py --rounds 1 --steps 4 --engines gcpo_train

Workload (issue "GCPO inside TRL"): the packaged SmolLM2-135M-Instruct, the prompts of
configs/cpu_smoke.yaml, G = 8, one group per step, 32 new tokens, LoRA r = 8 on q_proj/v_proj,
beta = 0.002, fp32, no gradient checkpointing. Engines: ``trl.GRPOTrainer`` (plain GRPO),
``gcpo_train.trl.GCPOTrainer`` with BoT, and gcpo's own loop (``gcpo_train``) with BoT; with
``--engines ...,gcpo_train_plain`` also our loop without its shared-prompt forward (the plain
full-sequence passes TRL makes). The targets are GCPOTrainer <= 1.05x TRL (the measurement
overhead) and gcpo_train <= 0.8x TRL.

Runs are interleaved (round 1: TRL, GCPOTrainer, gcpo_train; round 2: the same again...) so a
machine whose speed drifts during the benchmark (a shared 2-core box) slows every engine alike;
each engine's number is the median over all its measured steps. The phase table splits a step
into generation (sampling only), the rest of TRL's ``_generate_and_score_completions``
(rewards, reference log-probs, GCPO's weights) and the optimisation (forward, backward, step).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {"trl": "trl.GRPOTrainer (GRPO)", "gcpotrainer": "GCPOTrainer (BoT)", "gcpo_train": "gcpo_train (BoT)",
           "gcpo_train_plain": "gcpo_train (BoT), share_prompt off"}


def workload(out_dir: str, steps: int, modulator: str, backend: str, **extra):
    from gcpo_train.config import load_config

    return load_config(ROOT / "configs" / "cpu_smoke.yaml", dict(
        output_dir=out_dir, steps=steps, group_size=8, queries_per_step=1, max_new_tokens=32, lora_r=8,
        lora_alpha=16, lora_target_modules=["q_proj", "v_proj"], beta=0.002, dtype="float32",
        gradient_checkpointing=False, modulator=modulator, backend=backend, checkpoint_every=0,
        progress=False, tensorboard=False, micro_batch_size=8, save_rollouts=False, **extra))


def time_trl(cfg, gcpo: bool) -> list[dict]:
    """Per step: total, generation (``_generate_single_turn``), generate-and-score, GCPO weights."""
    from transformers import TrainerCallback

    from gcpo_train.trl_backend import build_trl_trainer

    trainer = build_trl_trainer(cfg, plain_trl=not gcpo, logging_steps=1, save_strategy="no")
    steps, current = [], {}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                current[name] = current.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    trainer._generate_single_turn = timed("generate", trainer._generate_single_turn)
    trainer._generate_and_score_completions = timed("generate_and_score", trainer._generate_and_score_completions)

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            current.clear()
            current["t0"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            total = time.perf_counter() - current.pop("t0")
            steps.append(dict(total=total, generate=current.get("generate", 0.0),
                              score=current.get("generate_and_score", 0.0) - current.get("generate", 0.0),
                              optimise=total - current.get("generate_and_score", 0.0)))

    trainer.add_callback(StepClock())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    weights = [t for h in trainer.state.log_history for k, t in h.items() if k == "gcpo/time_weights"]
    for row, w in zip(steps, weights):
        row["gcpo_weights"] = w
    return steps


def time_gcpo(cfg) -> list[dict]:
    from gcpo_train.trainer import GRPOTrainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = GRPOTrainer(cfg).train()
    return [dict(total=r["time_total"], generate=r["time_generate"],
                 score=r["time_reward"] + r["time_logprobs"] + r["time_measure"],
                 optimise=r["time_forward_backward"] + r["time_step"], gcpo_weights=r["time_measure"])
            for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6, help="steps per run; steps 1-2 are warm-up and not counted")
    ap.add_argument("--rounds", type=int, default=2, help="times each engine runs, interleaved with the others")
    ap.add_argument("--engines", default="trl,gcpotrainer,gcpo_train",
                    help="comma-separated subset of " + ", ".join(ENGINES))
    args = ap.parse_args()
    import torch

    measured = {ENGINES[k]: [] for k in args.engines.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        run = {"trl": lambda d: time_trl(workload(d, args.steps, "none", "trl"), gcpo=False),
               "gcpotrainer": lambda d: time_trl(workload(d, args.steps, "bot", "trl"), gcpo=True),
               "gcpo_train": lambda d: time_gcpo(workload(d, args.steps, "bot", "gcpo")),
               "gcpo_train_plain": lambda d: time_gcpo(workload(d, args.steps, "bot", "gcpo", share_prompt=False))}
        for r in range(args.rounds):
            for key in args.engines.split(","):
                steps = run[key](f"{tmp}/{key}_{r}")
                measured[ENGINES[key]] += steps[2:] if len(steps) > 2 else steps
                print(f"round {r + 1} {ENGINES[key]}: steps {[round(s['total'], 2) for s in steps]}", flush=True)

    def median(rows, key):
        values = [row[key] for row in rows if key in row]
        return statistics.median(values) if values else float("nan")

    ref = median(measured.get(ENGINES["trl"], []), "total")
    print(f"\n{torch.get_num_threads()} torch threads; median of steps 3-{args.steps} over {args.rounds} "
          f"interleaved round(s)\n")
    print("| engine | s/step | vs TRL | generation | rewards, ref log-probs, weights | forward, backward, step | GCPO weights |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in measured.items():
        t = median(rows, "total")
        print(f"| {name} | {t:.2f} | {t / ref:.2f}x | {median(rows, 'generate'):.2f} | {median(rows, 'score'):.2f} "
              f"| {median(rows, 'optimise'):.2f} | {median(rows, 'gcpo_weights'):.2f} |")


if __name__ == "__main__":
    main()
