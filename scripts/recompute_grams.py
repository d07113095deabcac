"""Recompute the Gram matrices K of a finished study from its committed rollouts.

Runs that predate the grams.parquet sidecar kept only V and mean||g||^2. Their rollouts are
committed, so each group's K can be rebuilt with the same policy: the prompt is rebuilt from
the data and the run card's settings (as ``study._collect`` does), each completion is
re-tokenised from its decoded text, EOS is appended when the sampled rollout ended with one,
and ``group_gradient_gram`` runs on prompt + completion exactly as ``collect._query_parts``
lays it out (right padding, completion mask after the prompt).

Re-tokenising decoded text need not give back the sampled tokens (BPE merges across the
sampled boundaries, special tokens dropped by ``skip_special_tokens``). Every rollout is
therefore checked: its re-tokenised length (+ EOS) against the committed ``n_tokens``, and its
sequence log-probability against the committed ``logprob`` (same untempered policy: equal
tokens give equal log-probabilities up to float error). Every group is checked too: V and
mean||g||^2 from the new K against the committed groups frame. The checks are written to
``<study>/tables/gram_recompute_check.csv`` and summarised on stdout; nothing is dropped.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python scripts/recompute_grams.py figures/default_study

Resumable: finished queries are kept in ``--work`` (default runs/recompute_grams/<study name>).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.frames import read_frame, write_frame
from gcpo_analysis.gradvar import gradient_variance, group_gradient_gram, sequence_logprobs
from gcpo_analysis.measures.advantages import grpo_advantages
from gcpo_analysis.outputs import atomic_write
from gcpo_analysis.study.collect import _safe, gram_frame

LOGPROB_TOL = 1e-2  # nats over a whole sequence: float error between generate's cache and one forward


def study_config(folder: Path):
    from gcpo_analysis.study import StudyConfig

    card = json.loads((folder / "run_card.json").read_text())
    settings = dict(card["settings"])
    if "threshold" in settings:  # cards written before the config layer named it 'threshold'
        settings["nli_threshold"] = settings.pop("threshold")
    return StudyConfig(**settings), card


def rebuild_queries(cfg, tokenizer, query_ids):
    from gcpo_analysis.data import load_queries
    from gcpo_analysis.prompts import build_prompt

    q = load_queries(
        cfg.dataset,
        path=cfg.data_path,
        split=cfg.split,
        n=cfg.n_queries,
        seed=cfg.seed,
        max_int_answer=cfg.max_int_answer,
    )
    q = q.set_index("query_id", drop=False)
    missing = [x for x in query_ids if x not in q.index]
    if missing:
        raise ValueError(f"{len(missing)} committed query id(s) are not in the rebuilt sample, e.g. {missing[0]!r}")
    q = q.loc[list(query_ids)]
    prompts = [build_prompt(r, tokenizer, max_context_tokens=cfg.max_context_tokens) for r in q.to_dict("records")]
    return dict(zip(q["query_id"], prompts))


def completion_tokens(tokenizer, text: str, n_committed: int, max_new: int):
    """(ids, ended_with_eos, note): the decoded text re-tokenised, EOS appended when the sampled
    rollout ended with one -- sure when it stopped before the budget, and inferred from the
    length when it used the whole budget."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if n_committed < max_new:
        eos = True
    else:  # a full budget: EOS as its last token only if the lengths say so
        eos = len(ids) == n_committed - 1
    if eos:
        ids = ids + [tokenizer.eos_token_id]
    note = "" if len(ids) == n_committed else f"length {len(ids)} != committed {n_committed}"
    if not ids:
        ids, note = [tokenizer.eos_token_id], "empty completion: EOS only"
    return ids, eos, note


def group_batch(torch, prompt_ids, comps, pad_id):
    P, N = len(prompt_ids), max(len(c) for c in comps)
    G = len(comps)
    ids = torch.full((G, P + N), pad_id, dtype=torch.long)
    am = torch.zeros((G, P + N), dtype=torch.long)
    for i, c in enumerate(comps):
        ids[i, :P] = torch.tensor(prompt_ids)
        ids[i, P : P + len(c)] = torch.tensor(c)
        am[i, : P + len(c)] = 1
    cm = am.clone()
    cm[:, :P] = 0
    return ids, am, cm


def recompute_query(model, tokenizer, torch, prompt, part, max_new):
    part = part.sort_values("rollout_id")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    comps, checks = [], []
    for row in part.itertuples():
        ids, eos, note = completion_tokens(tokenizer, row.completion, int(row.n_tokens), max_new)
        comps.append(ids)
        checks.append(
            dict(
                query_id=row.query_id,
                rollout_id=int(row.rollout_id),
                n_committed=int(row.n_tokens),
                n_retokenised=len(ids),
                eos=eos,
                note=note,
                logprob_committed=float(row.logprob),
            )
        )
    ids, am, cm = group_batch(torch, prompt_ids, comps, tokenizer.pad_token_id)
    with torch.no_grad():
        lp = sequence_logprobs(model, ids, am, cm).double().cpu().numpy()
    K = group_gradient_gram(model, ids, am, cm, params="all")
    for c, value in zip(checks, lp):
        c["logprob_retokenised"] = float(value)
        c["logprob_abs_diff"] = abs(float(value) - c["logprob_committed"])
        c["tokens_match"] = c["n_retokenised"] == c["n_committed"] and c["logprob_abs_diff"] < LOGPROB_TOL
    return K, pd.DataFrame(checks)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", type=Path, help="study folder with rollouts.parquet, groups.parquet, run_card.json")
    ap.add_argument("--work", type=Path, default=None, help="folder of finished queries (resume)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N queries (a trial)")
    ap.add_argument(
        "--reverse",
        action="store_true",
        help="compute from the last query backwards: a second process sharing --work meets the first halfway",
    )
    args = ap.parse_args(argv)
    import torch

    from gcpo_analysis.models import is_packaged_policy, load_policy

    folder = args.study
    cfg, card = study_config(folder)
    if not is_packaged_policy(cfg.model):
        raise ValueError(f"{folder}: the run used policy {cfg.model!r}; this script loads the packaged SmolLM2")
    rollouts = read_frame(folder / "rollouts.parquet", kind="rollouts")
    groups = read_frame(folder / "groups.parquet", kind="groups").set_index("query_id")
    order = list(pd.unique(rollouts["query_id"]))[: args.limit]
    work = args.work or Path("runs/recompute_grams") / folder.name
    (work / "parts").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model, tokenizer = load_policy(None, device="cpu")
    prompts = rebuild_queries(cfg, tokenizer, order)
    grams, checks, group_rows = [], [], []
    t_start = time.perf_counter()
    stems = [work / "parts" / f"{k:05d}_{_safe(qid)}" for k, qid in enumerate(order)]
    todo = list(enumerate(order))
    for k, qid in reversed(todo) if args.reverse else todo:
        stem = stems[k]
        if not stem.with_suffix(".group.parquet").exists():
            t0 = time.perf_counter()
            part = rollouts[rollouts["query_id"] == qid]
            K, chk = recompute_query(model, tokenizer, torch, prompts[qid], part, cfg.max_new_tokens)
            rewards = part.sort_values("rollout_id")["reward"].to_numpy(float)
            g = groups.loc[qid]
            row = dict(
                query_id=qid,
                grad_var=gradient_variance(K, grpo_advantages(rewards)),
                grad_norm2_mean=float(np.mean(np.diag(K))),
                grad_var_committed=float(g["grad_var"]),
                grad_norm2_mean_committed=float(g["grad_norm2_mean"]),
                seconds=time.perf_counter() - t0,
            )
            write_frame(gram_frame(qid, K), stem.with_suffix(".gram.parquet"))
            write_frame(chk, stem.with_suffix(".check.parquet"))
            write_frame(pd.DataFrame([row]), stem.with_suffix(".group.parquet"))
            print(
                f"[{k + 1}/{len(order)}] {qid}: {row['seconds']:.1f} s, "
                f"{int(chk['tokens_match'].sum())}/{len(chk)} rollouts match",
                flush=True,
            )
    for stem in stems:  # read back in the study's order, whichever order computed them
        grams.append(pd.read_parquet(stem.with_suffix(".gram.parquet")))
        checks.append(pd.read_parquet(stem.with_suffix(".check.parquet")))
        group_rows.append(pd.read_parquet(stem.with_suffix(".group.parquet")))
    chk = pd.concat(checks, ignore_index=True)
    grp = pd.concat(group_rows, ignore_index=True)
    for c in ("grad_var", "grad_norm2_mean"):
        ref = grp[f"{c}_committed"]
        grp[f"{c}_rel_diff"] = np.where(ref != 0, (grp[c] - ref).abs() / ref.abs().where(ref != 0, 1), grp[c].abs())
    grp["rollouts_matching"] = (
        chk.groupby("query_id", sort=False)["tokens_match"].sum().reindex(grp["query_id"]).to_numpy()
    )
    if args.limit is None:
        write_frame(pd.concat(grams, ignore_index=True), folder / "grams.parquet")
        (folder / "tables").mkdir(exist_ok=True)
        # atomic: a second process (--reverse) may write the same files at the same time
        atomic_write(folder / "tables" / "gram_recompute_rollouts.csv", lambda p: chk.to_csv(p, index=False))
        atomic_write(folder / "tables" / "gram_recompute_groups.csv", lambda p: grp.to_csv(p, index=False))
    summary = {
        "queries": len(grp),
        "rollouts": len(chk),
        "rollouts_matching": int(chk["tokens_match"].sum()),
        "rollouts_length_mismatch": int((chk["n_retokenised"] != chk["n_committed"]).sum()),
        "rollouts_logprob_off": int((chk["logprob_abs_diff"] >= LOGPROB_TOL).sum()),
        "max_logprob_abs_diff_matching": float(chk.loc[chk["tokens_match"], "logprob_abs_diff"].max()),
        "groups_all_matching": int(
            (grp["rollouts_matching"] == chk.groupby("query_id").size().reindex(grp["query_id"]).to_numpy()).sum()
        ),
        "grad_norm2_mean_rel_diff_median": float(grp["grad_norm2_mean_rel_diff"].median()),
        "grad_norm2_mean_rel_diff_max": float(grp["grad_norm2_mean_rel_diff"].max()),
        "grad_var_rel_diff_median": float(grp["grad_var_rel_diff"].median()),
        "grad_var_rel_diff_max": float(grp["grad_var_rel_diff"].max()),
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    print(json.dumps(summary, indent=2))
    if args.limit is None:
        text = json.dumps(summary, indent=2)
        atomic_write(folder / "tables" / "gram_recompute_summary.json", lambda p: Path(p).write_text(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
