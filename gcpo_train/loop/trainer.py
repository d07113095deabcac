"""The GRPO loop with a pluggable advantage modulator (paper Section 3.4, Appendix E/F).

Per step: sample queries → ``generate`` G rollouts per prompt → task rewards →
what the modulator needs (embeddings, clusters, token entropy, log-probs, ratio variance) →
``modulate`` per group → clipped surrogate + β·k3 KL → AdamW step. Every step writes a row to
``output_dir/log.jsonl`` and its rollouts frame to ``output_dir/rollouts/step_000012.parquet``.

Design choices where the paper is silent:
- Advantages are computed once per generation batch and kept for the μ = ``num_iterations``
  updates (GRPO Algorithm 1).
- R²VPO's ρ_{i,t}: with μ = 1 the ratio to the sampling policy is identically 1 (π_old = π_θ at
  the only update), so Var_t ρ would always be 0 and R²VPO would be plain GRPO. We therefore
  measure ρ_{i,t} = π_θ(y_t)/π_ref(y_t) against the KL reference (the base policy), computed
  before the update; it is 0 at step 1 (LoRA starts at the base model) and grows as the policy
  drifts. This is what R²VPO sees; the ratio to π_old is reported as ``clip_frac`` only.
- Distributed (``accelerate launch``): a step's queries are dealt to processes in contiguous
  blocks and each process generates whole groups, so a group's weight is computed from all G
  rollouts on one process. A run on N processes equals a run on one (tested with 2 gloo
  processes): each group is sampled from its own seed (seed, step, query position); the loss is
  normalised by the step's rollout and token counts over all processes (DDP's gradient mean
  undone by a factor N); gradients sync once per update (``no_sync`` on all but the last
  micro-batch); the log row is computed from every process's gathered values, not averaged
  means; the main process writes the log, the step's whole rollouts frame and checkpoints.
- The rollouts frame's ``token_entropy`` and ``logprob``, and the token entropies and sequence
  log-probs the modulators read (se, eg_spo), are π_θ's own, at temperature 1; the loss's ρ and
  KL use log-probs at the sampling temperature, as TRL's. Both come from the same logits
  (``logprobs.TokenLogprobs``); the frame records the sampling ``temperature`` beside them.
- Cost: modulators that read token entropy / log-probs / ratio variance before the update
  (se, eg_spo, r2vpo) and μ > 1 need one extra no-grad policy pass (``time_logprobs``); the
  others take old log-probs from the gradient pass itself (ρ ≡ 1, as π_old = π_θ there).
- Determinism: every step re-seeds python/numpy/torch from (seed, step), every group's sampling
  from (seed, step, query position), and the data order is a function of (seed, epoch), so a
  resumed run reproduces an uninterrupted one on CPU.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.models import require
from gcpo_train.config import TrainConfig
from gcpo_train.evaluation.splits import load_split, query_indices
from gcpo_train.loop.loss import masked_var
from gcpo_train.loop.rewarding import reward_rollouts
from gcpo_train.loop.setup import (
    check_backend,
    load_policy,
    make_accelerator,
    make_optimizer,
    make_reference,
    shared_prompt,
    training_queries,
)
from gcpo_train.loop.step_data import (
    BeforeUpdate,
    StepRollouts,
    StepTimer,
    UpdateStats,
    group_columns,
    rollouts_frame,
    summarize_step,
)
from gcpo_train.loop.update import grpo_update
from gcpo_train.model.logprobs import TokenLogprobs, cat_token_logprobs, chunk_logprobs, rollout_chunks
from gcpo_train.modulation import GroupModulator
from gcpo_train.runfiles import checkpoint as ckpt
from gcpo_train.runfiles.run_folder import RunFolder, write_run_info
from gcpo_train.sampling.generate import generate_groups
from gcpo_train.sampling.registry import make_kernels

# the third entry of step_seed for the shuffled arms' permutation: far above any group position
# (the sampling seeds are step_seed(seed, step, position)), so the two never share a seed
SHUFFLE_STREAM = 2**31 - 1


def step_seed(seed: int, step: int, *more: int) -> int:
    """A 32-bit seed derived from (seed, step, ...) with numpy's SeedSequence."""
    return int(np.random.SeedSequence([int(seed), int(step), *map(int, more)]).generate_state(1)[0])


class GCPOLoopTrainer:
    """The own GRPO/GCPO training loop (``gcpo train --backend gcpo``; not TRL's ``GRPOTrainer``,
    whose GCPO subclass is ``gcpo_train.trl.GCPOTrainer``). ``model``/``tokenizer``/``queries``/
    ``reward_fn``/``embedder``/``judge`` may be injected (tests, notebooks); otherwise they come
    from the config.

    reward_fn(task, completion, references) -> float in [r_min, r_max]; default
    ``gcpo_analysis.rewards.task_reward``. A rollout whose reward function raises gets a
    warning, reward 0 and is counted in the log (``reward_failures``).
    prompt_fn(row, tokenizer, max_context_tokens, template) -> str; default
    ``gcpo_analysis.prompts.build_prompt`` (the tokenizer's chat template).
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        model=None,
        tokenizer=None,
        queries=None,
        eval_queries=None,
        reward_fn=None,
        prompt_fn=None,
        embedder=None,
        judge=None,
    ):
        check_backend(config)
        self.config = cfg = config
        self.accelerator = make_accelerator(cfg)
        self.out = Path(cfg.output_dir)
        # the sampler's kernels (packed weights kept across steps); None: transformers generate
        self.kernels = make_kernels(cfg.sampling_kernels, self.accelerator.device)
        model, self.tokenizer = load_policy(cfg, model, tokenizer)
        # what was read (the packaged policy's converted copy, or the GGUF file and why): run.json
        self.policy_load = getattr(model, "gcpo_policy_load", None)
        self.share_prompt, self.share_prompt_fallback = shared_prompt(cfg, model)
        self.group_modulator = GroupModulator(cfg.modulation_settings(), embedder=embedder, judge=judge)
        self.need_ratio = "ratio_var" in self.group_modulator.needs
        self.reference = make_reference(cfg, model, self.need_ratio, self.accelerator.device)
        self.params, optimizer, self.scheduler = make_optimizer(cfg, model)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.queries = training_queries(cfg, queries)
        self._eval_queries = eval_queries
        if reward_fn is None:
            from gcpo_analysis.rewards import task_reward as reward_fn
        self.reward_fn = reward_fn
        if prompt_fn is None:
            from gcpo_analysis.prompts import build_prompt as prompt_fn
        self.prompt_fn = prompt_fn
        self.start_step = 1
        self.resumed_from: str | None = None

    # ------------------------------------------------------------------ helpers
    @property
    def policy(self):
        return self.accelerator.unwrap_model(self.model)

    def _seed(self, step: int) -> None:
        torch = require("torch")
        s = step_seed(self.config.seed, step)
        random.seed(s)
        np.random.seed(s)
        torch.manual_seed(s)

    def _step_queries(self, step: int) -> tuple[pd.DataFrame, list[int]]:
        """This process's block of the step's queries and their positions in the step."""
        cfg, acc = self.config, self.accelerator
        idx = query_indices(len(self.queries), cfg.seed, (step - 1) * cfg.queries_per_step, cfg.queries_per_step)
        positions = np.array_split(np.arange(len(idx)), acc.num_processes)[acc.process_index]
        return self.queries.iloc[idx[positions]].reset_index(drop=True), positions.tolist()

    def _forward(self, model, batch, chunk, grad: bool, policy_stats: bool = False, on_shared=None) -> TokenLogprobs:
        """Log-probs at the sampling temperature (the loss's); with ``policy_stats`` also π_θ's own
        log-probs and entropies at temperature 1 (the rollouts frame's), from the same logits.
        ``on_shared``: ``GradVarTracker.on_shared`` of a tracked shared-prompt chunk."""
        torch = require("torch")
        with torch.enable_grad() if grad else torch.no_grad():
            return chunk_logprobs(
                model,
                batch,
                chunk,
                self.config.temperature,
                prompt_model=self.accelerator.unwrap_model(model),
                policy_stats=policy_stats,
                on_shared=on_shared,
            )

    def _chunks(self, batch, share_prompt: bool | None = None) -> list[tuple]:
        share = self.share_prompt if share_prompt is None else share_prompt
        return rollout_chunks(batch, self.config.group_size, self.config.micro_batch_size, share)

    def _no_grad_logprobs(self, batch, reference: bool = False) -> TokenLogprobs:
        """One no-grad pass over the batch: π_ref's log-probs, or the policy's with its own
        (temperature 1) log-probs and entropies."""
        parts = []
        for chunk in self._chunks(batch):
            if reference:
                assert self.reference is not None  # asked for only when there is one
                with self.reference.model(self.policy) as ref:
                    parts.append(self._forward(ref, batch, chunk, grad=False))
            else:
                parts.append(self._forward(self.model, batch, chunk, grad=False, policy_stats=True))
        return cat_token_logprobs(parts)

    # ------------------------------------------------------------------ one step, in phases
    def train_step(self, step: int) -> tuple[dict, pd.DataFrame]:
        """One generation batch and its μ updates; returns (log row, rollouts frame)."""
        timer = StepTimer()
        self._seed(step)
        with timer("generate"):
            rollouts = self._generate(step)
        with timer("reward"):
            self._reward(rollouts)
        with timer("logprobs"):
            before = self._logprobs_before_update(rollouts.batch)
        with timer("measure"):
            advantages, infos, cluster_stats = self._modulate(rollouts, before, step)
        study = None
        if self.config.track_gradvar == "full":  # the study's V at θ_old, its own pass per group
            from gcpo_train.loop.gradvar_tracking import study_variances

            with timer("gradvar_full"):
                study = study_variances(self.policy, rollouts.batch, rollouts.rewards, self.config.group_size)
        update = self._update(rollouts.batch, advantages, before)
        if study is not None:
            assert update.gradvar is not None  # track_gradvar: full tracks the training gradients too
            update.gradvar = [{**g, **s} for g, s in zip(update.gradvar, study)]
        timer.seconds.update(forward_backward=update.time_forward_backward, step=update.time_step)
        if update.gradvar is not None:  # part of forward_backward, reported on its own
            timer.seconds.update(gradvar=update.time_gradvar, gradvar_prompt=update.time_gradvar_prompt)
        row = self._log_row(step, rollouts, advantages, infos, cluster_stats, update, timer)
        frame = rollouts_frame(
            step, rollouts, before, advantages.cpu().numpy(), self.config.dataset, self.config.temperature
        )
        if update.gradvar is not None:
            frame = group_columns(frame, update.gradvar, infos, advantages.cpu().numpy(), self.config.group_size)
        return row, frame

    def _generate(self, step: int) -> StepRollouts:
        """Sample G rollouts for each of this process's queries of the step."""
        cfg = self.config
        queries, positions = self._step_queries(step)
        prompts = [
            self.prompt_fn(r, self.tokenizer, max_context_tokens=cfg.max_context_tokens, template=cfg.prompt)
            for _, r in queries.iterrows()
        ]
        self.model.eval()
        batch = generate_groups(
            self.policy,
            self.tokenizer,
            prompts,
            cfg.group_size,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_prompt_tokens=cfg.max_prompt_tokens,
            device=self.accelerator.device,
            seeds=[step_seed(cfg.seed, step, k) for k in positions],
            share_prompt=self.share_prompt,
            kernels=self.kernels,
        )
        return StepRollouts(queries=queries, batch=batch)

    def _reward(self, rollouts: StepRollouts) -> None:
        reward_rollouts(rollouts, self.reward_fn, self.config.group_size)

    def _logprobs_before_update(self, batch) -> BeforeUpdate:
        """Token log-probabilities under π_old and π_ref, computed only when something reads them
        before the update: μ > 1, a modulator that needs token entropy, log-probs or ratio
        variance (an extra no-grad pass), β > 0 (the reference pass). π_old and π_ref are at the
        sampling temperature (the loss's); the rollout stats the modulators read are π_θ's own."""
        torch = require("torch")
        cfg, needs, mask = self.config, self.group_modulator.needs, batch.completion_mask
        before = BeforeUpdate(n_tokens=mask.float().sum(-1).clamp(min=1).cpu().numpy())
        if cfg.num_iterations > 1 or needs & {"token_entropy", "logprobs", "ratio_var"}:
            old = self._no_grad_logprobs(batch)
            before.old_logp = old.logp
            before.set_rollout_stats(old.policy_logp, old.policy_entropy, mask)
        if self.reference is not None:
            before.ref_logp = self._no_grad_logprobs(batch, reference=True).logp
        if self.need_ratio:
            before.ratio_var = masked_var(torch.exp(before.old_logp - before.ref_logp), mask).cpu().numpy()
        return before

    def _modulate(self, rollouts: StepRollouts, before: BeforeUpdate, step: int = 0):
        """Modulated advantages Ã of every rollout (``modulate`` per group, Section 3.4)."""
        torch = require("torch")
        cfg, G, n_groups = self.config, self.config.group_size, len(rollouts.queries)

        def by_group(values):
            return None if values is None else [values[k * G : (k + 1) * G] for k in range(n_groups)]

        texts = rollouts.batch.texts if cfg.full_completion else rollouts.answers
        advantages, infos, cluster_stats = self.group_modulator.modulate_groups(
            by_group(rollouts.rewards),
            by_group(texts),
            by_group(rollouts.answers),
            token_entropy=by_group(before.token_entropy),
            logprobs=by_group(before.seq_logprob),
            ratio_var=by_group(before.ratio_var),
            n_tokens=by_group(before.n_tokens),
            shuffle_seed=step_seed(cfg.seed, step, SHUFFLE_STREAM),  # used by '<modulator>:shuffled' arms only
            names=[f"query {q!r} at step {step}" for q in rollouts.queries["query_id"]],
        )
        advantages = torch.tensor(
            np.concatenate(advantages), dtype=torch.float32, device=rollouts.batch.completion_mask.device
        )
        return advantages, infos, cluster_stats

    def _update(self, batch, advantages, before: BeforeUpdate) -> UpdateStats:
        return grpo_update(self, batch, advantages, before)

    def _log_row(
        self,
        step: int,
        rollouts: StepRollouts,
        advantages,
        infos: list[dict],
        cluster_stats: dict,
        update: UpdateStats,
        timer: StepTimer,
    ) -> dict:
        """The step's ``log.jsonl`` row (``summarize_step``) from every process's values."""
        from accelerate.utils import gather_object

        local = dict(
            rewards=rollouts.rewards,
            reward_failed=rollouts.reward_failed,
            math_fallbacks=rollouts.math_fallbacks,
            advantages=advantages.cpu().numpy(),
            n_tokens=rollouts.batch.completion_mask.sum(-1).cpu().numpy(),
            infos=infos,
            cluster_stats=cluster_stats,
            loss=update.loss,
            kl=update.kl[0],
            clip_frac=update.clip_frac[-1],
            grad_norm=update.grad_norm[0],
            lr=update.lr,
            gradvar=update.gradvar,
            seconds={**timer.seconds, "total": timer.total()},
        )
        parts = gather_object([local]) if self.accelerator.num_processes > 1 else [local]
        return summarize_step(step, parts, self.config.group_size)

    # ------------------------------------------------------------------ run
    def _prepare_output(self, folder: RunFolder) -> None:
        self.start_step, self.resumed_from = folder.prepare(
            resume=self.config.resume,
            overwrite=self.config.overwrite,
            config_hash=self.config.config_hash(),
            steps=self.config.steps,
            load_latest=lambda: ckpt.load_latest_usable(
                self.out, model=self.policy, optimizer=self.optimizer, scheduler=self.scheduler, config=self.config
            ),
        )

    def _log(self, row: dict, frame: pd.DataFrame) -> None:
        from accelerate.utils import gather_object

        from gcpo_analysis.frames import validate_rollouts, write_frame

        cfg, acc = self.config, self.accelerator
        if cfg.save_rollouts:  # the step's whole frame, in query order, whatever the process count
            frames = gather_object([frame]) if acc.num_processes > 1 else [frame]
            if acc.is_main_process:
                write_frame(
                    validate_rollouts(pd.concat(frames, ignore_index=True)),
                    self.out / "rollouts" / f"step_{row['step']:06d}.parquet",
                )
        if not acc.is_main_process or row["step"] % cfg.log_every:
            return
        with open(self.out / "log.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        if cfg.report_to:  # the report_to backends: Accelerate's trackers (reporting.trackers)
            from gcpo_train.reporting import scalars

            acc.log(scalars(row), step=row["step"])

    def train(self) -> list[dict]:
        """Run steps start_step..steps in the locked run folder (``run_folder.RunFolder``: one run
        per folder; a start that fails before its first logged step leaves the folder as found);
        returns the logged rows of this call."""
        with RunFolder(self.out, is_main=self.accelerator.is_main_process) as folder:
            return self._train(folder)

    def _train(self, folder: RunFolder) -> list[dict]:
        cfg, acc = self.config, self.accelerator
        self.out.mkdir(parents=True, exist_ok=True)
        self._prepare_output(folder)
        # every process checks the folder before the main one writes run.json into it
        acc.wait_for_everyone()
        if cfg.report_to:  # the trackers open here, not before the folder was checked (main process only)
            acc.init_trackers("gcpo")
        if acc.is_main_process:
            write_run_info(
                self.out,
                {
                    "config": cfg.to_dict(),
                    "config_hash": cfg.config_hash(),
                    "group_modulator": self.group_modulator.describe(),
                    "device": str(acc.device),
                    "num_processes": acc.num_processes,
                    "resumed_from": self.resumed_from,
                    "start_step": self.start_step,
                    "report_to": list(cfg.report_to or ()),
                    "shared_prompt": {"on": self.share_prompt, "fallback": self.share_prompt_fallback},
                    "policy_load": self.policy_load,
                },
            )  # validate made it a list
        tqdm = require("tqdm").tqdm
        rows = []
        bar = tqdm(
            range(self.start_step, cfg.steps + 1),
            disable=not (cfg.progress and acc.is_main_process),
            desc=f"gcpo {cfg.modulator}",
            initial=self.start_step - 1,
            total=cfg.steps,
        )
        for step in bar:
            row, frame = self.train_step(step)
            ckpt.check_finite_weights(self.policy, step)  # a diverged step stops here, never saved
            self._log(row, frame)
            folder.started()
            rows.append(row)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}", kl=f"{row['kl']:.4f}")
            if cfg.eval_every and step % cfg.eval_every == 0 and acc.is_main_process:
                self.evaluate(tag=f"step_{step:06d}")
            if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or step == cfg.steps:
                acc.wait_for_everyone()
                if acc.is_main_process:
                    ckpt.save_checkpoint(
                        self.out,
                        step,
                        model=self.policy,
                        optimizer=self.optimizer,
                        scheduler=self.scheduler,
                        config=cfg,
                        data_position=step * cfg.queries_per_step,
                    )
                    ckpt.prune_checkpoints(self.out, cfg.save_total_limit)
        for tracker in acc.trackers:  # not end_training(), which also ends the process group
            tracker.finish()
        return rows

    def evaluate(self, tag: str = "final") -> dict:
        """Greedy evaluation of the current policy on eval_split (``eval/<tag>.json``)."""
        from gcpo_train.evaluation.evaluate import evaluate

        queries = (
            self._eval_queries if self._eval_queries is not None else load_split(self.config, self.config.eval_split)
        )
        return evaluate(
            self.policy,
            self.config.dataset,
            queries=queries,
            n=self.config.eval_n,
            tokenizer=self.tokenizer,
            config=self.config,
            output=self.out / "eval" / f"{tag}.json",
            progress=False,
            kernels=self.kernels,
        )
