#!/usr/bin/env python
"""Produce the project's recorded outputs with one checkout's code, to compare two checkouts exactly.

A refactor must leave every recorded output (scores, study tables, training logs and rollouts)
bit-identical. This script writes them; `gcpo diff --rtol 0` compares two such folders:

    # the code under test is the one on PYTHONPATH; run from that checkout's root (its figures/ are the inputs)
    cd /work/old && PYTHONPATH=$PWD python /path/to/scripts/check_recorded_outputs.py produce --out /tmp/rec_old
    cd /work/new && PYTHONPATH=$PWD python scripts/check_recorded_outputs.py produce --out /tmp/rec_new
    gcpo diff --rtol 0 /tmp/rec_old /tmp/rec_new     # exit 1 if anything differs

``produce`` calls everything through the CLI (``python -m gcpo_analysis ...``), never by import, so
that it works on a checkout with the older flat module layout as well as the current one.
Every command runs with the output folder as working directory and relative paths, so paths
recorded in the outputs are the same for two checkouts. Steps (``--steps``, default all):

- ``score``: ``gcpo score`` on figures/default_study/rollouts.parquet (default judge and measures,
  and ``--measures all``) and on figures/cpu_math/rollouts.parquet (the math study's settings from
  its run_card.json: math judge, full completions, its measures and threshold).
- ``study``: copies of figures/default_study and figures/cpu_math re-scored with
  ``gcpo study --restat``; and ``gcpo study --from-training`` on a run folder rebuilt from
  figures/train_gradvar/rollouts.parquet (the per-step frames the trainer wrote, split back by
  step; the committed run's own step files are not in the repository).
- ``train``: ``gcpo train`` with the random ``tiny:llama`` model on a 12-record jsonl written here,
  3 steps, seed 0, modulator bot_rd with the lexical judge, rollouts saved; again for 2 steps with
  the gradient variance tracked (with share_prompt false, as the committed run); and through
  ``--backend trl`` (2 steps).
- ``proofs``: ``gcpo proofs --json`` (and its CSV).

The command logs and timings go to ``_produce/`` inside the output folder; ``gcpo diff`` skips it.
A failing command is recorded there (produce.json, "failed"), the other steps still run, and
``produce`` exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

STEPS = ("score", "study", "train", "proofs")
LOG_DIR = "_produce"


# ------------------------------------------------------------------------------------------ produce
def _env() -> dict:
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(k, "1")  # the machine is shared; also makes BLAS reductions repeatable
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MPLBACKEND="Agg")
    return env


FAILED: dict[str, str] = {}  # command name -> the end of its log (produce goes on, then exits 1)


def _gcpo(out: Path, name: str, *args: str) -> float | None:
    """``python -m gcpo_analysis ARGS`` in ``out``; stdout/stderr to _produce/NAME.log; seconds taken
    (None when the command failed: recorded in FAILED, and its outputs will be missing)."""
    log = out / LOG_DIR / f"{name}.log"
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.run(
            [sys.executable, "-m", "gcpo_analysis", *args], cwd=out, env=_env(), stdout=fh, stderr=subprocess.STDOUT
        )
    if proc.returncode != 0:
        FAILED[name] = f"`gcpo {' '.join(args)}` exited {proc.returncode}: " + log.read_text()[-1500:]
        print(f"[produce] FAILED {FAILED[name]}", file=sys.stderr, flush=True)
        return None
    return round(time.perf_counter() - t0, 1)


def _score(repo: Path, out: Path) -> dict:
    (out / "score").mkdir()
    card = json.loads((repo / "figures/cpu_math/run_card.json").read_text())["settings"]
    nli = str(card.get("nli_threshold", card.get("threshold")))
    default = str(repo / "figures/default_study/rollouts.parquet")
    math_rollouts = str(repo / "figures/cpu_math/rollouts.parquet")
    return {
        "score_default_study": _gcpo(
            out, "score_default_study", "score", default, "-o", "score/default_study.parquet", "--csv"
        ),
        "score_default_study_all": _gcpo(
            out,
            "score_default_study_all",
            "score",
            default,
            "-o",
            "score/default_study_all.parquet",
            "--measures",
            "all",
        ),
        # the study scores math with the judge on extracted answers and the full completions embedded
        "score_cpu_math": _gcpo(
            out,
            "score_cpu_math",
            "score",
            math_rollouts,
            "-o",
            "score/cpu_math.parquet",
            "--csv",
            "--judge",
            card["judge"],
            "--measures",
            card["measures"],
            "--nli-threshold",
            nli,
            "--full-completion",
        ),
    }


def _rebuild_training_run(repo: Path, run: Path) -> None:
    """The per-step rollouts frames of figures/train_gradvar, split back from its pooled frame."""
    import pandas as pd

    pooled = pd.read_parquet(repo / "figures/train_gradvar/rollouts.parquet")
    (run / "rollouts").mkdir(parents=True)
    for step, frame in pooled.groupby("step", sort=True):
        frame = frame.assign(query_id=frame["train_query_id"]).drop(columns=["train_query_id"])
        frame.reset_index(drop=True).to_parquet(run / "rollouts" / f"step_{int(step):06d}.parquet", index=False)
    shutil.copy2(repo / "figures/train_gradvar/run/run.json", run / "run.json")


def _study(repo: Path, out: Path) -> dict:
    (out / "study").mkdir()
    took = {}
    for name in ("default_study", "cpu_math"):
        shutil.copytree(repo / "figures" / name, out / "study" / name)
        took[f"restat_{name}"] = _gcpo(out, f"restat_{name}", "study", "--restat", f"study/{name}")
    _rebuild_training_run(repo, out / "study" / "train_gradvar_run")
    took["from_training"] = _gcpo(
        out, "from_training", "study", "--from-training", "study/train_gradvar_run", "--output", "study/train_gradvar"
    )
    return took


TRAIN_FLAGS = (
    "--model",
    "tiny:llama",
    "--dataset",
    "narrativeqa",
    "--data_path",
    "train/nqa.jsonl",
    "--split_from_single",
    "--train_frac",
    "0.5",
    "--modulator",
    "bot_rd",
    "--judge",
    "lexical",
    "--group_size",
    "3",
    "--queries_per_step",
    "2",
    "--max_new_tokens",
    "12",
    "--max_context_tokens",
    "16",
    "--seed",
    "0",
    "--device",
    "cpu",
    "--progress",
    "false",
    "--checkpoint_every",
    "0",
    "--save_rollouts",
    "true",
)


# what a training run records (the rest of its folder is optimizer/RNG state, locks and copies of the tokenizer)
TRAIN_KEEP = (
    "log.jsonl",
    "run.json",
    "rollouts/*.parquet",
    "checkpoints/*/state.json",
    "checkpoints/*/adapter/adapter_model.safetensors",
    "checkpoints/*/adapter/adapter_config.json",
    "checkpoint-*/trainer_state.json",
    "checkpoint-*/adapter_model.safetensors",
    "checkpoint-*/adapter_config.json",
)


def _prune_run(run: Path) -> None:
    keep = {p for pattern in TRAIN_KEEP for p in run.glob(pattern)}
    for p in sorted(run.rglob("*"), reverse=True):
        if p.is_file() and p not in keep:
            p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()


def _train(repo: Path, out: Path) -> dict:
    (out / "train").mkdir()
    # answers spread over the tiny tokenizer's vocabulary, so that the random policy's completions
    # overlap them now and then: rewards vary within a group and the steps have a gradient
    words = (
        "he she it they his her man woman king queen city house ship war love death father mother son "
        "daughter friend one two three four five six seven eight nine ten yes no answer question"
    ).split()
    passage = "the {} had a son . the ship was in the city ."
    recs = [
        {
            "id": f"d{i}",
            "question": f"who is the {w} ?",
            "passage": passage.format(w),
            "answer": [" ".join(words[i:] + words[:i])],
        }
        for i, w in enumerate(words[:12])
    ]
    (out / "train" / "nqa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    took = {
        "train_gcpo": _gcpo(out, "train_gcpo", "train", *TRAIN_FLAGS, "--steps", "3", "--output_dir", "train/gcpo_run"),
        # per-group gradient variance needs each rollout's own forward pass (no shared prompt)
        "train_gcpo_gradvar": _gcpo(
            out,
            "train_gcpo_gradvar",
            "train",
            *TRAIN_FLAGS,
            "--steps",
            "2",
            "--share_prompt",
            "false",
            "--track_gradvar",
            "true",
            "--output_dir",
            "train/gcpo_gradvar_run",
        ),
        "train_trl": _gcpo(
            out, "train_trl", "train", *TRAIN_FLAGS, "--steps", "2", "--backend", "trl", "--output_dir", "train/trl_run"
        ),
    }
    for run in ("gcpo_run", "gcpo_gradvar_run", "trl_run"):
        if (out / "train" / run).exists():
            _prune_run(out / "train" / run)
    return took


def _proofs(repo: Path, out: Path) -> dict:
    (out / "proofs").mkdir()
    return {"proofs": _gcpo(out, "proofs", "proofs", "--json", "proofs/proofs.json", "-o", "proofs/proofs.csv")}


def _code_under_test(repo: Path) -> dict:
    where = subprocess.run(
        [sys.executable, "-c", "import gcpo_analysis; print(gcpo_analysis.__file__)"],
        env=_env(),
        capture_output=True,
        text=True,
        cwd=repo,
        check=True,
    ).stdout.strip()
    git = ["git", "-C", str(repo)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout
    return {"gcpo_analysis": where, "repo": str(repo), "commit": head, "dirty": bool(dirty.strip())}


def produce(out: Path, repo: Path, steps) -> dict:
    code = _code_under_test(repo)
    if not Path(code["gcpo_analysis"]).resolve().is_relative_to(repo.resolve()):
        raise SystemExit(
            f"gcpo_analysis is imported from {code['gcpo_analysis']}, not from {repo}: set PYTHONPATH={repo}"
        )
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty; choose a new folder")
    (out / LOG_DIR).mkdir(parents=True, exist_ok=True)
    record = {"code": code, "python": sys.executable, "seconds": {}}
    for step in steps:
        fn = {"score": _score, "study": _study, "train": _train, "proofs": _proofs}[step]
        print(f"[produce] {step} ...", flush=True)
        took = fn(repo, out)
        record["seconds"].update(took)
        print(f"[produce] {step}: {took}", flush=True)
        record["failed"] = dict(FAILED)
        (out / LOG_DIR / "produce.json").write_text(json.dumps(record, indent=2))
    return record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce", help="write the recorded outputs of the checkout on PYTHONPATH into --out")
    p.add_argument("--out", required=True, type=Path, help="a new (or empty) folder")
    p.add_argument(
        "--repo",
        type=Path,
        default=Path.cwd(),
        help="the checkout whose figures/ are the inputs and whose code is tested (default: cwd)",
    )
    p.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    args = ap.parse_args(argv)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad:
        ap.error(f"unknown step(s) {bad}; choose from {STEPS}")
    record = produce(args.out.resolve(), args.repo.resolve(), steps)
    print(json.dumps(record, indent=2))
    return int(bool(record["failed"]))


if __name__ == "__main__":
    sys.exit(main())
