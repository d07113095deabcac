"""``gcpo align``: the update-alignment study at one snapshot of a policy, resumable.

    gcpo align --config configs/align_nqa_spans.yaml --snapshot nqa_step20 \\
        --checkpoint runs/align_nqa_train/checkpoints/step_000020 --output runs/update_alignment
    gcpo align --restat figures/update_alignment        # the tables again, from the frames alone

A snapshot samples a pool of ``n_pool`` training queries (seeded, the same queries at every
snapshot of one config), computes each group's gradient (``gradients.group_gradient``) and writes
it to its float32 row of ``gradients.npy`` (``align.rows``: file writes, no memory map), then the
group's part (``work/<snapshot>/parts/group_00012.json``): a rerun skips the groups whose part
exists. When every group is done it writes the P × P Gram (float64, in row blocks of that file),
the per-group frame (rewards, reward spread, ‖g_q‖², ω(q) of every group-level modulator from
``gcpo_analysis.measures``), deletes the gradient file (unless ``keep_gradients``) and re-runs
the statistics over every finished snapshot of ``output``
(``gcpo_analysis.study.alignment``).

The reference gradient is the leave-batch-out mean of the pool (``n_ref: 0``, the default: every
group serves as a batch member and as reference for the batches it is not in) or the mean over a
disjoint reference pool of ``n_ref`` further queries.
"""

from __future__ import annotations

import gc
import json
import logging
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.frames import write_frame, write_text
from gcpo_analysis.knobs import check_knobs, knob, shared
from gcpo_analysis.provenance import environment
from gcpo_train.align import rows as gradient_rows
from gcpo_train.align.rows import gram_of

log = logging.getLogger(__name__)

# the smallest pool the statistics take: a batch of 4 (gcpo_analysis.study.alignment.BATCH_SIZES)
# and one group outside it, the leave-batch-out reference (a test holds the two together)
MIN_POOL = 5


@dataclass
class AlignConfig:
    """One snapshot of the update-alignment study."""

    config: str = knob("", "Training config YAML (gcpo train's fields): the run's protocol, decoding and loss.")
    snapshot: str = knob("", "Name of this snapshot (a file name: letters, digits, '_', '-').")
    checkpoint: str | None = knob(None, "Checkpoint folder of the run.", none="the base policy (step 0)")
    output: str = knob("runs/update_alignment", "Study folder (resumable; snapshots accumulate in it).")
    n_pool: int = knob(
        128, "P: pool groups whose Gram is kept (batches are drawn from them; the smallest is 4).", ge=MIN_POOL
    )
    n_ref: int = knob(0, "R: a disjoint reference pool of R groups; 0 = the leave-batch-out mean of the pool.", ge=0)
    seed: int = shared("seed", 0, help="Seed of the pool's queries and of each group's sampling.")
    keep_gradients: bool = knob(False, "Keep the gradient file (gradients.npy) after the Gram is written.")
    reverse: bool = knob(
        False,
        "Work through the pool from its last position: a second process on the same snapshot "
        "(each skips the groups the other has done).",
    )
    finish_now: bool = knob(
        False,
        "Stop sampling: finish the snapshot with the groups done so far (the pool becomes the done "
        "prefix of pool positions; recorded in the card as n_pool_done). For a run out of time.",
    )
    progress: bool = knob(True, "Show a tqdm progress bar.")

    def __post_init__(self):
        check_knobs(self)
        if not self.config:
            raise ValueError("--config: give the training config YAML of the run")
        if not self.snapshot or not all(c.isalnum() or c in "_-" for c in self.snapshot):
            raise ValueError(
                f"--snapshot must be a non-empty name of letters, digits, '_' and '-', got {self.snapshot!r}"
            )


def pool_queries(queries: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """``n`` distinct queries drawn without replacement (seeded): the pool, then the reference pool."""
    if n > len(queries):
        raise ValueError(f"n_pool + n_ref = {n} is more than the {len(queries)} training queries")
    idx = np.random.default_rng([seed, 36]).choice(len(queries), size=n, replace=False)
    return queries.iloc[idx].reset_index(drop=True)


def group_seed(seed: int, k: int) -> int:
    """Sampling seed of pool position k (the same at every snapshot: paired rollouts streams)."""
    return int(np.random.SeedSequence([int(seed), 36, int(k)]).generate_state(1)[0])


# how a snapshot is computed, not what: left out of the identity a resumed snapshot must match
# (``config``: its path; its contents are the identity's ``train``, so ./c.yaml resumes c.yaml)
NON_IDENTITY = ("progress", "keep_gradients", "finish_now", "reverse", "config")


def _identity(align: dict) -> dict:
    return {k: v for k, v in align.items() if k not in NON_IDENTITY}


def _differences(saved: dict, now: dict, cfg: AlignConfig) -> str:
    """The settings that differ between a snapshot's saved identity and this command's, by source."""
    out = []
    for part, source in (("align", "--"), ("train", f"{cfg.config}: ")):
        for k in sorted(set(saved[part]) | set(now[part])):
            if saved[part].get(k) != now[part].get(k):
                out.append(f"{source}{k} {saved[part].get(k)!r} in the snapshot, {now[part].get(k)!r} now")
    return "; ".join(out)


# what makes a checkpoint's policy the config's: the base model and the trained parameters' shape
POLICY_FIELDS = ("model", "dtype", "use_lora", "lora_r", "lora_alpha", "lora_target_modules")


def check_checkpoint(path: str, train=None) -> None:
    """Refuse, naming ``--checkpoint``, a path that is no checkpoint folder (what ``load_trained`` reads),
    or, given the config ``train``, one whose run trained another policy (``POLICY_FIELDS``): its
    snapshot would be filed under the config's protocol."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"--checkpoint {path}: {'a file, not a' if folder.exists() else 'no such'} checkpoint folder")
    missing = [name for name in ("config.json", "trainable.pt") if not (folder / name).is_file()]
    if missing:
        raise ValueError(
            f"--checkpoint {path} is not a checkpoint folder (it lacks {', '.join(missing)}); give a run's "
            f"checkpoints/step_N"
        )
    if train is None:
        return
    from gcpo_train.runfiles.checkpoint import saved_config

    saved = saved_config(folder)
    differ = [
        f"{k} {getattr(saved, k)!r} there, {getattr(train, k)!r} in the config"
        for k in POLICY_FIELDS
        if getattr(saved, k) != getattr(train, k)
    ]
    if differ:
        raise ValueError(f"--checkpoint {path} was trained on another policy than --config's: {'; '.join(differ)}")


def _part(work: Path, k: int) -> Path:
    """The part file of pool position ``k``: it exists once the group's gradient row is on disk."""
    return work / "parts" / f"group_{k:05d}.json"


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def run_snapshot(cfg: AlignConfig) -> Path:
    """Compute (or resume) one snapshot; returns its folder of work files."""
    from gcpo_analysis.study.alignment import check_study_folder, snapshot_paths
    from gcpo_train.align.gradients import group_gradient, load_policy, trainable
    from gcpo_train.config import load_config
    from gcpo_train.evaluation.splits import load_split
    from gcpo_train.sampling.registry import make_kernels

    tqdm = __import__("tqdm").tqdm
    train = load_config(cfg.config)
    out = Path(cfg.output)
    check_study_folder(out, "--output")
    if cfg.checkpoint is not None:
        check_checkpoint(cfg.checkpoint, train)
    work = out / "work" / cfg.snapshot
    card_path = work / "align.json"
    # as JSON reads it back (lists, not tuples): a resumed snapshot compares equal
    identity = json.loads(json.dumps({"align": _identity(asdict(cfg)), "train": train.to_dict()}))
    if card_path.exists():
        saved = json.loads(card_path.read_text())["identity"]
        saved = {"align": _identity(saved["align"]), "train": saved["train"]}
        if saved != identity:
            raise ValueError(
                f"{work} holds a snapshot of other settings ({card_path}): {_differences(saved, identity, cfg)}; "
                f"use another --snapshot or --output"
            )
    finished = snapshot_paths(out, cfg.snapshot)["card"]
    # finished, its gradients gone (not --keep_gradients): going on would write a Gram of zeros over
    # it; with them kept, a snapshot finished early (--finish-now) goes on to the full pool
    if finished.exists() and not (work / "gradients.npy").exists():
        if statistics_current(out):
            log.info(
                "snapshot %s is finished (%s); nothing to do (gcpo align --restat %s redoes the tables)",
                cfg.snapshot,
                finished,
                out,
            )
        else:  # finished, but stopped during its statistics: the tables lack it or predate it
            from gcpo_analysis.study.alignment import restat

            log.info("snapshot %s is finished; its statistics were not: writing the tables of %s", cfg.snapshot, out)
            restat(out)
        return work
    if any((work / "parts").glob("group_*.json")) and not (work / "gradients.npy").exists():
        raise ValueError(
            f"{work}: group parts without their gradients.npy (deleted?); remove {work} to start the snapshot again"
        )
    if cfg.finish_now:
        if cfg.n_ref:
            raise ValueError("--finish-now needs the leave-batch-out reference (n_ref 0)")
        done = [k for k in range(cfg.n_pool) if _part(work, k).exists()]
        if len(done) < MIN_POOL:
            raise ValueError(f"{work}: {len(done)} groups done, fewer than {MIN_POOL}; nothing to finish")
        dim = gradient_rows.shape(work / "gradients.npy")[1]
        finish_snapshot(cfg, train, work, dim, done)
        return work
    queries = pool_queries(load_split(train, train.train_split), cfg.n_pool + cfg.n_ref, cfg.seed)
    n = len(queries)
    if (work / "gradients.npy").exists() and all(_part(work, k).exists() for k in range(n)):
        # every group sampled (a run stopped while finishing): no model needed for the Gram
        finish_snapshot(cfg, train, work, gradient_rows.shape(work / "gradients.npy")[1], list(range(n)))
        return work
    model, tok = load_policy(train, cfg.checkpoint)
    # only now, with the inputs checked: a refused command leaves no card that would refuse the next
    (work / "parts").mkdir(parents=True, exist_ok=True)
    if not card_path.exists():
        write_text(card_path, json.dumps({"identity": identity}, indent=1, sort_keys=True))
    dim = sum(p.numel() for p in trainable(model))
    sizes = {"trained_parameters": dim, "all_parameters": sum(p.numel() for p in model.parameters())}
    write_text(work / "sizes.json", json.dumps(sizes))
    kernels = make_kernels(train.sampling_kernels)
    if not (work / "gradients.npy").exists():
        gradient_rows.create(work / "gradients.npy", n, dim)
    todo = [k for k in range(n) if not _part(work, k).exists()]
    if cfg.reverse:
        todo = todo[::-1]
    for k in tqdm(todo, desc=f"align {cfg.snapshot}", disable=not cfg.progress, initial=n - len(todo), total=n):
        if _part(work, k).exists():  # done meanwhile by a second process
            continue
        row = queries.iloc[k].to_dict()
        g = group_gradient(model, tok, train, row, group_seed(cfg.seed, k), kernels=kernels)
        try:
            gradient_rows.write_row(work / "gradients.npy", k, g.gradient)  # on disk before its part says it is done
        except FileNotFoundError:
            if not finished.exists():
                raise
            # a second process (--reverse) did this group too and finished the snapshot meanwhile
            log.info("snapshot %s was finished by another process", cfg.snapshot)
            return work
        part = dict(
            position=k,
            role="pool" if k < cfg.n_pool else "reference",
            query_id=str(row["query_id"]),
            rewards=g.rewards.tolist(),
            texts=g.texts,
            answers=g.answers,
            token_entropy=g.token_entropy.tolist(),
            seq_logprob=g.seq_logprob.tolist(),
            n_tokens=g.n_tokens.tolist(),
            grad_norm2=float(np.dot(g.gradient.astype(np.float64), g.gradient.astype(np.float64))),
            seconds_generate=g.seconds_generate,
            seconds_gradient=g.seconds_gradient,
        )
        write_text(_part(work, k), json.dumps(part))  # atomic: a killed run keeps whole parts
    # the model (and the kernels' packed copy of it) released before the Gram's float64 blocks are
    # formed: with both, a snapshot's process peaked at 4.5 GB
    del model, tok, kernels
    gc.collect()
    if all(_part(work, k).exists() for k in range(n)):
        finish_snapshot(cfg, train, work, dim, list(range(n)))
    return work


def statistics_current(out: Path) -> bool:
    """Whether the study's tables (summary.parquet, written last of them together by ``restat``)
    hold every finished snapshot and are newer than each one's frames and card: False after a
    command killed during its statistics, which a rerun then completes."""
    from gcpo_analysis.study.alignment import snapshot_paths, snapshots

    summary = Path(out) / "summary.parquet"
    if not summary.is_file():
        return False
    names = snapshots(out)
    try:
        tabled = set(pd.read_parquet(summary, columns=["snapshot"])["snapshot"].astype(str))
    except (OSError, ValueError, KeyError):
        return False
    written = summary.stat().st_mtime_ns
    newest = max(
        (p.stat().st_mtime_ns for n in names for p in snapshot_paths(out, n).values() if p.exists()), default=0
    )
    return set(names) <= tabled and written >= newest


def finish_snapshot(cfg: AlignConfig, train, work: Path, dim: int, done: list[int]) -> None:
    """``finish_groups`` under the snapshot's finishing lock (``work/finish.lock``): two processes
    on one snapshot (``--reverse``) both reach the end, and the second, once the first has
    finished the snapshot (its card written, its gradient file deleted), has nothing left to do."""
    import fcntl

    from gcpo_analysis.study.alignment import snapshot_paths

    with open(work / "finish.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the process dies
        card = snapshot_paths(Path(cfg.output), cfg.snapshot)["card"]
        if card.exists() and not (work / "gradients.npy").exists():  # the other process finished it
            log.info("snapshot %s was finished by another process", cfg.snapshot)
            if not statistics_current(Path(cfg.output)):
                from gcpo_analysis.study.alignment import restat

                restat(Path(cfg.output))
            return
        finish_groups(cfg, train, work, dim, done)


def finish_groups(cfg: AlignConfig, train, work: Path, dim: int, done: list[int]) -> None:
    """The Gram, the per-group frame and the card of a snapshot from its groups ``done``."""
    from gcpo_analysis.study.alignment import check_snapshot, restat, snapshot_paths
    from gcpo_train.align.weights import pool_weights

    t0 = time.perf_counter()
    parts = [json.loads(_part(work, k).read_text()) for k in done]
    K = gram_of(work / "gradients.npy", done)
    sizes = json.loads((work / "sizes.json").read_text())
    frame = pool_weights(parts, train)
    frame.insert(0, "snapshot", cfg.snapshot)
    paths = snapshot_paths(Path(cfg.output), cfg.snapshot)
    check_snapshot(frame, K, f"the groups of snapshot {cfg.snapshot}", f"the Gram of snapshot {cfg.snapshot}")
    paths["gram"].parent.mkdir(parents=True, exist_ok=True)
    np.save(paths["gram"], K, allow_pickle=False)
    write_frame(frame, paths["groups"])
    seconds = {
        "generate": float(sum(p["seconds_generate"] for p in parts)),
        "gradient": float(sum(p["seconds_gradient"] for p in parts)),
        "gram_and_weights": time.perf_counter() - t0,
    }
    card = {
        "snapshot": cfg.snapshot,
        "checkpoint": cfg.checkpoint,
        "config_file": cfg.config,
        "train_config": train.to_dict(),
        "n_pool_target": cfg.n_pool,
        "n_pool_done": sum(p["role"] == "pool" for p in parts),
        "n_ref": cfg.n_ref,
        "reference": "leave-batch-out mean of the pool" if cfg.n_ref == 0 else f"mean of {cfg.n_ref} disjoint groups",
        "seed": cfg.seed,
        **sizes,
        "gradient_file_gb": round((cfg.n_pool + cfg.n_ref) * dim * 4 / 1e9, 3),
        # full fine-tuning: a float32 gradient of every weight of the base model per group
        "full_finetuning_gb_per_group": round((sizes["all_parameters"] - sizes["trained_parameters"]) * 4 / 1e9, 3),
        # of the process that finished the snapshot (the Gram, in blocks); a sampling process's is
        # the model's plus one gradient
        "peak_rss_gb_finishing_process": round(_peak_rss_gb(), 3),
        "wall_seconds": seconds,  # summed over the groups (each process's own clock; the CPU is shared)
        "loss": "grpo_loss with beta = 0, n_seqs = G, n_tokens = G * max_new_tokens (gcpo_train.align.gradients)",
        "environment": environment(),
    }
    write_text(paths["card"], json.dumps(card, indent=1, sort_keys=True) + "\n")
    if not cfg.keep_gradients:
        (work / "gradients.npy").unlink()
    restat(Path(cfg.output))


FLAGS = ("snapshot", "checkpoint", "output", "n_pool", "n_ref", "seed")  # the AlignConfig fields that are flags


def add_parser(subparsers):
    import argparse

    p = subparsers.add_parser(
        "align",
        help="the update-alignment study: does a weighting point the batch gradient at the expected one?",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--restat", default=None, metavar="DIR", help="rewrite DIR's batch frame and tables from its frames")
    for flag, what in (  # defaults: gcpo_analysis.study.alignment's N_* (read when --restat runs)
        ("--n-batches", "batches per point estimate"),
        ("--n-boot", "group-bootstrap replicates"),
        ("--n-boot-batches", "batches per bootstrap replicate at the protocol's batch size"),
        ("--n-boot-batches-other", "batches per bootstrap replicate at the other batch sizes"),
        ("--jobs", "snapshots computed at a time, in processes (the output is the same; default 1)"),
    ):
        p.add_argument(flag, type=int, default=None, help=f"with --restat: {what}")
    p.add_argument(
        "--adam-metric",
        default=None,
        metavar="SNAPSHOT",
        help="file the finished SNAPSHOT of --output (kept with --keep-gradients, of a checkpoint) again in "
        "Adam's metric, as SNAPSHOT_adam (gcpo_train.align.adam_metric); then --restat the folder",
    )
    p.add_argument("--config", default=None, help=AlignConfig.__dataclass_fields__["config"].metadata["help"])
    for name in FLAGS:
        field = AlignConfig.__dataclass_fields__[name]
        kind = int if name in ("n_pool", "n_ref", "seed") else str
        p.add_argument(
            *dict.fromkeys((f"--{name}", f"--{name.replace('_', '-')}")),  # --seed once, --n_pool and --n-pool
            dest=name,
            type=kind,
            default=field.default,
            help=f"{field.metadata['help']} (default: {field.default!r})",
        )
    p.add_argument("--keep-gradients", action="store_true", help="keep the gradient file (gradients.npy)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--reverse", action="store_true", help=AlignConfig.__dataclass_fields__["reverse"].metadata["help"])
    p.add_argument(
        "--finish-now", action="store_true", help=AlignConfig.__dataclass_fields__["finish_now"].metadata["help"]
    )
    p.set_defaults(func=run_align)
    return p


def run_align(args) -> None:
    if args.restat is not None:
        from gcpo_analysis.study import alignment as study
        from gcpo_analysis.study.alignment import restat

        sizes = dict(
            n_batches=study.N_BATCHES,
            n_boot=study.N_BOOT,
            n_boot_batches=study.N_BOOT_BATCHES,
            n_boot_batches_other=study.N_BOOT_BATCHES_OTHER,
            jobs=1,
        )
        for flag in sizes:
            value = getattr(args, flag, None)
            if value is not None and value < 1:
                raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
            sizes[flag] = sizes[flag] if value is None else value
        restat(Path(args.restat), **sizes)
        return
    if args.adam_metric is not None:
        from gcpo_train.align.adam_metric import write_adam_snapshot

        name = write_adam_snapshot(args.output, args.adam_metric)
        print(f"snapshot {name} written to {args.output}/snapshots; its tables: gcpo align --restat {args.output}")
        return
    from gcpo_analysis.knob import check_given_values

    given = {name: getattr(args, name) for name in FLAGS if getattr(args, name) is not None}
    check_given_values(AlignConfig, given, {name: f"--{name}" for name in FLAGS})  # errors name the flag
    cfg = AlignConfig(
        config=args.config or "",
        snapshot=args.snapshot or "",
        checkpoint=args.checkpoint,
        output=args.output,
        n_pool=args.n_pool,
        n_ref=args.n_ref,
        seed=args.seed,
        keep_gradients=args.keep_gradients,
        progress=not args.no_progress,
        finish_now=args.finish_now,
        reverse=args.reverse,
    )
    run_snapshot(cfg)
