"""How far GCPOTrainer's shared-prompt passes (``share_prompt``) are from TRL's own, in fp32 and bf16.

    python bench/record.py bench/trl_rounding.py [--steps 6] [--family qwen2]

Trains a tiny random model (``gcpo_analysis.tiny_models``, no network) with ``modulator="none"``,
beta = 0.04 and ``num_iterations`` = 2, once with ``share_prompt=False`` (TRL's passes) and once
with ``share_prompt=True``, from the same seed, and prints per dtype the largest |delta| of the
logged kl and grad_norm over the steps next to the largest ones. Its record,
bench/results/trl_rounding.md, is what docs/guides/trl.md includes for ``share_prompt``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import warnings


def run(model_dir: str, out: str, share: bool, bf16: bool, steps: int) -> list[dict]:
    from datasets import Dataset
    from transformers import AutoTokenizer

    from gcpo_train.trl import GCPOConfig, GCPOTrainer

    def reward(completions, **kwargs):  # dense and deterministic, on [0, 2): groups rarely tie
        return [sum(map(ord, c)) % 7 / 3.5 for c in completions]

    reward.reward_bounds = (0.0, 2.0)  # type: ignore[attr-defined]
    prompts = ["who is the king ?", "where is the house of the man who was the king ?", "the war ?", "what did"]
    args = GCPOConfig(
        output_dir=out,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=steps,
        num_iterations=2,
        beta=0.04,
        logging_steps=1,
        seed=0,
        learning_rate=1e-2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        bf16=bf16,
        gradient_checkpointing=False,
        disable_dropout=True,
        modulator="none",
        share_prompt=share,
    )
    trainer = GCPOTrainer(
        model=model_dir,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts * 8}),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):  # the record is the table only
        warnings.simplefilter("ignore")
        trainer.train()
    return [h for h in trainer.state.log_history if "kl" in h]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--family", default="qwen2", help="tiny_causal_lm family: llama, qwen2, gpt2")
    a = ap.parse_args(argv)
    from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tok = tiny_tokenizer()
        tiny_causal_lm(a.family, vocab_size=len(tok), seed=0).save_pretrained(tmp + "/model")
        tok.save_pretrained(tmp + "/model")
        print(f"tiny random {a.family}, {a.steps} steps, beta 0.04, num_iterations 2, modulator none, CPU\n")
        print("| dtype | max kl | max \\|Δ kl\\| | max grad_norm | max \\|Δ grad_norm\\| |")
        print("|---|---:|---:|---:|---:|")
        for bf16 in (False, True):
            plain = run(tmp + "/model", tmp + "/plain", False, bf16, a.steps)
            shared = run(tmp + "/model", tmp + "/shared", True, bf16, a.steps)
            if max(abs(p["kl"]) for p in plain) == 0:
                raise SystemExit("kl stayed 0: no gradient reached the policy, nothing measured")
            dk = max(abs(p["kl"] - s["kl"]) for p, s in zip(plain, shared))
            dg = max(abs(p["grad_norm"] - s["grad_norm"]) for p, s in zip(plain, shared))
            kl = max(abs(p["kl"]) for p in plain)
            gn = max(abs(p["grad_norm"]) for p in plain)
            print(f"| {'bf16' if bf16 else 'fp32'} | {kl:.3g} | {dk:.2g} | {gn:.3g} | {dg:.2g} |", flush=True)


if __name__ == "__main__":
    main()
