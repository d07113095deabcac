"""GPU-hours per arm of the paper's protocol (configs/compare/*.yaml), estimated from first
principles; writes the table that docs/guides/compare.md includes.

    python scripts/compute_estimate.py            # print the table
    python scripts/compute_estimate.py --write    # rewrite configs/compare/compute_estimate.md

Nothing here is measured on a GPU: every constant is an assumption named in ``ASSUMPTIONS`` (and
printed under the table). Per training step, with Q queries, G rollouts, P prompt and C completion
tokens (C at its cap, max_new_tokens: an upper bound) and N the policy's parameters:

- tokens T = Q·G·(P + C);
- policy forward + backward 6·N·T (LoRA needs no weight gradient of the frozen weights, ~4·N·T, so
  this is an upper bound), the recomputed forward 2·N·T under gradient_checkpointing, the
  reference pass 2·N·T when beta > 0, an old-policy pass 2·N·T when num_iterations > 1 — at
  MFU × the H100's dense bf16 peak;
- generation: 2·N·T FLOPs, but decoding is latency-bound (one launch-bound step of a 28-layer model
  per token for the whole batch), so its time is max(2·N·T / (MFU·peak), C·t_decode);
- the arm's measures: embeddings 2·N_emb·Q·G·L and NLI clustering 2·N_nli·pairs·2L, pairs at most
  Q·G(G−1)/2 (every response its own cluster), L the embedded text's tokens (the extracted answer
  for QA, the full completion capped at the encoder's 512 for math);
- held-out evaluation every eval_every steps: ⌈eval_n / 8⌉ greedy batches (gcpo's evaluate) of C
  decode steps each. The base policy's evaluation (once per comparison) is not counted.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "configs" / "compare" / "compute_estimate.md"

ASSUMPTIONS = {
    "peak_flops": (989e12, "H100 SXM dense bf16 peak, FLOP/s"),
    "mfu": (0.35, "model FLOPs utilisation of the training, reference and measure passes"),
    "t_decode": (
        0.020,
        "seconds per decode step of transformers' generate (1.5B, 28 layers, eager, launch-bound; "
        "streaming the 3.1 GB of bf16 weights alone takes ~1 ms at 3.35 TB/s)",
    ),
    "qa_prompt_extra": (
        80,
        "prompt tokens beyond the passage budget (question, instruction, chat template; the "
        "packaged NarrativeQA prompts measured 322 tokens at a 256-token budget with SmolLM2's "
        "template, Qwen's default system prompt adds ~15)",
    ),
    "math_prompt": (200, "prompt tokens of a math problem with its instruction and chat template"),
    "qa_answer": (16, "tokens of an extracted QA answer (what QA arms embed and cluster)"),
    "encoder_max": (512, "longest text the embedder / NLI model reads (math completions are cut there)"),
}
PARAMS = {  # parameters that cost FLOPs per token (tied embeddings counted once, as the output projection)
    "Qwen/Qwen2.5-1.5B-Instruct": 1.54e9,
    "nli:roberta-large-mnli": 355e6,
    "all-MiniLM-L6-v2": 22.7e6,
}
MATH = ("math500", "olympiadbench")


def value(key: str) -> float:
    return ASSUMPTIONS[key][0]


def arm_hours(cfg, settings, arm: str) -> dict:
    """The estimate for one arm-seed run of the comparison config ``cfg`` (a TrainConfig)."""
    from gcpo_analysis.measures.modulators import MODULATORS
    from gcpo_analysis.vocab import CLUSTERS, EMBEDDINGS

    if cfg.model not in PARAMS:
        raise ValueError(f"no parameter count for model {cfg.model!r}; add it to PARAMS")
    N, Q, G, C = PARAMS[cfg.model], cfg.queries_per_step, cfg.group_size, cfg.max_new_tokens
    math_task = cfg.dataset in MATH
    P = value("math_prompt") if math_task else cfg.max_context_tokens + value("qa_prompt_extra")
    T = Q * G * (P + C)
    rate = value("mfu") * value("peak_flops")
    passes = 6 + 2 * cfg.gradient_checkpointing + 2 * (cfg.beta > 0) + 2 * (cfg.num_iterations > 1)
    train = passes * N * T
    generate = max(2 * N * T / rate, C * value("t_decode"))
    L = min(C, value("encoder_max")) if math_task else value("qa_answer")
    needs = MODULATORS[arm].needs - MODULATORS[arm].optional_needs
    measures = 0.0
    if EMBEDDINGS in needs:
        measures += 2 * PARAMS["all-MiniLM-L6-v2"] * Q * G * L
    if CLUSTERS in needs and cfg.judge.startswith("nli:"):
        measures += 2 * PARAMS[cfg.judge] * Q * G * (G - 1) / 2 * min(2 * L, value("encoder_max"))
    step = train / rate + generate + measures / rate
    evals = cfg.steps // settings["eval_every"] if settings["eval_every"] else 1
    C_eval = cfg.eval_max_new_tokens or C
    eval_s = evals * math.ceil(settings["eval_n"] / 8) * C_eval * value("t_decode")
    return {
        "P": P,
        "C": C,
        "tokens": T,
        "tflop_step": (train + 2 * N * T + measures) / 1e12,
        "s_step": step,
        "train_h": step * cfg.steps / 3600,
        "eval_h": eval_s / 3600,
        "h": (step * cfg.steps + eval_s) / 3600,
    }


def table(configs=None) -> str:
    """The markdown table: one row per comparison config, GPU-hours per arm-seed for each arm."""
    from gcpo_train.compare.settings import load_compare_config

    configs = configs or sorted((ROOT / "configs" / "compare").glob("*.yaml"))
    rows, arms = [], None
    for path in configs:
        cfg, settings = load_compare_config(path)
        if arms not in (None, settings["modulators"]):
            raise ValueError(f"{path}: arms {settings['modulators']} differ from the other configs' {arms}")
        arms = settings["modulators"]
        est = {arm: arm_hours(cfg, settings, arm) for arm in arms}
        base = est[arms[0]]
        total = sum(e["h"] for e in est.values()) * len(settings["seeds"])
        rows.append(
            f"| {cfg.dataset} | {base['P']:.0f} + {base['C']} | {base['tokens']:,} | {base['tflop_step']:.0f} | "
            f"{base['s_step']:.1f} | {base['eval_h']:.2f} | "
            + " | ".join(f"{est[a]['h']:.1f}" for a in arms)
            + f" | {total:.0f} |"
        )
    assert arms is not None
    head = (
        "| benchmark | tokens P + C | tokens / step | TFLOP / step | s / step | eval h per run | "
        + " | ".join(f"`{a}`" for a in arms)
        + " | all arms × seeds |"
    )
    lines = [
        "GPU-hours on one H100 per arm-seed run (2,000 steps and its held-out evaluations) for each arm, and for",
        "the whole comparison (every arm × 3 seeds); estimated, not measured. TFLOP and seconds per step are",
        f"`{arms[0]}`'s (the other arms add only their measures). Evaluations count `eval_n` queries: a smaller",
        "held-out split (OlympiadBench's 20%) costs less.",
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
        *rows,
        "",
        "Assumptions (`scripts/compute_estimate.py`):",
        "",
    ]
    lines += [f"- `{k}` = {v:g}: {why}" for k, (v, why) in ASSUMPTIONS.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", action="store_true", help=f"rewrite {OUT.relative_to(ROOT)}")
    args = p.parse_args(argv)
    text = table()
    if args.write:
        OUT.write_text(text)
        print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
