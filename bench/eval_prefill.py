"""The held-out evaluation's prefill, plain and with shared prefixes, at full size: greedy
completions of the 362 held-out NarrativeQA-spans prompts (the data of
``configs/cpu_compare_nqa_spans_fp32.yaml``: 112 passages, several questions on each), 16 new
tokens, batches of 64 on the fused fp32 kernels, as ``gcpo compare`` evaluates every arm-seed:

    python bench/eval_prefill.py                                   # the packaged policy, both prefills
    python bench/eval_prefill.py --checkpoint RUN/checkpoints/step_000060 \\
        --against RUN/eval/step_000060.predictions.parquet         # a trained policy against its run's evaluation
    python bench/record.py bench/eval_prefill.py                   # recorded in bench/results/eval_prefill.md

Plain, the prefill runs every prompt's padded rows through the linear layers (Q·(P − 1) rows a
batch). Shared (``FusedKernels.prefixes_shared``, what ``evaluate`` uses), each distinct
(prefix, position) runs once (``sampling.prefixes.prefill_rows``): the questions on one passage
compute [template | passage] once. A row per prefill: the prefill rows computed, wall and process
CPU seconds of the whole evaluation, the completions and scores unlike the plain prefill's, and the
mean F1. Shared prefixes move the logits by float rounding (a prefix takes the rounding of the first
prompt that holds it), so the claim checked is the issue's: the same tokens and scores. Exit status
1 if any completion or score differs.

``--against`` compares with a recorded plain evaluation (a run's ``eval/step_*.predictions.parquet``,
the same queries in the same batches) instead of decoding the plain prefill again.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import runpy
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH = 64


def evaluation(model, tokenizer, config, n: int, share: bool, workdir: Path) -> tuple[dict, int, float, float]:
    """(the evaluation's result, prefill rows computed, wall s, CPU s) of ``model`` with the plain
    or the shared prefill; the result holds its completions read back from the predictions file."""
    import contextlib

    import pandas as pd

    from gcpo_train.evaluation.evaluate import evaluate
    from gcpo_train.sampling.fused import FusedKernels
    from gcpo_train.sampling.prefixes import prefill_rows

    class Counted(FusedKernels):
        """The fused kernels counting their prefill rows; ``share=False``: evaluate's prefix
        sharing left off (the prefill before it)."""

        rows = 0

        def decode_step(self, model, input_ids, attention_mask, positions, *args):
            if self.share_prefixes:  # the trie's rows (built again here: milliseconds a batch)
                prompt = (input_ids[:, :-1], attention_mask[:, :-1].bool(), positions[:, :-1])
                self.rows += len(prefill_rows(*prompt)[0])
            else:  # the plain prefill's rows: Q·(P − 1) a batch
                self.rows += input_ids.shape[0] * (input_ids.shape[1] - 1)
            return super().decode_step(model, input_ids, attention_mask, positions, *args)

        def prefixes_shared(self):
            return super().prefixes_shared() if share else contextlib.nullcontext(self)

    kernels = Counted()
    path = workdir / f"{'shared' if share else 'plain'}.json"
    wall, cpu = time.perf_counter(), time.process_time()
    result = evaluate(
        model, tokenizer=tokenizer, config=config, n=n, batch_size=BATCH, kernels=kernels, output=path, progress=False
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    result["completions"] = pd.read_parquet(path.with_name(path.stem + ".predictions.parquet"))["completion"].tolist()
    return result, kernels.rows, wall, cpu


def recorded(path: Path, n: int) -> dict:
    """A recorded evaluation's first ``n`` predictions as ``evaluation``'s result."""
    import pandas as pd

    preds = pd.read_parquet(path).iloc[:n]
    return {
        "scores": preds["score"].tolist(),
        "query_ids": preds["query_id"].tolist(),
        "completions": preds["completion"].tolist(),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=362, help="held-out prompts (the comparison evaluates 362)")
    p.add_argument("--checkpoint", default=None, help="a trained checkpoint folder (default: the packaged base policy)")
    p.add_argument("--against", default=None, help="a recorded plain evaluation's predictions file to compare with")
    p.add_argument("--data_path", default=None, help="the fitted spans folder (default: written to a temporary folder)")
    args = p.parse_args(argv)
    import torch

    from gcpo_train.evaluation.evaluate import eval_config, load_policy

    with tempfile.TemporaryDirectory(prefix="eval_prefill_") as tmp:
        greedy_batch = runpy.run_path(str(ROOT / "bench" / "greedy_batch.py"))  # its data and config
        data = args.data_path or greedy_batch["spans_data"](Path(tmp))
        if args.checkpoint is not None:
            config = eval_config(args.checkpoint)
            config = dataclasses.replace(config, data_path=data)
            model, tokenizer = load_policy(args.checkpoint)
            label = Path(args.checkpoint).as_posix()
        else:
            config = greedy_batch["spans_config"](data, "fused", 16)
            model, tokenizer = load_policy("packaged", config)
            label = "packaged base policy"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        shared, n_rows, wall, cpu = evaluation(model, tokenizer, config, args.n, True, Path(tmp))
        if args.against is not None:
            plain = recorded(Path(args.against), args.n)
            plain_timing = f"plain (recorded: {Path(args.against).name}) | – | – | –"
        else:
            plain, p_rows, p_wall, p_cpu = evaluation(model, tokenizer, config, args.n, False, Path(tmp))
            plain_timing = f"plain | {p_rows} | {p_wall:.1f} | {p_cpu:.1f}"
    if shared["query_ids"] != plain["query_ids"]:
        raise SystemExit("the two evaluations score different queries")
    completions = sum(a != b for a, b in zip(shared["completions"], plain["completions"], strict=True))
    scores = sum(a != b for a, b in zip(shared["scores"], plain["scores"], strict=True))
    n = len(plain["scores"])
    rows = [
        f"| {plain_timing} | – | – | {sum(plain['scores']) / n:.2f} |",  # scores are on 0-100
        f"| shared prefixes | {n_rows} | {wall:.1f} | {cpu:.1f} | {completions} of {n} | {scores} of {n} | "
        f"{sum(shared['scores']) / n:.2f} |",
    ]
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    print(
        "\n".join(
            [
                f"{label}: {args.n} held-out NarrativeQA-spans prompts, batches of {BATCH}, 16 new tokens, greedy, "
                f"fused fp32; torch {torch.__version__}, {torch.get_num_threads()} thread(s); peak RSS {peak_gb:.2f} GB",
                "",
                "| prefill | prefill rows | wall s | CPU s | completions unlike plain | scores unlike plain | F1 |",
                "|---|---|---|---|---|---|---|",
                *rows,
                "",
            ]
        )
    )
    return 1 if completions or scores else 0


if __name__ == "__main__":
    sys.exit(main())
