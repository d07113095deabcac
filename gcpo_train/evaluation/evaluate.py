"""Greedy evaluation on a test split with the paper's metrics (Tables 1-2, Appendix E).

QA: Acc (F1 > 0.5), BLEU, F1; HotpotQA: F1, EM; math: accuracy — all from
``gcpo_analysis.rewards.task_metrics``; the mean task reward is reported as well.

``evaluate`` runs its stages in this order, each a function of its own:

1. ``check_counts``: ``n`` and ``batch_size`` are integers >= 1;
2. ``guard_outputs``: the metrics JSON and the predictions beside it never replace an input of
   the same command (the model folder, the data file, a config, the evaluation it is paired with),
   checked on resolved paths (symlinks followed, hard links compared by inode);
3. ``eval_config`` and ``settings``: the config that names the data, split and decoding (given,
   or a checkpoint's own), and what it resolves to;
4. ``eval_queries``: the queries of the split (the run's own held-out part for a single-split
   benchmark), read before any model loads, so a bad data file costs no model load; they are the
   queries of the evaluation it is paired with (``heldout.check_paired_queries``);
5. ``load_policy`` and ``pick_kernels``: a checkpoint, a model name or a loaded model, and the
   run's decoding kernels;
6. ``decode``: greedy completions, ``batch_size`` prompts at a time;
7. ``score``: the task's metrics and one row per query (its ``score`` for pairing);
8. ``write_outputs``: the JSON and the predictions as one set (``staged_outputs``: a failed
   write leaves both as they were).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

import numpy as np

from gcpo_analysis.frames import write_frame, write_json
from gcpo_analysis.models import require

EVAL_BATCH_PACKED = 64  # prompts per greedy decode on packed kernels
PREDICTIONS = ".predictions.parquet"  # the predictions file beside an evaluation's JSON


# ----------------------------------------------------------------------------- 1-2. arguments, outputs
def check_counts(*, n=None, batch_size=None) -> None:
    """``n`` (queries) and ``batch_size`` (prompts per decode) are integers >= 1 when given."""
    for name, value, what in (("batch_size", batch_size, "prompts per batch"), ("n", n, "queries to evaluate")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} (--{name}) must be an integer >= 1 ({what}), got {value!r}")


def predictions_path(output) -> Path:
    """Where the predictions of an evaluation whose JSON is ``output`` go: ``<stem>.predictions.parquet``."""
    output = Path(output)
    return output.with_name(output.stem + PREDICTIONS)


def evaluation_files(path) -> list[Path]:
    """The two files of the evaluation that ``path`` (its JSON or its predictions) belongs to."""
    path = Path(path)
    stem = path.name[: -len(PREDICTIONS)] if path.name.endswith(PREDICTIONS) else path.stem
    return [path.with_name(stem + ".json"), path.with_name(stem + PREDICTIONS)]


def _same(a: Path, b: Path) -> bool:
    """One file under two names: equal once resolved (symlinks followed), or one inode (hard links)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return False


def guard_outputs(output, inputs: dict, paired: dict | None = None) -> list[Path]:
    """The files an evaluation writes for ``output`` (its JSON and ``predictions_path``), or a
    ValueError naming the input that one of them would replace, before anything runs.

    ``inputs``: {label (the flag, e.g. '--config'): path or None}, the command's inputs; an output
    may not be one of them (symlinks and hard links included) nor lie inside one that is a folder,
    a checkpoint or a run's pruned parts (``outputs.check_output``). ``paired``: {label: path} of
    evaluations read as inputs (``--paired_with``): neither file of such an evaluation
    (``evaluation_files``) may be written, so its metrics and predictions stay one evaluation's."""
    targets = [Path(output), predictions_path(output)]
    sources = {label: Path(p) for label, p in inputs.items() if p is not None}
    for label, p in (paired or {}).items():
        if p is None:
            continue
        sources[label] = Path(p)
        for sibling in evaluation_files(p):
            for target in targets:
                if _same(target, sibling) and not _same(sibling, Path(p)):
                    raise ValueError(
                        f"--output would write {target}, which is {sibling}: the metrics of the evaluation "
                        f"{label} {p} belongs to; choose another --output"
                    )
    for target in targets:
        guard_output_file(
            target, list(sources.items()), "--output" if target == targets[0] else "--output's predictions"
        )
    return targets


def guard_output_file(target, inputs, what: str = "--output", flag: str = "--output") -> Path:
    """``target`` resolved, or a ValueError before anything is written: ``target`` is one of
    ``inputs`` ((label, path or None) pairs, the command's inputs; the same file under another
    name included: symlinks followed, hard links compared by inode), or lies where writing
    destroys data (inside an input folder, a checkpoint or a run's pruned parts:
    ``outputs.check_output``). ``what`` names the output in the message, ``flag`` the option to
    change. One file of ``guard_outputs``; a script that writes one table guards it alone."""
    from gcpo_analysis.outputs import check_output

    sources = [(label, Path(p)) for label, p in inputs if p is not None]
    for label, source in sources:
        if _same(Path(target), source):
            raise ValueError(f"{what} {target} is the input {label} {source}; choose another {flag}")
    return check_output(target, [source for _, source in sources], what)


# ----------------------------------------------------------------------------- 3-4. what to evaluate
@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """What an evaluation reads and how it decodes, resolved from the arguments and the config."""

    dataset: str
    split: str
    max_new_tokens: int
    max_context_tokens: int
    template: str | None  # the run's prompt, for its base policy too


def is_checkpoint(source) -> bool:
    return isinstance(source, (str, Path)) and (Path(source) / "trainable.pt").exists()


def eval_config(source, config=None):
    """The config to evaluate with: the one given, else a checkpoint's own (``saved_config``), else None."""
    if config is None and is_checkpoint(source):
        from gcpo_train.runfiles.checkpoint import saved_config

        return saved_config(source)
    return config


def settings(config, dataset=None, split=None, max_new_tokens=None, max_context_tokens=None) -> EvalSettings:
    """Arguments first, then the config's fields: its dataset, ``eval_split`` (the split its run
    evaluates on), ``eval_max_new_tokens`` or ``max_new_tokens``, ``max_context_tokens`` and
    prompt; without a config, the test split, 256 new tokens and 256 context tokens."""
    dataset = dataset or (config.dataset if config is not None else None)
    if dataset is None:
        raise ValueError("evaluate needs dataset= (or a checkpoint/config that names one)")
    if max_new_tokens is None and config is not None:
        max_new_tokens = config.eval_max_new_tokens or config.max_new_tokens
    if max_context_tokens is None:
        max_context_tokens = config.max_context_tokens if config is not None else 256
    return EvalSettings(
        dataset=dataset,
        split=split or (config.eval_split if config is not None else "test"),
        max_new_tokens=max_new_tokens or 256,
        max_context_tokens=max_context_tokens,
        template=config.prompt if config is not None else None,
    )


def eval_queries(s: EvalSettings, config=None, data_path=None, n=None, queries=None):
    """The first ``n`` queries of ``s.split`` (``queries`` when given): for a config whose
    benchmark is split from one file (``split_from_single``), its run's own part of that split
    (``splits.load_split``), never its training queries."""
    if queries is None and config is not None and config.split_from_single and s.dataset == config.dataset:
        from gcpo_train.evaluation.splits import load_split

        queries = load_split(dataclasses.replace(config, data_path=data_path or config.data_path), s.split)
    elif queries is None:
        from gcpo_analysis.data import load_queries

        queries = load_queries(s.dataset, path=data_path or (config.data_path if config else None), split=s.split)
    if n is not None:
        queries = queries.iloc[:n]
    if len(queries) == 0:
        raise ValueError(f"no {s.split!r} queries to evaluate for {s.dataset!r}")
    tasks = sorted(set(queries["task"]))
    if len(tasks) != 1:
        raise ValueError(f"evaluate expects one task per dataset, got {tasks}")
    return queries


# ----------------------------------------------------------------------------- 5. the policy
def load_policy(source, config=None, tokenizer=None, device=None):
    """(model, tokenizer) of a checkpoint folder, a model name ('packaged', a hub name, a path;
    in the config's dtype, else float32), or a loaded model (then ``tokenizer`` is required)."""
    if is_checkpoint(source):
        from gcpo_train.runfiles.checkpoint import load_trained

        model, tokenizer, _ = load_trained(source, device)
        return model, tokenizer
    if isinstance(source, (str, Path)):
        from gcpo_train.model.policy import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(str(source), config.dtype if config else "float32")
        if device:
            model.to(device)
        return model, tokenizer
    if tokenizer is None:
        raise ValueError("evaluate(model, ...) needs tokenizer= when given a loaded model")
    return source, tokenizer


def pick_kernels(model, config=None, kernels=None):
    """The decoding kernels: those given, else the config's ``sampling_kernels`` (so a run's base
    policy and its checkpoints decode alike), None for transformers' generate ('exact'). A bf16
    sampler, given or configured, is replaced by its fp32 twin (its ``fallback``)."""
    from gcpo_train.sampling.registry import kernels_name, make_kernels, sampler

    if kernels is None and config is None:
        return None
    spec = sampler(kernels_name(kernels) if kernels is not None else config.sampling_kernels)
    # never evaluate in bf16: a bf16 logit row has ~2% exact ties, so greedy
    # completions change with the batch shape; its fp32 twin decodes the policy exactly. The
    # trainer hands its own sampler in, so a given one is checked too, not only the config's.
    if spec.bf16:
        return make_kernels(spec.fallback, next(model.parameters()).device)
    return kernels if kernels is not None else make_kernels(spec.name, next(model.parameters()).device)


# ----------------------------------------------------------------------------- 6-7. decode, score
def decode(model, tokenizer, queries, s: EvalSettings, *, batch_size: int, kernels=None, progress=True) -> list[str]:
    """One greedy completion per query, ``batch_size`` prompts per ``generate_groups`` call; the
    model is put back in training mode if it was. On the fused kernels a batch's prompts that begin
    alike (questions on one passage) share their prefill (``FusedKernels.prefixes_shared``): the
    same completions, measured (``bench/eval_prefill.py``), at a fraction of the prefill's cost."""
    torch = require("torch")
    tqdm = require("tqdm").tqdm
    from gcpo_analysis.prompts import build_prompt
    from gcpo_train.sampling.generate import generate_groups

    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    completions: list[str] = []
    shared = getattr(kernels, "prefixes_shared", None)  # the fused kernels'; onednn's have none
    try:
        with shared() if shared is not None else contextlib.nullcontext():
            for start in tqdm(range(0, len(queries), batch_size), disable=not progress, desc=f"eval {s.dataset}"):
                chunk = queries.iloc[start : start + batch_size]
                prompts = [
                    build_prompt(r, tokenizer, max_context_tokens=s.max_context_tokens, template=s.template)
                    for _, r in chunk.iterrows()
                ]
                with torch.no_grad():
                    batch = generate_groups(
                        model,
                        tokenizer,
                        prompts,
                        1,
                        max_new_tokens=s.max_new_tokens,
                        do_sample=False,
                        device=dev,
                        kernels=kernels,
                    )
                completions.extend(batch.texts)
    finally:
        if was_training:
            model.train()
    return completions


def score(queries, completions: list[str]):
    """(metrics, predictions): ``task_metrics`` of the extracted answers plus the mean task
    reward, and one row per query (query_id, completion, answer, reward, score, references,
    content_id),
    ``score`` being the task's metric on 0-100 (``heldout.per_query_scores``)."""
    import pandas as pd

    from gcpo_analysis.rewards import extract_answer, task_metrics, task_reward
    from gcpo_train.compare.data_identity import content_ids
    from gcpo_train.evaluation.heldout import per_query_scores

    task = queries["task"].iloc[0]
    refs = [list(r) for r in queries["references"]]
    answers = [extract_answer(c, task) or "" for c in completions]
    metrics = dict(task_metrics(task, answers, refs))
    scores = per_query_scores(task, answers, refs)
    rewards = [task_reward(task, c, r) for c, r in zip(completions, refs)]
    metrics["mean_reward"] = float(np.mean(rewards))
    predictions = pd.DataFrame(
        {
            "query_id": queries["query_id"].astype(str).to_numpy(),
            "completion": completions,
            "answer": answers,
            "reward": rewards,
            "score": scores,
            "references": refs,
            # beside the positional query_id: which question and passage were scored (compare.data_identity)
            "content_id": content_ids(queries),
        }
    )
    return metrics, predictions


# ----------------------------------------------------------------------------- 8. write
def write_outputs(output, record: dict, predictions) -> None:
    """The metrics JSON at ``output`` (with the ``environment`` that computed it) and the
    predictions beside it, replaced together (``staged_outputs``): a failed write leaves both
    files as they were."""
    from gcpo_analysis.outputs import staged_outputs
    from gcpo_analysis.provenance import environment

    with staged_outputs():
        write_json(output, {**record, "environment": environment()}, default=float)
        write_frame(predictions, predictions_path(output))


def evaluate(
    checkpoint_or_model,
    dataset: str | None = None,
    split: str | None = None,
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
    inputs: dict | None = None,
    paired: dict | None = None,
    paired_scores: dict | None = None,
) -> dict:
    """Greedy-decode ``n`` queries of ``split`` and score them; write JSON to ``output``.

    checkpoint_or_model: a checkpoint folder (``.../checkpoints/step_000100``), a model name
    ('packaged', hub name, path), or a loaded model (then ``tokenizer`` is required).
    ``config``: a TrainConfig whose data, split (``eval_split``) and decoding to use; given with a
    model name (e.g. 'packaged', the base policy), the run's own held-out queries are evaluated as
    they are for its checkpoints, so the two pair by query. A checkpoint brings its own config,
    used where ``config`` is None; a given ``config`` names the data, split and decoding to
    evaluate the checkpoint on (e.g. its run's held-out queries from a file with the passages
    removed). ``split``: None = the config's ``eval_split``, else 'test'.
    Returns {"dataset", "split", "n", "metrics": task_metrics(...) + mean_reward, "model", ...}.
    Predictions go next to the JSON as ``<name>.predictions.parquet``, one row per query with
    its ``score`` (the task's metric on 0-100, ``heldout.per_query_scores``) for pairing; the two
    are written together or not at all. ``inputs``/``paired``: the command's other inputs, which
    the outputs may not replace (``guard_outputs``). ``paired_scores``: {label: ``read_scores``
    frame} of the evaluations in ``paired``, which must score the queries this one will
    (``heldout.check_paired_queries``, before the model loads).
    ``kernels``: a ``sampling.registry.make_kernels`` object (default: the config's ``sampling_kernels``, so a
    run's base policy and checkpoints decode alike). ``batch_size``: prompts per greedy decode;
    None = 8 with transformers generate (the numbers of earlier runs: a row's rounding depends on
    its batch), ``EVAL_BATCH_PACKED`` with packed kernels (a decode step streams the weights
    once for the whole batch, so a large batch costs little more than a small one).
    """
    check_counts(n=n, batch_size=batch_size)
    from gcpo_train.sampling.registry import kernels_name

    source = checkpoint_or_model if isinstance(checkpoint_or_model, (str, Path)) else None
    if source is not None:  # before the settings and the data: a typo in the path is the error to report
        from gcpo_analysis.models import check_model_folder

        check_model_folder(str(source))
    if output is not None:  # never over the checkpoint, the data file, a config or a paired evaluation
        model_path = source if source is not None and Path(source).exists() else None  # not a hub name
        guard_outputs(output, {"the model": model_path, "--data_path": data_path, **(inputs or {})}, paired)
    config = eval_config(checkpoint_or_model, config)
    s = settings(config, dataset, split, max_new_tokens, max_context_tokens)
    queries = eval_queries(s, config, data_path, n, queries)
    from gcpo_train.evaluation.heldout import check_paired_queries

    for label, base in (paired_scores or {}).items():  # before the model loads: a mismatch costs no decode
        check_paired_queries(queries["query_id"], base, label, (paired or {}).get(label))
    model, tokenizer = load_policy(checkpoint_or_model, config, tokenizer, device)
    context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(context, int) and s.max_new_tokens > context:  # would decode far past what the model was built for
        raise ValueError(
            f"max_new_tokens ({s.max_new_tokens}) exceeds the model's context "
            f"(max_position_embeddings = {context}); pass a smaller --max_new_tokens"
        )
    kernels = pick_kernels(model, config, kernels)
    if batch_size is None:
        batch_size = 8 if kernels is None else EVAL_BATCH_PACKED
    completions = decode(model, tokenizer, queries, s, batch_size=batch_size, kernels=kernels, progress=progress)
    metrics, predictions = score(queries, completions)
    result = {
        "dataset": s.dataset,
        "split": s.split,
        "n": len(queries),
        "model": str(source if source is not None else type(checkpoint_or_model).__name__),
        "max_new_tokens": s.max_new_tokens,
        "decoding": "greedy",
        "sampling_kernels": kernels_name(kernels),
        "batch_size": batch_size,
        "metrics": metrics,
    }
    if output is not None:
        write_outputs(output, result, predictions)
    return {**result, "scores": predictions["score"].tolist(), "query_ids": predictions["query_id"].tolist()}
