#!/usr/bin/env python
"""Produce the project's recorded outputs with one checkout's code, and compare two such folders exactly.

Issue 19's "Done when": every recorded output (scores, study tables, training logs and rollouts)
is bit-identical before and after the refactor. This script makes that checkable:

    # the code under test is the one on PYTHONPATH; run from that checkout's root (its figures/ are the inputs)
    cd /work/old && PYTHONPATH=$PWD python /path/to/scripts/check_recorded_outputs.py produce --out /tmp/rec_old
    cd /work/new && PYTHONPATH=$PWD python scripts/check_recorded_outputs.py produce --out /tmp/rec_new
    python scripts/check_recorded_outputs.py compare /tmp/rec_old /tmp/rec_new     # exit 1 if anything differs

``produce`` calls everything through the CLI (``python -m gcpo_analysis ...``), never by import, so
that it works on a checkout with the flat module layout of before issue 19 as well as the new one.
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

The command logs and timings go to ``_produce/`` inside the output folder; ``compare`` skips it.
A failing command is recorded there (produce.json, "failed"), the other steps still run, and
``produce`` exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

STEPS = ("score", "study", "train", "proofs")
LOG_DIR = "_produce"

# JSON keys compared as "ignored" (their values are not recorded numbers of the method):
IGNORED_KEYS = {
    # wall clock: when and how long a step ran
    "started": "wall-clock date",
    "finished": "wall-clock date",
    "at": "wall-clock date",
    "date": "wall-clock date",
    "seconds": "run time",
    "timings_s": "run time per stage",
    "tokens_per_s": "throughput (time)",
    # installed versions: the two checkouts report their own package version
    "versions": "library versions",
    "version": "package version",
}
# paths of inputs and outputs (relative and equal here, but absolute in some writers): ignored when
# both values are strings or null, so a key of this name holding numbers is still compared
PATH_KEYS = {"path", "output", "output_dir", "run", "source", "data_path", "from_rollouts", "target_from"}
IGNORED_PATTERNS = {  # key regex -> why
    r"(^|/)time_": "run time of a phase (log.jsonl time_generate, time_total; TRL gcpo/time_weights)",
    r"(^|_)(runtime|step_time)$|_per_second$": "run time, throughput (TRL's trainer_state log_history)",
}
# lists compared as sets: their writer serializes a Python set, in string-hash order (PYTHONHASHSEED)
UNORDERED_KEYS = {"target_modules": "peft's adapter_config.json"}
SKIPPED_SUFFIXES = (".png", ".svg", ".pdf")  # rendered figures: not recorded numbers


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


# ------------------------------------------------------------------------------------------ compare
def ignored_reason(key: str, a=None, b=None) -> str | None:
    """Why the key ``key`` (values a, b) is not compared, or None when it is."""
    if key in IGNORED_KEYS:
        return IGNORED_KEYS[key]
    if key in PATH_KEYS and all(v is None or isinstance(v, str) for v in (a, b)):
        return "file system path"
    return next((why for p, why in IGNORED_PATTERNS.items() if re.search(p, key)), None)


IGNORED_SEEN: set[str] = set()  # ignored keys whose two values did differ (printed by compare)


def json_diffs(a, b, where: str = "") -> list[str]:
    """Paths where two parsed JSON values differ (ignored keys left out); floats compared exactly
    (NaN equals NaN: both sides wrote the same missing value)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if ignored_reason(str(k), a.get(k), b.get(k)):
                if a.get(k) != b.get(k):
                    IGNORED_SEEN.add(str(k))
                continue
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'B' if k not in a else 'A'}")
            elif k in UNORDERED_KEYS and isinstance(a[k], list) and isinstance(b[k], list):
                out += json_diffs(sorted(a[k], key=str), sorted(b[k], key=str), f"{where}.{k} (as a set)")
            else:
                out += json_diffs(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in json_diffs(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    if type(a) is not type(b) or a != b:
        delta = f" (|diff| {abs(a - b):.3g})" if isinstance(a, int | float) and isinstance(b, int | float) else ""
        return [f"{where or '<root>'}: {a!r} vs {b!r}{delta}"]
    return []


def _read_json_any(path: Path):
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def frame_diff(a, b) -> str | None:
    """None when the two frames are exactly equal, else what differs (max |diff| per numeric column)."""
    import numpy as np
    import pandas as pd

    try:
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        return None
    except AssertionError as err:
        first = str(err).strip().splitlines()[0]
    if list(a.columns) != list(b.columns) or a.shape != b.shape:
        only_a, only_b = sorted(set(a.columns) - set(b.columns)), sorted(set(b.columns) - set(a.columns))
        return f"shape {a.shape} vs {b.shape}; columns only in A {only_a}, only in B {only_b}; {first}"
    parts = []
    for c in a.columns:
        x, y = a[c], b[c]
        if x.dtype != y.dtype:
            parts.append(f"{c}: dtype {x.dtype} vs {y.dtype}")
        elif pd.api.types.is_numeric_dtype(x) and not pd.api.types.is_bool_dtype(x):
            xv, yv = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
            same = (xv == yv) | (np.isnan(xv) & np.isnan(yv))
            if not same.all():
                d = np.abs(xv - yv)
                parts.append(f"{c}: {int((~same).sum())} values, max|diff| {np.nanmax(np.where(same, 0, d)):.3g}")
        elif not x.equals(y):
            n = int((x.astype(str) != y.astype(str)).sum())
            parts.append(f"{c}: {n} values differ")
    return "; ".join(parts) or first


def tensors_diff(a: Path, b: Path) -> str | None:
    """None when two safetensors files hold the same tensors exactly, else the largest |diff| per tensor."""
    import numpy as np
    from safetensors.numpy import load_file

    ta, tb = load_file(str(a)), load_file(str(b))
    if set(ta) != set(tb):
        return f"tensors only in A {sorted(set(ta) - set(tb))[:3]}, only in B {sorted(set(tb) - set(ta))[:3]}"
    parts = [
        f"{k}: shape {ta[k].shape} vs {tb[k].shape}"
        if ta[k].shape != tb[k].shape
        else f"{k}: max|diff| {np.max(np.abs(ta[k].astype(float) - tb[k].astype(float))):.3g}"
        for k in sorted(ta)
        if ta[k].shape != tb[k].shape or not np.array_equal(ta[k], tb[k])
    ]
    return None if not parts else f"{len(parts)} of {len(ta)} tensors differ; " + "; ".join(parts[:3])


def compare_file(a: Path, b: Path) -> tuple[str, str]:
    """(status, detail) of one file present in both folders."""
    import pandas as pd

    suffix = a.suffix.lower()
    if suffix == ".parquet":
        d = frame_diff(pd.read_parquet(a), pd.read_parquet(b))
    elif suffix == ".csv":
        d = frame_diff(pd.read_csv(a), pd.read_csv(b))  # pandas >= 3 parses floats round-trip by default
        if d is None and a.read_bytes() != b.read_bytes():
            return "identical", "values equal, text differs (formatting)"
    elif suffix == ".safetensors":
        d = tensors_diff(a, b)
    elif suffix in (".json", ".jsonl"):
        diffs = json_diffs(_read_json_any(a), _read_json_any(b))
        d = "; ".join(diffs[:5]) + (f" (+{len(diffs) - 5} more)" if len(diffs) > 5 else "") if diffs else None
    else:  # markdown, text and anything else: the exact bytes
        d = None if a.read_bytes() == b.read_bytes() else _text_diff(a, b)
    return ("identical", "") if d is None else ("differs", d)


def _text_diff(a: Path, b: Path) -> str:
    try:
        la, lb = a.read_text().splitlines(), b.read_text().splitlines()
    except UnicodeDecodeError:
        return f"bytes differ ({a.stat().st_size} vs {b.stat().st_size} bytes)"
    for i, (x, y) in enumerate(zip(la, lb, strict=False), 1):
        if x != y:
            return f"line {i}: {x[:80]!r} vs {y[:80]!r}"
    return f"{len(la)} vs {len(lb)} lines"


def _files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] != LOG_DIR
    }


def compare(dir_a: Path, dir_b: Path) -> list[tuple[str, str, str]]:
    rows = []
    for rel in sorted(_files(dir_a) | _files(dir_b)):
        a, b = dir_a / rel, dir_b / rel
        if rel.lower().endswith(SKIPPED_SUFFIXES):
            rows.append((rel, "skipped", "rendered figure"))
        elif not a.exists() or not b.exists():
            rows.append((rel, "missing", f"only in {'B' if not a.exists() else 'A'}"))
        else:
            rows.append((rel, *compare_file(a, b)))
    return rows


def print_table(rows) -> None:
    width = max((len(r[0]) for r in rows), default=4)
    print(f"{'file':<{width}}  {'status':<9}  detail")
    for rel, status, detail in rows:
        print(f"{rel:<{width}}  {status:<9}  {detail}")
    counts = {s: sum(r[1] == s for r in rows) for s in ("identical", "differs", "missing", "skipped")}
    print("; ".join(f"{n} {s}" for s, n in counts.items()))
    print(
        "ignored JSON keys: "
        + ", ".join(sorted(IGNORED_KEYS))
        + ", "
        + ", ".join(f"/{p}/" for p in IGNORED_PATTERNS)
        + "; path keys when string-valued: "
        + ", ".join(sorted(PATH_KEYS))
    )
    print("ignored keys whose values differed here: " + (", ".join(sorted(IGNORED_SEEN)) or "none"))


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
    c = sub.add_parser("compare", help="compare two produced folders exactly; exit 1 if anything differs")
    c.add_argument("dir_a", type=Path)
    c.add_argument("dir_b", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "produce":
        steps = [s.strip() for s in args.steps.split(",") if s.strip()]
        bad = [s for s in steps if s not in STEPS]
        if bad:
            ap.error(f"unknown step(s) {bad}; choose from {STEPS}")
        record = produce(args.out.resolve(), args.repo.resolve(), steps)
        print(json.dumps(record, indent=2))
        return int(bool(record["failed"]))
    rows = compare(args.dir_a, args.dir_b)
    print_table(rows)
    return int(any(status in ("differs", "missing") for _, status, _ in rows))


if __name__ == "__main__":
    sys.exit(main())
