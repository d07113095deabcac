"""Greedy evaluation on a test split with the paper's metrics (Tables 1-2, Appendix E).

QA: Acc (F1 > 0.5), BLEU, F1; HotpotQA: F1, EM; math: accuracy — all from
``gcpo_analysis.rewards.task_metrics``; the mean task reward is reported as well.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gcpo_analysis.frames import write_frame, write_json
from gcpo_analysis.models import require

EVAL_BATCH_PACKED = 64  # prompts per greedy decode on packed kernels
FP32_TWIN = {"bf16": "onednn", "fused_bf16": "fused"}  # a run that samples in bf16 is evaluated in fp32


def evaluate(
    checkpoint_or_model,
    dataset: str | None = None,
    split: str = "test",
    n: int | None = None,
    *,
    tokenizer=None,
    config=None,
    queries=None,
    data_path: str | None = None,
    max_new_tokens: int | None = None,
    max_context_tokens: int | None = None,
    batch_size: int | None = None,
    output=None,
    progress: bool = True,
    device=None,
    kernels=None,
) -> dict:
    """Greedy-decode ``n`` queries of ``split`` and score them; write JSON to ``output``.

    checkpoint_or_model: a checkpoint folder (``.../checkpoints/step_000100``), a model name
    ('packaged', hub name, path), or a loaded model (then ``tokenizer`` is required).
    ``config``: a TrainConfig whose data, split and decoding to use; given with a model name
    (e.g. 'packaged', the base policy), the run's own held-out queries are evaluated as they are
    for its checkpoints, so the two pair by query. A checkpoint brings its own config, used
    where ``config`` is None; a given ``config`` names the data, split and decoding to evaluate
    the checkpoint on (e.g. its run's held-out queries from a file with the passages removed).
    Returns {"dataset", "split", "n", "metrics": task_metrics(...) + mean_reward, "model"}.
    Predictions go next to the JSON as ``<name>.predictions.parquet``, one row per query with
    its ``score`` (the task's metric on 0-100, ``heldout.per_query_scores``) for pairing.
    ``kernels``: a ``sampling.make_kernels`` object (default: the config's ``sampling_kernels``, so a
    run's base policy and checkpoints decode alike). ``batch_size``: prompts per greedy decode;
    None = 8 with transformers generate (the numbers of earlier runs: a row's rounding depends on
    its batch), ``EVAL_BATCH_PACKED`` with packed kernels (a decode step streams the weights
    once for the whole batch, so a large batch costs little more than a small one).
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size (--batch_size) must be an integer >= 1 (prompts per batch), got {batch_size!r}")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n (--n) must be an integer >= 1 (queries to evaluate), got {n!r}")
    if output is not None:  # never over the checkpoint, the data file or a pruned run folder
        from gcpo_analysis.outputs import check_output

        sources = [checkpoint_or_model if isinstance(checkpoint_or_model, (str, Path)) else None, data_path]
        check_output(output, sources, "--output")
        check_output(
            Path(output).with_name(Path(output).stem + ".predictions.parquet"), sources, "--output's predictions"
        )
    torch = require("torch")
    tqdm = require("tqdm").tqdm
    from gcpo_analysis.rewards import extract_answer, task_metrics, task_reward
    from gcpo_train.model.policy import load_model_and_tokenizer
    from gcpo_train.sampling.generate import generate_groups

    desc = checkpoint_or_model if isinstance(checkpoint_or_model, (str, Path)) else type(checkpoint_or_model).__name__
    if isinstance(checkpoint_or_model, (str, Path)) and (Path(checkpoint_or_model) / "trainable.pt").exists():
        from gcpo_train.runfiles.checkpoint import load_trained

        model, tokenizer, saved = load_trained(checkpoint_or_model, device)
        config = saved if config is None else config  # a --config given with a checkpoint is what to evaluate
    elif isinstance(checkpoint_or_model, (str, Path)):
        model, tokenizer = load_model_and_tokenizer(str(checkpoint_or_model), config.dtype if config else "float32")
        if device:
            model.to(device)
    else:
        model = checkpoint_or_model
        if tokenizer is None:
            raise ValueError("evaluate(model, ...) needs tokenizer= when given a loaded model")
    if kernels is None and config is not None and getattr(config, "sampling_kernels", "exact") != "exact":
        from gcpo_train.sampling.kernels import make_kernels  # the run's decoding, for its base policy too

        # never evaluate in bf16 (issue 35): a bf16 logit row has ~2% exact ties, so greedy
        # completions change with the batch shape; its fp32 twin decodes the same policy exactly
        name = FP32_TWIN.get(config.sampling_kernels, config.sampling_kernels)
        kernels = make_kernels(name, next(model.parameters()).device)
    if batch_size is None:
        batch_size = 8 if kernels is None else EVAL_BATCH_PACKED
    dataset = dataset or (config.dataset if config is not None else None)
    if dataset is None:
        raise ValueError("evaluate needs dataset= (or a checkpoint/config that names one)")
    if max_new_tokens is None and config is not None:
        max_new_tokens = config.eval_max_new_tokens or config.max_new_tokens
    max_new_tokens = max_new_tokens or 256
    if max_context_tokens is None:
        max_context_tokens = config.max_context_tokens if config is not None else 256
    if queries is None and config is not None and config.split_from_single and dataset == config.dataset:
        # the held-out part of the run's own split_queries split, never its training queries
        import dataclasses

        from gcpo_train.evaluation.splits import load_split

        queries = load_split(dataclasses.replace(config, data_path=data_path or config.data_path), split)
    elif queries is None:
        from gcpo_analysis.data import load_queries

        queries = load_queries(dataset, path=data_path or (config.data_path if config else None), split=split)
    if n is not None:
        queries = queries.iloc[:n]
    if len(queries) == 0:
        raise ValueError(f"no {split!r} queries to evaluate for {dataset!r}")
    from gcpo_analysis.prompts import build_prompt

    template = config.prompt if config is not None else None  # the run's prompt, for its base policy too
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    completions = []
    starts = range(0, len(queries), batch_size)
    for s in tqdm(starts, disable=not progress, desc=f"eval {dataset}"):
        chunk = queries.iloc[s : s + batch_size]
        prompts = [
            build_prompt(r, tokenizer, max_context_tokens=max_context_tokens, template=template)
            for _, r in chunk.iterrows()
        ]
        with torch.no_grad():
            batch = generate_groups(
                model,
                tokenizer,
                prompts,
                1,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                device=dev,
                kernels=kernels,
            )
        completions.extend(batch.texts)
    if was_training:
        model.train()
    tasks = queries["task"].tolist()
    refs = [list(r) for r in queries["references"]]
    task = tasks[0]
    if any(t != task for t in tasks):
        raise ValueError(f"evaluate expects one task per dataset, got {sorted(set(tasks))}")
    preds = [extract_answer(c, task) or "" for c in completions]
    metrics = dict(task_metrics(task, preds, refs))
    from gcpo_train.evaluation.heldout import per_query_scores

    scores = per_query_scores(task, preds, refs)
    rewards = [task_reward(task, c, r) for c, r in zip(completions, refs)]
    metrics["mean_reward"] = float(np.mean(rewards))
    result = {
        "dataset": dataset,
        "split": split,
        "n": len(queries),
        "model": str(desc),
        "max_new_tokens": max_new_tokens,
        "decoding": "greedy",
        "sampling_kernels": "exact" if kernels is None else kernels.kernels,
        "batch_size": batch_size,
        "metrics": metrics,
        "scores": scores.tolist(),
        "query_ids": queries["query_id"].astype(str).tolist(),
    }
    if output is not None:
        import pandas as pd

        output = Path(output)
        write_json(output, {k: v for k, v in result.items() if k not in ("scores", "query_ids")}, default=float)
        write_frame(
            pd.DataFrame(
                {
                    "query_id": queries["query_id"].astype(str).to_numpy(),
                    "completion": completions,
                    "answer": preds,
                    "reward": rewards,
                    "score": scores,
                    "references": refs,
                }
            ),
            output.with_name(output.stem + ".predictions.parquet"),
        )
    return result
