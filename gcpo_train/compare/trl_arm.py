"""One arm-seed run of ``gcpo compare --backend trl``: TRL's GRPOTrainer (``gcpo_train.trl.
GCPOTrainer``) under the comparison's rules, so that a TRL comparison reads as a gcpo one does.

- **Run folder.** ``run_folder.RunFolder``: locked, a failed start leaves the folder as found,
  ``run.json`` records the configuration. An interrupted run resumes from its newest TRL
  checkpoint (``checkpoint-N``, TRL's ``resume_from_checkpoint``: weights, optimizer, scheduler,
  RNG states and the sampler's position), and ``log.jsonl`` is cut back to that step; a run
  killed before its first checkpoint restarts at step 1 (the same configuration only).
- **Held-out evaluation.** ``evaluate.evaluate`` — the function, decoding (greedy, the config's
  ``eval_max_new_tokens``, batches of 8) and queries of every other arm and of the base policy —
  every ``eval_every`` steps and at the last step, into ``eval/step_XXXXXX``.
- **Records.** ``log.jsonl`` (one row per TRL log: ``reward_mean`` is TRL's ``reward``) and
  ``rollouts/step_XXXXXX.parquet`` (query_id, rollout_id, completion, reward and the group
  weight ``weight`` that GCPOTrainer applied), which the report reads as it reads the gcpo loop's.
- **Common random numbers (what TRL allows).** Every arm of seed s trains with ``seed = s``: TRL's
  ``RepeatSampler`` draws the same query order, the LoRA initialisation is the same, and
  generation starts from the same torch RNG state, so the first step's completions are the same
  in every arm (tested on CPU; on a GPU, up to non-deterministic kernels). Unlike the gcpo loop,
  which re-seeds every group from (seed, step), TRL samples from one running generator: once two
  arms' completions differ in length they consume it differently, so later steps' samples are
  not paired draws (``CRN`` below, recorded in compare.json).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from gcpo_train.config import TrainConfig

CRN = {
    "query_order": "same in every arm of a seed (TRL's RepeatSampler seeded by seed)",
    "first_step_samples": "same in every arm of a seed (one torch RNG state at the first generation; "
    "on a GPU up to non-deterministic kernels)",
    "later_steps": "TRL samples from one running torch generator: once completion lengths differ between "
    "arms, their later samples are not paired draws",
}
# what the compare reads itself, so build_trl_trainer does not warn that TRL ignores it
READ_HERE = ("eval_max_new_tokens", "eval_n")


def check_trl_arms(arms) -> None:
    """Refuse, before anything runs, the arms TRL cannot run (``gcpo_train.trl.trl_refused``)."""
    from gcpo_train.trl import trl_modulators, trl_refused

    refused = {arm: why for arm, why in trl_refused().items() if arm in arms}
    if refused:
        reasons = "; ".join(f"{arm!r}: {why}" for arm, why in refused.items())
        raise ValueError(
            f"--backend trl cannot run the arm(s) {', '.join(map(repr, refused))} ({reasons}). Drop them from "
            f"--modulators (TRL runs {', '.join(trl_modulators())}) or compare with --backend gcpo"
        )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError(
            "gcpo compare --backend trl trains its arms one after another in one process; run it without "
            "accelerate launch (one GPU per comparison), or launch gcpo train --backend trl per arm"
        )


class TaskRewards:
    """TRL reward function: gcpo's task reward (or ``reward_fn(task, completion, references)``)
    of each completion; keeps the query ids of the batch it scored last (they label the rollouts)."""

    __name__ = "task_reward"  # TRL names a reward function's metrics by it

    def __init__(self, reward_fn=None):
        self.reward_fn, self.query_ids = reward_fn, []

    def __call__(self, completions, references, task, query_id, **_):
        from gcpo_analysis.rewards import task_reward
        from gcpo_train.trl import completion_text

        fn = self.reward_fn or task_reward
        self.query_ids = [str(q) for q in query_id]
        return [fn(t, completion_text(c), list(r)) for c, r, t in zip(completions, references, task)]


def _latest_checkpoint(out: Path):
    """(state, path) of the newest complete TRL checkpoint-N in ``out`` (HF's Trainer writes its
    trainer_state.json last), or (None, None); an incomplete newer one is named in a warning."""
    import re
    import warnings

    found = sorted(
        (int(m.group(1)), p)
        for p in (out.iterdir() if out.is_dir() else [])
        if p.is_dir() and (m := re.fullmatch(r"checkpoint-(\d+)", p.name))
    )
    for step, path in reversed(found):
        if (path / "trainer_state.json").exists():
            return {"step": step}, str(path)
        warnings.warn(f"{path} has no trainer_state.json (a save cut short); resuming from an older one", stacklevel=2)
    return None, None


def train_arm(
    cfg: TrainConfig, *, eval_queries, eval_every: int, queries=None, reward_fn=None, embedder=None, judge=None
) -> None:
    """Train ``cfg`` (backend trl) in its run folder ``cfg.output_dir``, resuming it when it holds
    an interrupted run, with the held-out evaluations; the last step is always evaluated."""
    import torch

    from gcpo_train.runfiles.run_folder import RunFolder, write_run_info
    from gcpo_train.trl.backend import build_trl_trainer

    out = Path(cfg.output_dir)
    cfg = dataclasses.replace(cfg, eval_every=0, eval_n=None, resume=False, overwrite=False)  # read here, not by TRL
    with RunFolder(out) as folder:
        state, _ = _latest_checkpoint(out)
        resume = state is not None or (out / "log.jsonl").exists()
        _, resume_from = folder.prepare(
            resume=resume, overwrite=False, load_latest=lambda: _latest_checkpoint(out), config_hash=cfg.config_hash()
        )
        write_run_info(
            out,
            {"config": cfg.to_dict(), "config_hash": cfg.config_hash(), "backend": "trl", "resumed_from": resume_from},
        )
        # trained to the end (killed after its last checkpoint): HF's Trainer resumed there would
        # train one step past max_steps, so the policy is only restored, and evaluated if need be
        finished = state is not None and state["step"] >= cfg.steps
        if finished and (out / "eval" / f"step_{cfg.steps:06d}.predictions.parquet").exists():
            return
        torch.manual_seed(cfg.seed)  # a random tiny: model is drawn as the base policy's evaluation draws it
        rewards = TaskRewards(reward_fn)
        trainer = build_trl_trainer(
            cfg, embedder=embedder, judge=judge, queries=queries, reward_funcs=rewards, read_elsewhere=READ_HERE
        )
        if finished:
            trainer._load_from_checkpoint(resume_from)  # HF Trainer's loader: adapters, full weights, shards
            evaluate_policy(trainer.model, trainer.processing_class, cfg, eval_queries, cfg.steps)
            return
        trainer.add_callback(_run_callback(folder, trainer, rewards, cfg, eval_queries, eval_every))
        trainer.train(resume_from_checkpoint=resume_from)


def evaluate_policy(model, tokenizer, cfg: TrainConfig, eval_queries, step: int) -> None:
    """Greedy held-out evaluation of the current policy into ``eval/step_XXXXXX`` (as the gcpo loop)."""
    from gcpo_train.evaluation.evaluate import evaluate

    evaluate(
        model,
        tokenizer=tokenizer,
        config=cfg,
        queries=eval_queries,
        output=Path(cfg.output_dir) / "eval" / f"step_{step:06d}.json",
        progress=False,
    )


def _run_callback(folder, trainer, rewards: TaskRewards, cfg: TrainConfig, eval_queries, eval_every: int):
    """The TrainerCallback that marks the folder started, writes log.jsonl rows and each step's
    rollouts, and evaluates every ``eval_every`` steps and at the last step."""
    import numpy as np
    import pandas as pd
    from transformers import TrainerCallback

    from gcpo_analysis.frames import write_frame

    out = Path(cfg.output_dir)

    class CompareRun(TrainerCallback):
        seen = None  # the generation batch written last (TRL reuses one for num_iterations steps)

        def on_step_end(self, args, state, control, **kwargs):
            folder.started()
            last = trainer.gcpo_last
            if last is not None and last is not self.seen:
                self.seen = last
                G = cfg.group_size
                n = len(last["texts"])
                frame = pd.DataFrame(
                    {
                        "query_id": rewards.query_ids,
                        "rollout_id": np.tile(np.arange(G), n // G),
                        "completion": last["texts"],
                        "reward": last["rewards"],
                        "weight": np.repeat(last["weights"], G),
                        "dataset": cfg.dataset,
                        "step": state.global_step,
                    }
                )
                write_frame(frame, out / "rollouts" / f"step_{state.global_step:06d}.parquet")
            # the last step too, before HF's Trainer saves its checkpoint: a run whose last checkpoint
            # exists has been evaluated at its last step
            if (eval_every and state.global_step % eval_every == 0) or state.global_step == cfg.steps:
                evaluate_policy(trainer.model, trainer.processing_class, cfg, eval_queries, state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:  # a training log (the run's closing summary has none)
                row = {"step": state.global_step, "reward_mean": logs["reward"]}
                row.update({k: v for k, v in logs.items() if k not in row and isinstance(v, (int, float))})
                with open(out / "log.jsonl", "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")

    return CompareRun()
