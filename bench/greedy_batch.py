"""Greedy evaluation against the batch size, at full size: the packaged
SmolLM2-135M-Instruct's greedy completions of 64 held-out NarrativeQA-spans prompts (the data of
``configs/cpu_compare_nqa_spans_fp32.yaml``: passages that fit 192 tokens, no repeated question),
16 new tokens, decoded in batches of 8, 16 and 64 on each fp32 sampling kernel:

    python bench/greedy_batch.py                     # fused and onednn, 64 prompts, 16 tokens
    python bench/record.py bench/greedy_batch.py     # the same, recorded in bench/results/greedy_batch.md

The evaluation is ``gcpo_train.evaluation.evaluate.evaluate``, the one ``gcpo compare`` and
``gcpo eval`` call. A table row per (kernels, batch size): wall seconds, process CPU seconds, and
the completions that differ from the same kernels' batch-8 completions. Exit status 1 if any
differs: the claim checked is that a policy's greedy score does not depend on the batch shape
(under bf16 it did: 15 of 64 completions changed between batch 16 and 64). The test
suite checks the same on 16 prompts at batch 4 and 16 (``tests/train/test_compare_protocol.py``);
this is the full size, minutes on 2 cores, so it is a benchmark with a committed result
(``bench/results/greedy_batch.md``) and the opt-in test ``pytest -m full``.
"""

from __future__ import annotations

import argparse
import json
import resource
import runpy
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCHES = (8, 16, 64)


def spans_data(folder: Path) -> str:
    """The fitted NarrativeQA-spans folder (``scripts/narrativeqa_spans.py --max_passage_tokens 192
    --unique_questions``) written under ``folder``."""
    main = runpy.run_path(str(ROOT / "scripts" / "narrativeqa_spans.py"))["main"]
    path = folder / "spans_fit"
    if main(["--max_passage_tokens", "192", "--unique_questions", str(path)]) != 0:
        raise SystemExit("scripts/narrativeqa_spans.py failed")
    return str(path)


def spans_config(data_path: str, kernels: str, max_new_tokens: int):
    """The comparison's evaluation settings on the spans data: the packaged policy, passages cut
    to 192 tokens, greedy completions of ``max_new_tokens`` on ``kernels``."""
    from gcpo_train.config import TrainConfig

    return TrainConfig(
        model="packaged",
        dataset="narrativeqa",
        data_path=data_path,
        split_from_single=False,
        max_context_tokens=192,
        eval_max_new_tokens=max_new_tokens,
        sampling_kernels=kernels,
        device="cpu",
    )


def greedy_completions(
    data_path: str, kernels: str, n: int, max_new_tokens: int, batches=BATCHES, workdir: Path | None = None
) -> dict[int, tuple[list[str], float, float]]:
    """{batch size: (completions of the first ``n`` held-out prompts, wall s, CPU s)} of the packaged
    policy's greedy evaluation on ``kernels``."""
    import pandas as pd

    from gcpo_train.evaluation.evaluate import evaluate
    from gcpo_train.model.policy import load_model_and_tokenizer

    cfg = spans_config(data_path, kernels, max_new_tokens)
    model, tokenizer = load_model_and_tokenizer("packaged")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    workdir = Path(workdir or tempfile.mkdtemp(prefix="greedy_batch_"))
    out = {}
    for batch in batches:
        path = workdir / f"{kernels}_b{batch}.json"
        wall, cpu = time.perf_counter(), time.process_time()
        evaluate(
            model, tokenizer=tokenizer, config=cfg, split="test", n=n, batch_size=batch, output=path, progress=False
        )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        preds = pd.read_parquet(path.with_name(path.stem + ".predictions.parquet"))
        if len(preds) != n:
            raise RuntimeError(f"{path}: {len(preds)} predictions, expected {n}")
        used = json.loads(path.read_text())["sampling_kernels"]
        if used != kernels:  # a fallback kernel would check something else
            raise RuntimeError(f"{path}: decoded on {used!r}, not {kernels!r}")
        out[batch] = (preds["completion"].tolist(), wall, cpu)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", default="fused,onednn", help="comma list of fp32 sampling kernels")
    p.add_argument("--n", type=int, default=64, help="held-out prompts")
    p.add_argument("--max_new_tokens", type=int, default=16, help="greedy completion length")
    args = p.parse_args(argv)
    import torch

    with tempfile.TemporaryDirectory(prefix="greedy_batch_") as tmp:
        data = spans_data(Path(tmp))
        rows, differ = [], 0
        for kernels in args.kernels.split(","):
            res = greedy_completions(data, kernels, args.n, args.max_new_tokens, workdir=Path(tmp))
            ref = res[BATCHES[0]][0]
            for batch, (comps, wall, cpu) in res.items():
                changed = sum(a != b for a, b in zip(ref, comps, strict=True))
                differ += changed
                rows.append(f"| {kernels} | {batch} | {wall:.1f} | {cpu:.1f} | {changed} of {len(comps)} |")
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    table = "\n".join(
        [
            f"{args.n} held-out NarrativeQA-spans prompts, {args.max_new_tokens} new tokens, greedy, fp32; "
            f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); peak RSS {peak_gb:.2f} GB",
            "",
            "| kernels | batch | wall s | CPU s | completions unlike batch 8 |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    print(table)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
