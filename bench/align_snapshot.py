"""CPU cost of one update-alignment snapshot (``gcpo align``), measured on a few groups and
projected to the pool, plus the Gram in Adam's metric.

    python bench/align_snapshot.py [--config configs/align_nqa_fp32.yaml] [--groups 8]
                                   [--checkpoint runs/.../checkpoints/step_000060] [--pool 128]

Each group is what ``run_snapshot`` does per pool position: sample G rollouts with the run's
kernels (``sample_group``: the fp32 ``fused`` sampler of the config), score them, and take the
group's gradient (one forward and backward over the G rollouts; no backward where the rewards are
all equal). The first group warms up (kernel packing, the reward) and is not counted. The table
gives the mean seconds per group of each part and the projection to ``--pool`` groups against the
target of 15 CPU-minutes; then the Gram, plain and preconditioned,
timed at the pool's size (the timed gradients repeated to ``--pool`` rows of a file on disk). The
machine's load average is printed: on a shared machine the numbers are an upper bound. The data
file comes first: ``python scripts/narrativeqa_spans.py runs/nqa_spans_fit --max_passage_tokens 192
--unique_questions``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/align_nqa_fp32.yaml")
    p.add_argument("--checkpoint", default=None, help="a run's checkpoint folder (default: the base policy)")
    p.add_argument("--groups", type=int, default=8, help="groups timed (after one warm-up group)")
    p.add_argument("--pool", type=int, default=128, help="the pool the time is projected to")
    args = p.parse_args(argv)
    if args.groups < 2 or args.pool < args.groups:
        raise SystemExit("--groups must be >= 2 and --pool >= --groups")

    import numpy as np

    from gcpo_train.align import rows as gradient_rows
    from gcpo_train.align.gradients import group_gradient, load_policy
    from gcpo_train.align.run import group_seed, pool_queries
    from gcpo_train.config import load_config
    from gcpo_train.evaluation.splits import load_split
    from gcpo_train.sampling.registry import make_kernels

    train = load_config(args.config)
    queries = pool_queries(load_split(train, train.train_split), args.groups + 1, 0)
    t0 = time.perf_counter()
    model, tok = load_policy(train, args.checkpoint)
    kernels = make_kernels(train.sampling_kernels)
    load_s = time.perf_counter() - t0
    print(
        f"# {args.config}, {'base policy' if args.checkpoint is None else args.checkpoint}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, load average {os.getloadavg()[0]:.2f}"
    )
    gen, grad, live, grads = [], [], 0, []
    for k in range(args.groups + 1):
        g = group_gradient(model, tok, train, queries.iloc[k].to_dict(), group_seed(0, k), kernels=kernels)
        if k == 0:
            continue  # warm-up
        gen.append(g.seconds_generate)
        grad.append(g.seconds_gradient)
        live += int(np.ptp(g.rewards) > 0)
        grads.append(g.gradient)
    per_group = np.mean(gen) + np.mean(grad)
    print("| part | s / group | projected to the pool (min) |")
    print("|---|---|---|")
    print(f"| load the policy (once) | {load_s:.1f} | {load_s / 60:.2f} |")
    print(f"| sample G rollouts (fused, fp32) | {np.mean(gen):.2f} | {np.mean(gen) * args.pool / 60:.1f} |")
    print(
        f"| group gradient ({live} of {len(grads)} groups live) | {np.mean(grad):.2f} | "
        f"{np.mean(grad) * args.pool / 60:.1f} |"
    )
    print(
        f"| **per snapshot of {args.pool} groups** | {per_group:.2f} | **{per_group * args.pool / 60:.1f}** "
        f"(target 15) |"
    )
    # the Gram at the pool's size: the timed gradients repeated to P rows (the work is the same
    # for any values; the file is P x D float32 on disk, 2.5 GB for 128 LoRA groups)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gradients.npy"
        gradient_rows.create(path, args.pool, grads[0].size)
        for k in range(args.pool):
            gradient_rows.write_row(path, k, grads[k % len(grads)])
        rows = list(range(args.pool))
        t0 = time.perf_counter()
        gradient_rows.gram_of(path, rows)
        plain = time.perf_counter() - t0
        scale = np.random.default_rng(0).uniform(1.0, 2.0, grads[0].size)
        t0 = time.perf_counter()
        gradient_rows.gram_of(path, rows, scale=scale)
        metric = time.perf_counter() - t0
    print()
    print(f"| Gram of {args.pool} gradients ({grads[0].size:,} numbers each, float64) | s |")
    print("|---|---|")
    print(f"| plain, K = G Gᵀ | {plain:.1f} |")
    print(f"| Adam's metric, (G P)(G P)ᵀ | {metric:.1f} |")


if __name__ == "__main__":
    main()
