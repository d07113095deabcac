"""The GRPO loop with a pluggable advantage modulator (paper Section 3.4, Appendix E/F).

Per step: sample queries → one batched ``generate`` (G rollouts per prompt) → task rewards →
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
- Distributed (``accelerate launch``): each process generates whole groups (queries are dealt
  round-robin to processes), so a group never spans processes and its weights are computed
  locally from all G rollouts; DDP averages gradients; scalar metrics are averaged across
  processes; only the main process writes logs and checkpoints (each process its own frame).
- Cost: modulators that read token entropy / log-probs / ratio variance before the update
  (se, eg_spo, r2vpo) and μ > 1 need one extra no-grad policy pass (``time_logprobs``); the
  others take old log-probs from the gradient pass itself (ρ ≡ 1, as π_old = π_θ there).
- Determinism: every step re-seeds python/numpy/torch from (seed, step) and the data order is a
  function of (seed, epoch), so a resumed run reproduces an uninterrupted one on CPU.
"""
from __future__ import annotations

import json
import random
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.frames import write_text
from gcpo_analysis.models import require

from . import checkpoint as ckpt
from .config import TrainConfig
from .loss import grpo_loss, masked_var, token_logprobs_and_entropy
from .modulation import Measurer
from .policy import Reference, generate_groups, load_model_and_tokenizer, wrap_lora
from .runlog import read_log
from .splits import load_split, query_indices

TIMING_KEYS = ("time_generate", "time_reward", "time_logprobs", "time_measure", "time_forward_backward",
               "time_step", "time_total", "tokens_per_s")


def step_seed(seed: int, step: int) -> int:
    """A 32-bit seed derived from (seed, step) with numpy's SeedSequence."""
    return int(np.random.SeedSequence([int(seed), int(step)]).generate_state(1)[0])


class GRPOTrainer:
    """GRPO/GCPO trainer. ``model``/``tokenizer``/``queries``/``reward_fn``/``embedder``/
    ``judge`` may be injected (tests, notebooks); otherwise they come from the config.

    reward_fn(task, completion, references) -> float in [r_min, r_max]; default
    ``gcpo_analysis.rewards.task_reward``. A rollout whose reward function raises gets a
    warning, reward 0 and is counted in the log (``reward_failures``).
    prompt_fn(row, tokenizer, max_context_tokens) -> str; default
    ``gcpo_analysis.data.build_prompt`` (the tokenizer's chat template).
    """

    def __init__(self, config: TrainConfig, *, model=None, tokenizer=None, queries=None,
                 eval_queries=None, reward_fn=None, prompt_fn=None, embedder=None, judge=None):
        torch = require("torch")
        accelerate = require("accelerate")
        if config.backend == "vllm":
            raise NotImplementedError("backend 'vllm' is not implemented for the gcpo loop; use backend: trl "
                                      "(TRL's vLLM generation) or backend: gcpo")
        if config.backend == "trl":
            raise ValueError("backend 'trl' runs through gcpo_train.trl_backend (gcpo train --backend trl), "
                             "not this loop")
        self.config = cfg = config
        self.accelerator = accelerate.Accelerator(cpu=(cfg.device == "cpu"))
        self.out = Path(cfg.output_dir)
        torch.manual_seed(cfg.seed)  # LoRA initialisation
        if model is None:
            model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer = tokenizer
        if cfg.use_lora:
            model = wrap_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
        else:
            for p in model.parameters():
                p.requires_grad_(True)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.measurer = Measurer(cfg, embedder=embedder, judge=judge)
        self.need_ratio = "ratio_var" in self.measurer.needs
        self.reference = Reference(model, cfg.use_lora) if (cfg.beta > 0 or self.need_ratio) else None
        if self.reference is not None and self.reference.copy is not None:
            self.reference.copy.to(self.accelerator.device)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        total = cfg.steps * cfg.num_iterations
        warm = cfg.warmup_steps * cfg.num_iterations

        def schedule(i):
            if warm and i < warm:
                return (i + 1) / warm
            return 1.0 if cfg.lr_schedule == "constant" else max(0.0, (total - i) / max(1, total - warm))

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.params = params
        self.queries = queries if queries is not None else load_split(cfg, cfg.train_split)
        if cfg.n_train:
            self.queries = self.queries.iloc[: cfg.n_train].reset_index(drop=True)
        if len(self.queries) == 0:
            raise ValueError(f"no training queries for dataset {cfg.dataset!r}")
        self._eval_queries = eval_queries
        if reward_fn is None:
            from gcpo_analysis.rewards import task_reward as reward_fn
        self.reward_fn = reward_fn
        if prompt_fn is None:
            from gcpo_analysis.data import build_prompt as prompt_fn
        self.prompt_fn = prompt_fn
        self.start_step = 1
        self.resumed_from = None
        self._reporter = None

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

    def _step_queries(self, step: int) -> pd.DataFrame:
        cfg, acc = self.config, self.accelerator
        idx = query_indices(len(self.queries), cfg.seed, (step - 1) * cfg.queries_per_step, cfg.queries_per_step)
        return self.queries.iloc[idx[acc.process_index::acc.num_processes]].reset_index(drop=True)

    def _forward(self, model, batch, rows, grad: bool, entropy: bool = True):
        torch = require("torch")
        ctx = torch.enable_grad() if grad else torch.no_grad()
        with ctx:
            return token_logprobs_and_entropy(model, batch.input_ids[rows], batch.attention_mask[rows],
                                              batch.n_completion, self.config.temperature, entropy)

    def _chunks(self, n: int):
        mb = self.config.micro_batch_size
        return [slice(i, min(n, i + mb)) for i in range(0, n, mb)]

    def _no_grad_logprobs(self, batch, reference: bool = False):
        torch = require("torch")
        n = batch.input_ids.shape[0]
        logps, ents = [], []
        for rows in self._chunks(n):
            if reference:
                with self.reference.model(self.policy) as ref:
                    lp, _ = self._forward(ref, batch, rows, grad=False, entropy=False)
            else:
                lp, ent = self._forward(self.model, batch, rows, grad=False)
                ents.append(ent)
            logps.append(lp)
        return torch.cat(logps), (torch.cat(ents) if ents else None)

    def _rewards(self, qrows: pd.DataFrame, texts: list[str], G: int):
        from gcpo_analysis.rewards import extract_answer, math_fallbacks

        before = sum(math_fallbacks().values())
        rewards, answers, failed = [], [], []
        for j, text in enumerate(texts):
            row = qrows.iloc[j // G]
            answers.append(extract_answer(text, row["task"]) or "")
            try:
                r = float(self.reward_fn(row["task"], text, list(row["references"])))
                ok = True
            except Exception as err:  # one bad rollout must not kill a 2000-step run
                warnings.warn(f"reward function raised on query {row['query_id']!r} rollout {j % G}: "
                              f"{type(err).__name__}: {err}; reward set to 0", RuntimeWarning)
                r, ok = 0.0, False
            rewards.append(r)
            failed.append(not ok)
        # answers the math grader compared as strings (over its size/cost guards), for the log
        fallbacks = sum(math_fallbacks().values()) - before
        return np.asarray(rewards), answers, np.asarray(failed), fallbacks

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> tuple[dict, pd.DataFrame]:
        """One generation batch and its μ updates; returns (log row, rollouts frame)."""
        torch = require("torch")
        cfg, G = self.config, self.config.group_size
        t = {"start": time.perf_counter()}
        self._seed(step)
        qrows = self._step_queries(step)
        prompts = [self.prompt_fn(r, self.tokenizer, max_context_tokens=cfg.max_context_tokens)
                   for _, r in qrows.iterrows()]
        self.model.eval()
        batch = generate_groups(self.policy, self.tokenizer, prompts, G, max_new_tokens=cfg.max_new_tokens,
                                temperature=cfg.temperature, top_p=cfg.top_p,
                                max_prompt_tokens=cfg.max_prompt_tokens, device=self.accelerator.device)
        t["generate"] = time.perf_counter()
        rewards, answers, failed, math_fallbacks = self._rewards(qrows, batch.texts, G)
        t["reward"] = time.perf_counter()

        needs = self.measurer.needs
        mask = batch.completion_mask
        old_logp = ent = ref_logp = None
        if cfg.num_iterations > 1 or needs & {"token_entropy", "logprobs", "ratio_var"}:
            old_logp, ent = self._no_grad_logprobs(batch)
        if self.reference is not None:
            ref_logp, _ = self._no_grad_logprobs(batch, reference=True)
        ratio_var = None
        if self.need_ratio:
            ratio_var = masked_var(torch.exp(old_logp - ref_logp), mask).cpu().numpy()
        t["logprobs"] = time.perf_counter()
        n_q, mf = len(qrows), mask.float()
        tok_ent = None if ent is None else ((ent * mf).sum(-1) / mf.sum(-1).clamp(min=1)).cpu().numpy()
        seq_lp = None if old_logp is None else (old_logp * mf).sum(-1).cpu().numpy()
        n_tok = mf.sum(-1).clamp(min=1).cpu().numpy()
        split = lambda a: None if a is None else [a[k * G:(k + 1) * G] for k in range(n_q)]  # noqa: E731
        texts = batch.texts if cfg.full_completion else answers
        advs, infos, mstats = self.measurer.modulate_groups(
            split(rewards), split(texts), split(answers), token_entropy=split(tok_ent),
            logprobs=split(seq_lp), ratio_var=split(ratio_var),
            n_tokens=split(n_tok))
        adv = torch.tensor(np.concatenate(advs), dtype=torch.float32, device=mask.device)
        t["measure"] = time.perf_counter()

        n = mask.shape[0]
        n_tokens = float(mask.sum())
        lr = float(self.scheduler.get_last_lr()[0])  # the rate this step's first update uses
        self.model.train()
        grad_norms, losses, kls, clips, fb, st = [], [], [], [], 0.0, 0.0
        for it in range(cfg.num_iterations):
            t_fb = time.perf_counter()
            loss_sum, kl_it, clip_it, lp_grad, ent_grad = 0.0, [], [], [], []
            for rows in self._chunks(n):
                logp, e = self._forward(self.model, batch, rows, grad=True, entropy=ent is None)
                old = logp.detach() if old_logp is None else old_logp[rows]
                out = grpo_loss(logp, old, None if ref_logp is None else ref_logp[rows], adv[rows], mask[rows],
                                beta=cfg.beta, clip_epsilon=cfg.clip_epsilon,
                                aggregation=cfg.loss_aggregation, n_seqs=n, n_tokens=n_tokens)
                self.accelerator.backward(out.loss)
                loss_sum += float(out.loss.detach())
                kl_it.append(out.kl)
                clip_it.append(out.clip_frac)
                if it == 0 and ent is None:
                    lp_grad.append(logp.detach())
                    ent_grad.append(e)
            t_st = time.perf_counter()
            fb += t_st - t_fb
            if cfg.max_grad_norm and cfg.max_grad_norm > 0:
                gn = self.accelerator.clip_grad_norm_(self.params, cfg.max_grad_norm)
            else:
                gn = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in self.params if p.grad is not None]))
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            st += time.perf_counter() - t_st
            grad_norms.append(float(gn))
            losses.append(loss_sum)
            kls.append(float(torch.cat(kl_it).mean()))
            clips.append(float(torch.cat(clip_it).mean()))
            if lp_grad:
                lp_all, ent_all = torch.cat(lp_grad), torch.cat(ent_grad)
                seq_lp = (lp_all * mf).sum(-1).cpu().numpy()
                tok_ent = ((ent_all * mf).sum(-1) / mf.sum(-1).clamp(min=1)).cpu().numpy()
        total = time.perf_counter() - t["start"]

        R = rewards.reshape(n_q, G)
        row = {"step": step, "reward_mean": float(R.mean()), "reward_std": float(R.std()),
               "frac_zero_std": float((R.std(axis=1) == 0).mean()), "loss": losses[0], "kl": kls[0],
               "grad_norm": grad_norms[0], "clip_frac": clips[-1], "lr": lr,
               "adv_abs_mean": float(adv.abs().mean()), "completion_tokens": n_tokens / n,
               "reward_failures": int(failed.sum()), "reward_math_fallbacks": int(math_fallbacks)}
        for key in sorted({k for info in infos for k in info}):
            row[key] = float(np.mean([info[key] for info in infos if key in info]))
        for k, v in mstats.items():
            if k in ("cluster_judge_calls", "cluster_pairs_scored"):
                row[k] = float(v)
        row.update({"time_generate": t["generate"] - t["start"], "time_reward": t["reward"] - t["generate"],
                    "time_logprobs": t["logprobs"] - t["reward"],
                    "time_measure": t["measure"] - t["logprobs"], "time_forward_backward": fb,
                    "time_step": st, "time_total": total, "tokens_per_s": n_tokens / total})
        row = self._reduce(row)
        frame = pd.DataFrame({
            "query_id": np.repeat(qrows["query_id"].astype(str).to_numpy(), G),
            "rollout_id": np.tile(np.arange(G), n_q), "completion": batch.texts, "answer": answers,
            "reward": rewards, "references": [list(r) for r in np.repeat(qrows["references"].to_numpy(), G)],
            "token_entropy": tok_ent, "logprob": seq_lp, "n_tokens": n_tok.astype(int), "advantage": adv.cpu().numpy(),
            "reward_failed": failed, "dataset": cfg.dataset, "step": step})
        from gcpo_analysis.rewards import is_success

        frame["success"] = [bool(is_success(task, r)) for task, r in
                            zip(np.repeat(qrows["task"].to_numpy(), G), rewards)]
        if ratio_var is not None:
            frame["ratio_var"] = ratio_var
        return row, frame

    def _reduce(self, row: dict) -> dict:
        acc = self.accelerator
        if acc.num_processes == 1:
            return row
        torch = require("torch")
        keys = [k for k, v in row.items() if k != "step" and isinstance(v, (int, float))]
        vec = torch.tensor([float(row[k]) for k in keys], device=acc.device)
        vec = acc.reduce(vec, reduction="mean")
        return {**row, **{k: float(v) for k, v in zip(keys, vec.tolist())}}

    # ------------------------------------------------------------------ run
    def _prepare_output(self) -> None:
        """Resume from the newest usable checkpoint, or start a fresh run; never lose a run's
        files silently: a rerun over an existing run folder needs ``overwrite``."""
        cfg, main = self.config, self.accelerator.is_main_process
        log = self.out / "log.jsonl"
        if cfg.resume:
            state, latest = ckpt.load_latest_usable(self.out, model=self.policy, optimizer=self.optimizer,
                                                    scheduler=self.scheduler, config=cfg)
            rows = read_log(log) if log.exists() else []
            if latest is None:
                if rows:
                    raise ValueError(f"--resume: {self.out} has a log.jsonl with {len(rows)} step(s) but no "
                                     f"checkpoint to resume from; pass --overwrite to start over, or choose "
                                     f"another output_dir")
                warnings.warn(f"--resume: no checkpoint in {self.out}/checkpoints; starting at step 1")
                return
            self.start_step = state["step"] + 1
            self.resumed_from = str(latest)
            if main and log.exists():  # drop steps logged after the checkpoint (and a partial line)
                keep = [r for r in rows if r["step"] <= state["step"]]
                write_text(log, "".join(json.dumps(r) + "\n" for r in keep))
            return
        existing = [p for p in (log, self.out / "checkpoints", self.out / "run.json", self.out / "rollouts") if p.exists()]
        if existing and not cfg.overwrite:
            raise ValueError(f"{self.out} already holds a run ({', '.join(p.name for p in existing)}); pass "
                             f"--resume to continue it, --overwrite to replace it, or choose another output_dir")
        if existing and main:
            for p in existing:
                shutil.rmtree(p) if p.is_dir() else p.unlink()

    def _write_run_info(self) -> None:
        import torch
        import transformers

        info = {"config": self.config.to_dict(), "config_hash": self.config.config_hash(),
                "measurer": self.measurer.describe(), "device": str(self.accelerator.device),
                "num_processes": self.accelerator.num_processes, "resumed_from": self.resumed_from,
                "start_step": self.start_step, "report_to": list(self.config.report_to),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
        (self.out / "run.json").write_text(json.dumps(info, indent=2, default=str))

    def _log(self, row: dict, frame: pd.DataFrame) -> None:
        from gcpo_analysis.frames import validate_rollouts, write_frame

        cfg, acc = self.config, self.accelerator
        if cfg.save_rollouts:
            suffix = "" if acc.num_processes == 1 else f".rank{acc.process_index}"
            write_frame(validate_rollouts(frame), self.out / "rollouts" / f"step_{row['step']:06d}{suffix}.parquet")
        if not acc.is_main_process or row["step"] % cfg.log_every:
            return
        with open(self.out / "log.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        if self._reporter is not None:  # the report_to backends
            self._reporter.log(row)

    def train(self) -> list[dict]:
        """Run steps start_step..steps; returns the logged rows of this call."""
        cfg, acc = self.config, self.accelerator
        self.out.mkdir(parents=True, exist_ok=True)
        self._prepare_output()
        # every process checks the folder before the main one writes run.json into it
        acc.wait_for_everyone()
        if cfg.report_to and acc.is_main_process:
            from .reporting import Reporter

            self._reporter = Reporter(cfg.report_to, self.out, cfg.to_dict(), self.out.name)
        if acc.is_main_process:
            self._write_run_info()
        tqdm = require("tqdm").tqdm
        rows = []
        bar = tqdm(range(self.start_step, cfg.steps + 1), disable=not (cfg.progress and acc.is_main_process),
                   desc=f"gcpo {cfg.modulator}", initial=self.start_step - 1, total=cfg.steps)
        for step in bar:
            row, frame = self.train_step(step)
            self._log(row, frame)
            rows.append(row)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}", kl=f"{row['kl']:.4f}")
            if cfg.eval_every and step % cfg.eval_every == 0 and acc.is_main_process:
                self.evaluate(tag=f"step_{step:06d}")
            if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or step == cfg.steps:
                acc.wait_for_everyone()
                if acc.is_main_process:
                    ckpt.save_checkpoint(self.out, step, model=self.policy, optimizer=self.optimizer,
                                         scheduler=self.scheduler, config=cfg,
                                         data_position=step * cfg.queries_per_step)
                    ckpt.prune_checkpoints(self.out, cfg.save_total_limit)
        if self._reporter is not None:
            self._reporter.close()
        return rows

    def evaluate(self, tag: str = "final") -> dict:
        """Greedy evaluation of the current policy on eval_split (``eval/<tag>.json``)."""
        from .evaluate import evaluate

        queries = self._eval_queries if self._eval_queries is not None else load_split(self.config, self.config.eval_split)
        return evaluate(self.policy, self.config.dataset, queries=queries, n=self.config.eval_n,
                        tokenizer=self.tokenizer, config=self.config,
                        output=self.out / "eval" / f"{tag}.json", progress=False)
