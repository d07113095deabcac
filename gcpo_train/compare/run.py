"""``gcpo compare``: one config trained under several modulators (arms) and seeds, evaluated on
one fixed held-out set, and compared with GRPO (``none``) in paired differences.

Layout of the comparison folder ``OUT``::

    OUT/compare.json                 what was asked (config identity, arms, seeds, eval settings)
    OUT/base/<key>.predictions.parquet   the base policy's held-out scores (step 0)
    OUT/runs/<arm>/seed_<s>/         an ordinary run folder (gcpo train's rules: locked,
                                     resumable, refusals); done.json once trained and evaluated;
                                     bot_rd:shuffled's is runs/bot_rd-shuffled/ (compare.layout)
    OUT/results.parquet              arm, seed, step, query_id, score (long form; step 0 = base)
    OUT/summary.md / summary.csv / figures/   (gcpo_train.compare.report)

- **Two engines.** Every arm runs through gcpo's own loop (backend gcpo) or TRL's GRPOTrainer
  (backend trl, ``compare_trl``: the same folder rules, evaluation and records; arms TRL cannot
  run are refused before anything runs). A config's ``compare:`` mapping gives the defaults of
  --modulators, --seeds, --eval_every, --eval_n and --split_seed (configs/compare/*.yaml).
- **Common random numbers.** Every arm of seed s trains with ``seed = s``: the LoRA
  initialisation, the query order (``splits.query_indices``) and each step's sampling seeds
  (``trainer.step_seed``) are the same across arms, so their first-step samples are identical and
  later differences come from the updates alone. Under TRL the query order and the first step's
  samples are shared, later samples are not paired draws (``compare_trl.CRN``; compare.json
  records which holds).
- **One held-out set.** ``split_seed`` (default: the config's, else 0) fixes the train/test
  split for every seed and arm; evaluation is greedy on the first ``eval_n`` held-out queries,
  every ``eval_every`` steps and at the last step, with the same decoding for every arm.
- **Stop and resume.** The folder is locked while a comparison runs; rerunning the same command
  skips finished runs (``done.json``), resumes an interrupted one from its newest checkpoint,
  and refuses a folder made from another configuration.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import warnings
from pathlib import Path

import pandas as pd

from gcpo_analysis.frames import write_frame, write_text
from gcpo_train.compare.evaluations import check_same_queries, eval_step, read_scores
from gcpo_train.compare.layout import arm_seed_folder
from gcpo_train.compare.record import read_record
from gcpo_train.compare.settings import check_count
from gcpo_train.config import TrainConfig

REFERENCE_ARM = "none"
# compare.json fields recorded since the coupled fp32 protocol: a folder made before lacks them
RECORDED_SINCE_FP32_PROTOCOL = ("bf16_sampling", "evaluation", "equivalence_margin")


def run_config(base: TrainConfig, arm: str, seed: int, out: Path, eval_every: int, eval_n: int | None, split_seed: int):
    """The TrainConfig of one arm-seed run inside the comparison folder ``out``: the arm's modulator,
    and its dose as ``alpha_base`` where the arm names one (``bot_rd:alpha5``, ``shuffled.parse_arm``)."""
    from gcpo_analysis.measures.shuffled import parse_arm

    folder = arm_seed_folder(out, arm, seed)
    modulator, alpha = parse_arm(arm)
    return dataclasses.replace(
        base,
        modulator=modulator,
        alpha_base=base.alpha_base if alpha is None else alpha,
        seed=seed,
        split_seed=split_seed,
        output_dir=str(folder),
        eval_every=eval_every,
        eval_n=eval_n,
        resume=(folder / "log.jsonl").exists(),
        overwrite=False,
    )


def base_key(config: TrainConfig, seed: int) -> str:
    """A random tiny test model is drawn from the seed; any real policy is the same for all seeds."""
    return f"seed_{seed}" if config.model.startswith("tiny:") else "all_seeds"


class Comparison:
    """Arms x seeds of one config (``base``) in the folder ``out``.

    trainer_kwargs go to every ``GCPOLoopTrainer`` (queries, eval_queries, reward_fn, embedder:
    tests and notebooks); the held-out queries are ``trainer_kwargs["eval_queries"]`` when given.
    """

    def __init__(
        self,
        base: TrainConfig,
        out,
        modulators,
        seeds,
        *,
        eval_every: int = 0,
        eval_n: int | None = 200,
        split_seed: int | None = None,
        trainer_kwargs: dict | None = None,
        bf16_sampling: bool = False,
        equivalence_margin: float = 0.1,
    ):
        """Every argument is checked here, before anything is written (``compare.json`` included):
        a refused value must not become part of the folder's record."""
        from gcpo_train.compare.plan import check_sampling

        check_sampling(base, bf16_sampling)  # pairs stay paired: fp32 sampling unless opted out
        if not 0 < equivalence_margin < 1:
            raise ValueError(
                f"equivalence_margin must be in (0, 1) (a share of GRPO's score), got {equivalence_margin}"
            )
        self.bf16_sampling, self.equivalence_margin = bool(bf16_sampling), float(equivalence_margin)
        self.base, self.out = base, Path(out)
        self.modulators, self.seeds = list(modulators), list(seeds)
        if not self.modulators or not self.seeds:
            raise ValueError("gcpo compare needs at least one modulator (--modulators) and one seed (--seeds)")
        for i, s in enumerate(self.seeds):
            if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
                raise ValueError(f"--seeds: a training seed must be an integer >= 0, got {s!r}")
            self.seeds[i] = int(s)
        for name, values in (("--modulators", self.modulators), ("--seeds", self.seeds)):
            if len(set(values)) != len(values):
                raise ValueError(f"{name} lists a value twice: {values}")
        for key, value in (("eval_every", eval_every), ("eval_n", eval_n), ("split_seed", split_seed)):
            if value is not None:
                check_count(f"--{key}", key, value)
        split_seed = split_seed if split_seed is not None else (base.split_seed or 0)
        for arm in self.modulators:  # each run's config validated now, not after hours of the first arm
            from gcpo_analysis.measures.shuffled import check_arm_name

            check_arm_name(arm)  # before the config: a path is refused as a path
            for seed in self.seeds:
                run_config(base, arm, seed, self.out, int(eval_every), eval_n, split_seed)
        if base.backend not in ("gcpo", "hf", "trl"):
            raise ValueError(
                f"gcpo compare runs the gcpo loop (backend gcpo) or TRL (backend trl), not backend {base.backend!r}"
            )
        if base.backend == "trl":
            from gcpo_train.compare.trl_arm import check_trl_arms

            check_trl_arms(self.modulators)
        self.eval_every, self.eval_n = int(eval_every), eval_n
        self.split_seed = int(split_seed)
        self.trainer_kwargs = dict(trainer_kwargs or {})

    # ------------------------------------------------------------------ bookkeeping
    def spec(self) -> dict:
        identity = {k: v for k, v in self.base.identity().items() if k not in ("modulator", "seed", "split_seed")}
        return {
            "config": identity,
            "modulators": self.modulators,
            "seeds": self.seeds,
            "eval_every": self.eval_every,
            "eval_n": self.eval_n,
            "split_seed": self.split_seed,
            "steps": self.base.steps,
            "backend": self.base.backend,
            "common_random_numbers": self.crn(),
            "bf16_sampling": self.bf16_sampling,
            "evaluation": "fp32 (greedy; bf16 kernels are never used to evaluate)",
            "equivalence_margin": self.equivalence_margin,
        }

    def crn(self) -> dict:
        """What the arms of one seed share (compare.json's record; not part of the folder's identity)."""
        if self.base.backend == "trl":
            from gcpo_train.compare.trl_arm import CRN

            return CRN
        return {
            "query_order": "same in every arm of a seed (splits.query_indices)",
            "first_step_samples": "same in every arm of a seed (each group seeded from (seed, step))",
            "later_steps": "each group seeded from (seed, step): arms differ only through their updates",
        }

    def _check_spec(self) -> None:
        """A folder holds one comparison: more arms or seeds may be added, nothing else changed."""
        from gcpo_train.compare.data_identity import check_data, data_record

        path = self.out / "compare.json"
        new = {**self.spec(), "data": data_record(self.base, self.trainer_kwargs)}
        if path.exists():
            old = read_record(path)
            check_data(self.out, old.get("data"), new["data"])  # the data by content, not only by name
            old_cfg, new_cfg = old.get("config", {}), json.loads(json.dumps(new["config"], default=str))
            changed = sorted(k for k in set(old_cfg) | set(new_cfg) if old_cfg.get(k) != new_cfg.get(k))
            changed += sorted(
                k
                for k in new
                if k not in ("modulators", "seeds", "config", "backend", "common_random_numbers", "data")
                and (k in old or k not in RECORDED_SINCE_FP32_PROTOCOL)  # older folders lack these records
                and old.get(k) != new[k]
            )  # the backend is in the config's identity
            if changed:
                raise ValueError(
                    f"{self.out} holds a comparison made with other settings ({', '.join(changed)} differ); "
                    "use another --output folder, or the settings it was made with"
                )
            new["modulators"] = list(dict.fromkeys(old["modulators"] + self.modulators))
            new["seeds"] = list(dict.fromkeys(old["seeds"] + self.seeds))
        write_text(path, json.dumps(new, indent=2, default=str) + "\n")

    def heldout(self) -> pd.DataFrame:
        from gcpo_train.evaluation.splits import load_split

        queries = self.trainer_kwargs.get("eval_queries")
        if queries is None:
            cfg = dataclasses.replace(self.base, split_seed=self.split_seed)
            queries = load_split(cfg, cfg.eval_split)
        return queries.iloc[: self.eval_n] if self.eval_n else queries

    # ------------------------------------------------------------------ running
    def run(self, progress: bool = True, workers: int = 1) -> dict:
        """Train and evaluate what is missing, then write results, summary and figures (results and
        summary after every finished run too). ``workers`` > 1 trains that many arm-seed runs at
        once, in processes (``compare.workers``)."""
        from gcpo_train.compare.workers import check_threads, check_workers, threads_per_worker, train_in_workers
        from gcpo_train.runfiles.run_folder import take_lock

        check_workers(workers)
        self.out.mkdir(parents=True, exist_ok=True)
        lock = take_lock(self.out / ".gcpo.lock", self.out / ".gcpo.owner.json", f"comparison folder {self.out}")
        try:
            self.heldout()  # the held-out data read before the folder's record is written
            self._check_spec()
            if workers > 1:
                for seed in self.seeds:
                    self.evaluate_base(seed, progress)
                train_in_workers(self, workers, progress)
                return self.report()
            for seed in self.seeds:  # seed-major: each finished seed is a complete paired set
                self.evaluate_base(seed, progress)
                if self.unfinished(seed):
                    check_threads(self.out, seed, threads_per_worker(1))
                for arm in self.modulators:
                    self.train_arm(arm, seed, progress)
                    self.report_between_runs(arm, seed)
            return self.report()
        finally:
            lock.release()

    def unfinished(self, seed: int) -> list[str]:
        """The arms of ``seed`` whose run has no done.json yet."""
        return [arm for arm in self.modulators if not (self.run_folder(arm, seed) / "done.json").exists()]

    def run_folder(self, arm: str, seed: int) -> Path:
        """The run folder of one arm-seed (``run_config``'s output_dir)."""
        cfg = run_config(self.base, arm, seed, self.out, self.eval_every, self.eval_n, self.split_seed)
        return Path(cfg.output_dir)

    def listed(self) -> tuple[list[str], list[int]]:
        """The arms and seeds of the whole comparison: those its compare.json lists (asked for by
        every run of this folder so far), then any of this call's that it does not. A run that
        adds a seed trains only that seed but reports on all of them."""
        path = self.out / "compare.json"
        old = read_record(path) if path.exists() else {}
        arms = list(dict.fromkeys([*old.get("modulators", []), *self.modulators]))
        seeds = list(dict.fromkeys([*(int(s) for s in old.get("seeds", [])), *self.seeds]))
        return arms, seeds

    def report_between_runs(self, arm: str, seed: int) -> None:
        """The tables after one finished run, so a stopped comparison has them (the figure, seconds
        to draw, comes with the final report). If they fail (a file they read, code changed under a
        long comparison), a warning names the run and the error and training goes on: the runs
        still to train do not read the tables, and a comparison of hours should not stop for them.
        The final ``report`` is not caught, so an error that persists is raised there."""
        try:
            self.report(figures=False)
        except Exception as err:  # named in the warning; the final report raises it again
            warnings.warn(
                f"{self.out}: the report after {arm} seed {seed} failed ({type(err).__name__}: {err}); "
                "training goes on, and the final report is written (or raises) when the runs end",
                RuntimeWarning,
                stacklevel=2,
            )

    def report(self, figures: bool = True) -> dict:
        """results.parquet, summary.md/csv and (``figures``) figures/ from the evaluations finished
        so far, over every arm and seed of the comparison (``listed``)."""
        from gcpo_train.compare.report import write_report

        results = self.results()
        write_frame(results, self.out / "results.parquet")
        return write_report(self.out, results, self.listed()[0], REFERENCE_ARM, figures=figures)

    def evaluate_base(self, seed: int, progress: bool = True) -> Path:
        """The base policy's held-out scores (step 0), greedy, as every checkpoint is evaluated."""
        cfg = run_config(self.base, REFERENCE_ARM, seed, self.out, self.eval_every, self.eval_n, self.split_seed)
        path = self.out / "base" / f"{base_key(cfg, seed)}.json"
        if path.with_name(path.stem + ".predictions.parquet").exists():
            return path
        from gcpo_train.evaluation.evaluate import evaluate

        model, tokenizer = self.base_policy(seed)
        evaluate(
            model,
            tokenizer=tokenizer,
            config=cfg,
            queries=self.heldout(),
            output=path,
            progress=progress,
            device=cfg.device,
        )
        return path

    def base_policy(self, seed: int):
        """(model, tokenizer) of the base policy of ``seed``, on the device the runs train on."""
        from gcpo_analysis.models import require
        from gcpo_train.model.policy import load_model_and_tokenizer

        torch = require("torch")
        torch.manual_seed(seed)  # the trainer's draw of a random tiny model
        model, tokenizer = load_model_and_tokenizer(self.base.model, self.base.dtype)
        # device None: accelerate's and TRL's choice, cuda if available
        model.to(self.base.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return model, tokenizer

    def train_arm(self, arm: str, seed: int, progress: bool = True) -> Path:
        """Train one arm-seed run (resuming it when interrupted) and evaluate its last step."""
        cfg = run_config(self.base, arm, seed, self.out, self.eval_every, self.eval_n, self.split_seed)
        folder = Path(cfg.output_dir)
        done = folder / "done.json"
        if done.exists() or (folder / "run.json").exists():  # finished or started: by its own record
            check_run(folder, cfg)
        if done.exists():
            return folder
        cfg = dataclasses.replace(cfg, progress=progress and cfg.progress)
        kwargs = {
            "eval_queries": self.heldout(),
            **{k: v for k, v in self.trainer_kwargs.items() if k != "eval_queries"},
        }
        if cfg.backend == "trl":  # the same folder rules, evaluation and records through TRL
            from gcpo_train.compare.trl_arm import train_arm

            train_arm(cfg, eval_every=self.eval_every, **kwargs)
        else:
            from gcpo_train.loop.trainer import GCPOLoopTrainer

            trainer = GCPOLoopTrainer(cfg, **kwargs)
            # killed after its last checkpoint, during its final evaluation: resuming would train
            # past the last step (refused), so the trained policy is restored and evaluated
            if not _restore_finished(trainer, folder, cfg):
                trainer.train()
            final = folder / "eval" / f"step_{cfg.steps:06d}.predictions.parquet"
            if not final.exists():  # steps not a multiple of eval_every: the last step is always evaluated
                trainer.evaluate(tag=f"step_{cfg.steps:06d}")
        from gcpo_analysis.models import require

        threads = require("torch").get_num_threads()  # pairing needs one count per comparison (compare.workers)
        write_text(done, json.dumps({"arm": arm, "seed": seed, "steps": cfg.steps, "threads": threads}) + "\n")
        return folder

    # ------------------------------------------------------------------ results
    def results(self) -> pd.DataFrame:
        """Long form (arm, seed, step, query_id, score) of every finished evaluation of the
        comparison's arms and seeds (``listed``); the base policy is arm 'base' at step 0 of each
        seed."""
        parts: list[tuple[Path, pd.DataFrame]] = []  # (file, its scores): a shared base file once per seed
        arms, seeds = self.listed()
        for seed in seeds:
            cfg = run_config(self.base, REFERENCE_ARM, seed, self.out, self.eval_every, self.eval_n, self.split_seed)
            base = self.out / "base" / f"{base_key(cfg, seed)}.predictions.parquet"
            if base.exists():
                parts.append((base, read_scores(base, "base", seed, 0)))
            for arm in arms:
                folder = arm_seed_folder(self.out, arm, seed)
                evaluations = sorted((folder / "eval").glob("step_*.predictions.parquet"))
                if evaluations:  # a run of another comparison (compare.json lost or replaced) is not reported
                    check_run(
                        folder,
                        run_config(self.base, arm, seed, self.out, self.eval_every, self.eval_n, self.split_seed),
                    )
                for path in evaluations:
                    parts.append((path, read_scores(path, arm, seed, eval_step(path))))
        columns = ["arm", "seed", "step", "query_id", "score"]
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
        check_same_queries(parts)
        return pd.concat([frame for _, frame in parts], ignore_index=True)[columns]


def check_run(folder: Path, cfg: TrainConfig) -> None:
    """A run folder of the comparison holds the run ``cfg`` describes: its ``run.json`` records the
    same configuration (every identity field, and ``steps``), or a ValueError names each field
    that differs. A run is never trusted by its folder name alone: with compare.json lost and a
    setting changed, the runs of the earlier comparison must not be reported as the new one."""
    path = folder / "run.json"
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))["config"]
        if not isinstance(recorded, dict):
            raise TypeError("'config' is not a mapping")
    except FileNotFoundError:
        raise ValueError(
            f"{folder} holds evaluations but no run.json, so it cannot be checked against this comparison; "
            "move the folder out, or use another --output folder"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a readable run record ({type(err).__name__}: {err})") from None
    expected = {**cfg.identity(), "steps": cfg.steps}
    differ = [k for k, v in expected.items() if json.dumps(recorded.get(k), default=str) != json.dumps(v, default=str)]
    if differ:
        shown = ", ".join(f"{k}: run={recorded.get(k)!r} vs comparison={expected[k]!r}" for k in differ[:6])
        raise ValueError(
            f"{folder} was trained with other settings than this comparison ({shown}"
            f"{', ...' if len(differ) > 6 else ''}); use the settings it was made with, or another --output folder"
        )


def _restore_finished(trainer, folder: Path, cfg: TrainConfig) -> bool:
    """Restore into ``trainer`` the run's checkpoint of its last step, when it has one (a run
    killed after its last checkpoint); False when it has none and the run must train on."""
    from gcpo_train.runfiles import checkpoint as ckpt
    from gcpo_train.runfiles.run_folder import RunFolder

    latest = ckpt.latest_checkpoint(folder)
    try:
        if latest is None or ckpt.read_state(latest)["step"] < cfg.steps:
            return False
    except ckpt.UnreadableCheckpoint:
        return False  # the trainer falls back to an older checkpoint, with its warning
    with RunFolder(folder) as run:
        run.started()  # a failure below leaves the trained run as it is
        state, _ = ckpt.load_latest_usable(
            folder, model=trainer.policy, optimizer=trainer.optimizer, scheduler=trainer.scheduler, config=cfg
        )
    return state is not None and state["step"] >= cfg.steps
