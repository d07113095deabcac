"""Try a math prompt setting on the first queries of a study sample before paying for V.

    python scripts/math_pilot.py --template math_one_shot --max-int-answer 10 --temperature 0.7

Samples G completions for each of the first ``--n`` queries of ``load_queries(dataset, n=200,
seed=0, max_int_answer=...)`` (the cpu-math preset's sample, in its order) and prints the mean
success, the fraction of groups with mixed rewards (those have V > 0) and the mean completion
length: the numbers of the study's pilot gate, without the gradient variance. Generation only.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="asdiv")
    p.add_argument("--template", default=None, help="a PROMPT_TEMPLATES name (default: the task's)")
    p.add_argument("--max-int-answer", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--temperature", type=float, default=0.9)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--n", type=int, default=16)
    args = p.parse_args()

    import torch

    from gcpo_analysis import rewards
    from gcpo_analysis.data import load_queries
    from gcpo_analysis.models import load_policy
    from gcpo_analysis.prompts import build_prompt

    queries = load_queries(args.dataset, n=200, seed=0, max_int_answer=args.max_int_answer).iloc[: args.n]
    model, tok = load_policy(None, device="cpu")
    t0, success, mixed, lengths = time.perf_counter(), [], 0, []
    for k, row in enumerate(queries.to_dict("records")):
        ids = tok(build_prompt(row, tok, template=args.template), return_tensors="pt", add_special_tokens=False)[
            "input_ids"
        ]
        torch.manual_seed(k)
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            top_k=0,
            top_p=1.0,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            num_return_sequences=args.group_size,
            pad_token_id=tok.pad_token_id,
        )
        gen = out[:, ids.shape[1] :]
        texts = tok.batch_decode(gen, skip_special_tokens=True)
        r = [rewards.task_reward(row["task"], t, row["references"]) for t in texts]
        success += [rewards.is_success(row["task"], x) for x in r]
        mixed += len(set(r)) > 1
        lengths.append(float((gen != tok.pad_token_id).sum(1).float().mean()))
    print(
        f"template={args.template} max_int_answer={args.max_int_answer} T={args.temperature} "
        f"tokens={args.max_new_tokens} n={len(queries)}: success {np.mean(success):.3f}, "
        f"groups with mixed rewards {mixed / len(queries):.3f}, mean length {np.mean(lengths):.1f} tokens, "
        f"{time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
