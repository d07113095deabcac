"""Seconds per GRPO step and peak memory, one workload per prompt length, engines interleaved:

    python bench/trl_step.py                  # 1 round x 2 prompt lengths x 4 engines x 3 steps
    python bench/trl_step.py --rounds 2 --steps 6 --prompts cpu_smoke --engines trl,gcpotrainer

Workload (issues "GCPO inside TRL" and 17): the packaged SmolLM2-135M-Instruct, G = 8, one group
per step, 32 new tokens, LoRA r = 8 on q_proj/v_proj, beta = 0.002 (TRL's reference pass by
disabled adapters), fp32, no gradient checkpointing. Prompt-length axis (``--prompts``):
``cpu_smoke`` (configs/cpu_smoke.yaml: NarrativeQA with 96-token passages) and ``nqa512``
(the same questions with 512-token passages). Engines: ``trl.GRPOTrainer`` (plain GRPO),
``GCPOTrainer`` with BoT and ``share_prompt`` on (each group's prompt runs once in generation's
prefill and in TRL's log-prob passes) and off (TRL's passes), gcpo's own loop (``gcpo_train``,
BoT); ``gcpo_train_plain`` is our loop without its shared prompt; ``gcpo_train_onednn`` and
``gcpo_train_bf16`` sample with ``sampling_kernels`` (bench/sampling.py times the sampler alone). Targets:
GCPOTrainer (share_prompt) <= 0.7x TRL on cpu_smoke, <= 0.4x on nqa512, and a lower memory peak.

Every run is its own process (so its peak RSS is its own: ``ru_maxrss``; on a GPU
``torch.cuda.max_memory_allocated``), runs are interleaved (round 1: each engine in turn on every
workload, then round 2...) so a machine whose speed drifts (a shared 2-core box) slows every
engine alike; each number is the median over the measured steps (step 1 is warm-up). The phase
split: generation (sampling only), the rest of TRL's ``_generate_and_score_completions``
(rewards, reference log-probs, GCPO's weights) and the optimisation (forward, backward, step).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {
    "trl": "trl.GRPOTrainer (GRPO)",
    "gcpotrainer": "GCPOTrainer (BoT), share_prompt",
    "gcpotrainer_plain": "GCPOTrainer (BoT), share_prompt off",
    "gcpo_train": "gcpo_train (BoT)",
    "gcpo_train_plain": "gcpo_train (BoT), share_prompt off",
    "gcpo_train_onednn": "gcpo_train (BoT), sampling_kernels onednn",
    "gcpo_train_bf16": "gcpo_train (BoT), sampling_kernels bf16",
}
PROMPTS = {"cpu_smoke": {}, "nqa512": dict(max_context_tokens=512, max_prompt_tokens=1024)}


def rss_mib() -> float:
    """The process's resident memory now (MiB), from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_mib() -> float:
    """The process's peak: CUDA's allocator peak on a GPU, else the peak RSS (``ru_maxrss``, KiB on Linux)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def workload(out_dir: str, steps: int, modulator: str, backend: str, **extra):
    from gcpo_train.config import load_config

    return load_config(
        ROOT / "configs" / "cpu_smoke.yaml",
        dict(
            output_dir=out_dir,
            steps=steps,
            group_size=8,
            queries_per_step=1,
            max_new_tokens=32,
            lora_r=8,
            lora_alpha=16,
            lora_target_modules=["q_proj", "v_proj"],
            beta=0.002,
            dtype="float32",
            gradient_checkpointing=False,
            modulator=modulator,
            backend=backend,
            checkpoint_every=0,
            progress=False,
            tensorboard=False,
            micro_batch_size=8,
            save_rollouts=False,
            **extra,
        ),
    )


def time_trl(cfg, gcpo: bool, share_prompt: bool = True) -> list[dict]:
    """Per step: total, generation (``_generate_single_turn``), generate-and-score, GCPO weights."""
    from transformers import TrainerCallback

    from gcpo_train.trl.backend import build_trl_trainer

    extra = {} if not gcpo else {"share_prompt": share_prompt}
    trainer = build_trl_trainer(cfg, plain_trl=not gcpo, logging_steps=1, save_strategy="no", **extra)
    steps, current = [], {}
    prompt_tokens = []
    generate_single_turn = trainer._generate_single_turn

    def counting(prompt_ids, *args, **kwargs):
        prompt_tokens.extend(len(p) for p in prompt_ids)
        return generate_single_turn(prompt_ids, *args, **kwargs)

    trainer._generate_single_turn = counting

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
            steps.append(
                dict(
                    total=total,
                    generate=current.get("generate", 0.0),
                    score=current.get("generate_and_score", 0.0) - current.get("generate", 0.0),
                    optimise=total - current.get("generate_and_score", 0.0),
                )
            )

    trainer.add_callback(StepClock())
    rss0 = rss_mib()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    logs = trainer.state.log_history
    weights = [t for h in logs for k, t in h.items() if k == "gcpo/time_weights"]
    for row, w in zip(steps, weights):
        row["gcpo_weights"] = w
    shared = [h["gcpo/shared_prompt"] for h in logs if "gcpo/shared_prompt" in h]
    for row in steps:
        row.update(
            rss_start=rss0,
            prompt_tokens=statistics.mean(prompt_tokens) if prompt_tokens else float("nan"),
            shared_prompt=statistics.mean(shared) if shared else float("nan"),
        )
    return steps


def time_gcpo(cfg) -> list[dict]:
    from gcpo_train.loop.trainer import GCPOLoopTrainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GCPOLoopTrainer(cfg)
        rss0 = rss_mib()
        rows = trainer.train()
    return [
        dict(
            total=r["time_total"],
            generate=r["time_generate"],
            score=r["time_reward"] + r["time_logprobs"] + r["time_measure"],
            optimise=r["time_forward_backward"] + r["time_step"],
            gcpo_weights=r["time_measure"],
            rss_start=rss0,
        )
        for r in rows
    ]


def one_run(engine: str, prompts: str, steps: int, out_dir: str) -> dict:
    """One engine on one workload in this process: its steps and its memory peak."""
    extra = PROMPTS[prompts]
    run = {
        "trl": lambda: time_trl(workload(out_dir, steps, "none", "trl", **extra), gcpo=False),
        "gcpotrainer": lambda: time_trl(workload(out_dir, steps, "bot", "trl", **extra), gcpo=True),
        "gcpotrainer_plain": lambda: time_trl(
            workload(out_dir, steps, "bot", "trl", **extra), gcpo=True, share_prompt=False
        ),
        "gcpo_train": lambda: time_gcpo(workload(out_dir, steps, "bot", "gcpo", **extra)),
        "gcpo_train_plain": lambda: time_gcpo(workload(out_dir, steps, "bot", "gcpo", share_prompt=False, **extra)),
        "gcpo_train_onednn": lambda: time_gcpo(
            workload(out_dir, steps, "bot", "gcpo", sampling_kernels="onednn", **extra)
        ),
        "gcpo_train_bf16": lambda: time_gcpo(workload(out_dir, steps, "bot", "gcpo", sampling_kernels="bf16", **extra)),
    }
    rows = run[engine]()
    return dict(steps=rows, peak_mib=peak_mib())


def time_passes(prompts: str, share: bool, out_dir: str) -> dict:
    """``--passes``: TRL's two log-prob passes on one group of the workload (its first prompt, G = 8
    rows, 32 completion tokens), through GCPOTrainer's hook with ``share_prompt`` on or off (off is
    TRL's own pass): the reference pass (no gradient, LoRA adapters disabled, TRL's chunk of 8) and
    the training forward with entropies plus its backward. Wall and process CPU seconds (one
    torch thread: CPU seconds are the work, robust to a shared machine)."""
    import torch
    from trl.trainer.utils import use_adapter

    from gcpo_train.trl.backend import build_trl_trainer

    torch.set_num_threads(1)
    trainer = build_trl_trainer(
        workload(out_dir, 1, "none", "trl", **PROMPTS[prompts]), logging_steps=1, save_strategy="no", share_prompt=share
    )
    tok, model = trainer.processing_class, trainer.model.train()
    prompt_ids = torch.tensor(tok(trainer.train_dataset[0]["prompt"], add_special_tokens=False)["input_ids"])
    G, T = 8, 32
    completions = torch.randint(10, len(tok), (G, T), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([prompt_ids.expand(G, -1), completions], dim=1)
    mask = torch.ones_like(ids)
    hook = trainer._get_per_token_logps_and_entropies
    with torch.no_grad():
        hook(model, ids[:2, -T - 4 :], mask[:2, -T - 4 :], T)  # warm-up (lazy initialisation), small
    rows, rss0 = {}, rss_mib()

    def clock(name, fn):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        rows[name] = dict(wall=time.perf_counter() - t0, cpu=time.process_time() - c0)

    def reference():
        with torch.no_grad(), use_adapter(model, None):
            hook(model, ids, mask, T, batch_size=G)

    def training():
        logps, _, _ = hook(model, ids, mask, T, compute_entropy=True)
        logps.sum().backward()

    clock("reference", reference)
    clock("training", training)
    shared = trainer._metrics["train"]["gcpo/shared_prompt"]
    return dict(
        passes=rows,
        prompt_tokens=int(prompt_ids.numel()),
        rss_start=rss0,
        peak_mib=peak_mib(),
        shared=float(statistics.mean(shared[1:])),
    )


def passes_table(args) -> None:
    """``--passes``: every (workload, share_prompt) in its own process, interleaved."""
    print(
        "| prompts | log-prob pass | reference (no grad) s | training fwd+bwd s | CPU s, both | vs TRL "
        "| peak RSS MiB | RSS added by the passes MiB | shared |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for w in args.prompts.split(","):
            ref_cpu = None
            for share in (False, True):
                cmd = [
                    sys.executable,
                    __file__,
                    "--one-passes",
                    w,
                    "--share",
                    str(int(share)),
                    "--out",
                    f"{tmp}/{w}{share}",
                ]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    raise RuntimeError(f"passes {w} share={share} failed:\n{done.stderr[-3000:]}")
                got = json.loads(done.stdout.strip().splitlines()[-1])
                p = got["passes"]
                cpu = p["reference"]["cpu"] + p["training"]["cpu"]
                ref_cpu = ref_cpu or cpu
                name = "GCPOTrainer, share_prompt" if share else "TRL's own (share_prompt off)"
                print(
                    f"| {w} ({got['prompt_tokens']} tok) | {name} | {p['reference']['wall']:.2f} "
                    f"({p['reference']['cpu']:.2f} CPU) | {p['training']['wall']:.2f} ({p['training']['cpu']:.2f} CPU) "
                    f"| {cpu:.2f} | {cpu / ref_cpu:.2f}x | {got['peak_mib']:.0f} | {got['peak_mib'] - got['rss_start']:.0f} "
                    f"| {got['shared']:.0f} |",
                    flush=True,
                )


def run_in_subprocess(engine: str, prompts: str, steps: int, out_dir: str) -> dict:
    cmd = [sys.executable, __file__, "--one", engine, "--prompts", prompts, "--steps", str(steps), "--out", out_dir]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{engine} on {prompts} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="steps per run; step 1 is warm-up and not counted")
    ap.add_argument("--rounds", type=int, default=1, help="times each engine runs, interleaved with the others")
    ap.add_argument(
        "--engines",
        default="trl,gcpotrainer,gcpotrainer_plain,gcpo_train",
        help="comma-separated subset of " + ", ".join(ENGINES),
    )
    ap.add_argument("--prompts", default="cpu_smoke,nqa512", help="comma-separated subset of " + ", ".join(PROMPTS))
    ap.add_argument(
        "--passes",
        action="store_true",
        help="time only TRL's two log-prob passes of one group, "
        "share_prompt off (TRL's) and on, CPU seconds (for a machine too busy for whole steps)",
    )
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one run, JSON on stdout
    ap.add_argument("--one-passes", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--share", default="1", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.prompts, args.steps, args.out)))
        return
    if args.one_passes:
        print(json.dumps(time_passes(args.one_passes, args.share == "1", args.out)))
        return
    if args.passes:
        return passes_table(args)
    import torch

    engines, workloads = args.engines.split(","), args.prompts.split(",")
    measured = {(w, e): dict(steps=[], peaks=[]) for w in workloads for e in engines}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for e in engines:  # engine-major, so the first engines' pairs are complete early
                for w in workloads:
                    got = run_in_subprocess(e, w, args.steps, f"{tmp}/{w}_{e}_{r}")
                    steps = got["steps"]
                    measured[(w, e)]["steps"] += steps[1:] if len(steps) > 1 else steps
                    measured[(w, e)]["peaks"].append(got["peak_mib"])
                    split = {
                        k: round(statistics.median(s[k] for s in steps[1:] or steps), 2)
                        for k in ("total", "generate", "score", "optimise", "gcpo_weights")
                        if k in steps[0]
                    }
                    print(
                        f"round {r + 1} {w} {ENGINES[e]}: steps {[round(s['total'], 2) for s in steps]}, "
                        f"measured {split}, peak {got['peak_mib']:.0f} MiB, "
                        f"prompt tokens {steps[0].get('prompt_tokens', float('nan')):.0f}",
                        flush=True,
                    )

    def median(rows, key):
        values = [row[key] for row in rows if key in row and row[key] == row[key]]
        return statistics.median(values) if values else float("nan")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(
        f"\n{device}, {torch.get_num_threads()} torch threads; median of steps 2-{args.steps} over {args.rounds} "
        f"interleaved round(s); peak = {'max_memory_allocated' if device == 'cuda' else 'peak RSS'} of the run's process\n"
    )
    print(
        "| prompts | engine | s/step | vs TRL | generation | rewards, ref log-probs, weights | forward, backward, step "
        "| GCPO weights | peak MiB | vs TRL | shared |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w in workloads:
        ref = measured.get((w, "trl"))
        ref_t = median(ref["steps"], "total") if ref else float("nan")
        ref_m = max(ref["peaks"]) if ref else float("nan")
        tokens = median([s for e in engines for s in measured[(w, e)]["steps"]], "prompt_tokens")
        for e in engines:
            rows, peak = measured[(w, e)]["steps"], max(measured[(w, e)]["peaks"])
            t = median(rows, "total")
            shared = median(rows, "shared_prompt")
            print(
                f"| {w} ({tokens:.0f} tok) | {ENGINES[e]} | {t:.2f} | {t / ref_t:.2f}x | {median(rows, 'generate'):.2f} "
                f"| {median(rows, 'score'):.2f} | {median(rows, 'optimise'):.2f} | {median(rows, 'gcpo_weights'):.2f} "
                f"| {peak:.0f} | {peak / ref_m:.2f}x | {'' if shared != shared else f'{shared:.2f}'} |"
            )


if __name__ == "__main__":
    main()
