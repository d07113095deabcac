"""Collect a study's rollouts: G samples per query, rewards, entropies and gradient variance.

docs/conventions.md ("How data flows", the gap study): for each query, G completions are sampled from
the policy, scored with the task reward, and -- when asked -- the query's gradient variance
V(q) (``gcpo_analysis.gradvar``) is computed with GRPO advantages. The output is the
rollouts frame and the groups frame of ``gcpo_analysis.frames``.

Conventions chosen here (the spec is silent on them; docs/conventions.md, "The frames"):
- ``token_entropy`` is the mean over a rollout's generated tokens of the entropy of the
  model's *untempered* next-token distribution softmax(logits); ``logprob`` is
  sum_t log softmax(logits_t)[y_t], also untempered: both describe the policy pi_theta, not
  the sampler (temperature only shapes exploration). The trainer's frames follow the same
  convention; ``temperature`` records the sampling temperature beside them.
- Sampling uses temperature and top_p only (``top_k=0``: no top-k truncation, overriding a
  generation config's default of 50).
- The completion ends at the first EOS (``tokens.completion_mask``), which is part of the
  completion's tokens (it is a policy action: counted in n_tokens, logprob, entropy and the
  gradient) but not of its text.
- The prompt is tokenised as is (``add_special_tokens=False``): it is already chat-formatted.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..frames import validate_groups, validate_rollouts, write_frame, write_json
from ..gradvar import gradient_variance, group_gradient_gram
from ..measures.advantages import grpo_advantages
from ..models import require
from ..tokens import completion_mask

QUERY_COLUMNS = ("query_id", "prompt", "references", "task")


def _safe(qid) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(qid))[:80]


def _check_queries(queries: pd.DataFrame) -> None:
    missing = [c for c in QUERY_COLUMNS if c not in queries.columns]
    if missing:
        raise ValueError(f"queries frame is missing column(s) {missing}; it has {list(queries.columns)}")
    dup = queries["query_id"].duplicated().to_numpy()
    if dup.any():
        raise ValueError(f"queries: query_id {queries['query_id'].iloc[int(np.flatnonzero(dup)[0])]!r} repeats")


def _sample_group(model, tokenizer, prompt, G, temperature, top_p, max_new_tokens, batch_generate):
    """(prompt ids (P,), generated ids (G, N), n_tokens (G,), entropy (G,), logprob (G,))."""
    torch = require("torch")
    dev = next(model.parameters()).device
    enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    prompt_ids = enc["input_ids"].to(dev)
    kwargs = dict(
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=0,
        max_new_tokens=max_new_tokens,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    P = prompt_ids.shape[1]
    gens, logits = [], []
    with torch.no_grad():
        for n_ret in [G] if batch_generate else [1] * G:
            out = model.generate(
                input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids), num_return_sequences=n_ret, **kwargs
            )
            gens.append(out.sequences[:, P:])
            logits.append(torch.stack(out.logits, 1))  # (n, N, V) raw, untempered
    N = max(g.shape[1] for g in gens)
    pad = tokenizer.pad_token_id
    gen = torch.cat([torch.nn.functional.pad(g, (0, N - g.shape[1]), value=pad) for g in gens])
    lg = torch.cat([torch.nn.functional.pad(x, (0, 0, 0, N - x.shape[1])) for x in logits]).float()
    mask = completion_mask(gen, tokenizer.eos_token_id)
    logp = torch.log_softmax(lg, -1)
    ent = -(logp.exp() * logp).sum(-1)
    chosen = logp.gather(-1, gen[..., None])[..., 0]
    n = mask.sum(1)
    entropy = (ent * mask).sum(1) / n
    logprob = (chosen * mask).sum(1)
    return prompt_ids[0], gen, n, entropy, logprob


def _query_parts(
    model,
    tokenizer,
    index,
    row,
    *,
    G,
    temperature,
    top_p,
    max_new_tokens,
    reward_fn,
    answer_fn,
    success_fn,
    grad_var,
    params,
    batch_generate,
    seed,
):
    torch = require("torch")
    qid, task, refs = row["query_id"], row["task"], [str(r) for r in list(row["references"])]
    torch.manual_seed(seed + index)
    t0 = time.perf_counter()
    prompt_ids, gen, n, entropy, logprob = _sample_group(
        model, tokenizer, row["prompt"], G, temperature, top_p, max_new_tokens, batch_generate
    )
    t_generate = time.perf_counter() - t0
    rows = []
    for i in range(G):
        completion = tokenizer.decode(gen[i, : int(n[i])].tolist(), skip_special_tokens=True)
        answer = answer_fn(completion, task)
        reward = float(reward_fn(task, completion, refs))
        if not (math.isfinite(reward) and 0.0 <= reward <= 2.0):
            raise ValueError(f"query {qid!r}, rollout {i}: reward {reward!r} is not a number in [0, 2]")
        rec = dict(
            query_id=qid,
            rollout_id=i,
            completion=completion,
            answer="" if answer is None else str(answer),
            reward=reward,
            references=refs,
            token_entropy=float(entropy[i]),
            logprob=float(logprob[i]),
            temperature=float(temperature),
            success=bool(success_fn(task, reward)),
            n_tokens=int(n[i]),
        )
        if "dataset" in row.index:
            rec["dataset"] = row["dataset"]
        rows.append(rec)
    rewards = np.array([r["reward"] for r in rows])
    group = dict(
        query_id=qid,
        G=G,
        mean_reward=float(rewards.mean()),
        success_rate=float(np.mean([r["success"] for r in rows])),
        t_generate=t_generate,
    )
    if grad_var:
        t0 = time.perf_counter()
        # prompt + completion, completions right-padded to the longest (mask after EOS)
        N = int(n.max())
        P = prompt_ids.shape[0]
        ids = torch.cat([prompt_ids[None].expand(G, P), gen[:, :N]], 1)
        am = torch.ones_like(ids)
        am[:, P:] = (torch.arange(N, device=ids.device)[None] < n[:, None]).long()
        ids = ids.masked_fill(am == 0, tokenizer.pad_token_id)
        cm = am.clone()
        cm[:, :P] = 0
        K = group_gradient_gram(model, ids, am, cm, params=params)
        group["grad_var"] = gradient_variance(K, grpo_advantages(rewards))
        group["grad_norm2_mean"] = float(np.mean(np.diag(K)))
        group["t_gradvar"] = time.perf_counter() - t0
        return pd.DataFrame(rows), pd.DataFrame([group]), gram_frame(qid, K)
    return pd.DataFrame(rows), pd.DataFrame([group]), None


def gram_frame(query_id, K) -> pd.DataFrame:
    """A group's Gram matrix K_ij = g_i . g_j (gradients of the sequence log-probabilities,
    before any advantage weighting) in long form: one row per (i, j), the full G x G matrix,
    i and j being the rollout ids of the rollouts frame."""
    K = np.asarray(K, dtype=np.float64)
    G = K.shape[0]
    i, j = np.divmod(np.arange(G * G), G)
    return pd.DataFrame({"query_id": [query_id] * (G * G), "i": i, "j": j, "k": K.reshape(-1)})


def grams_by_query(frame: pd.DataFrame) -> dict:
    """{query_id: G x G array} from a ``grams.parquet`` frame (``gram_frame`` rows); refuses a
    group whose rows do not form a full square matrix, naming it."""
    out = {}
    for qid, part in frame.groupby("query_id", sort=False):
        G = int(part["i"].max()) + 1
        if len(part) != G * G or int(part["j"].max()) + 1 != G:
            raise ValueError(f"grams: query {qid!r} has {len(part)} entries, not a full {G} x {G} matrix")
        K = np.full((G, G), np.nan)
        K[part["i"].to_numpy(), part["j"].to_numpy()] = part["k"].to_numpy()
        if np.isnan(K).any():
            raise ValueError(f"grams: query {qid!r} repeats an (i, j) entry")
        out[qid] = K
    return out


def collect_rollouts(
    model,
    tokenizer,
    queries: pd.DataFrame,
    *,
    G: int = 16,
    temperature: float = 0.9,
    top_p: float = 1.0,
    max_new_tokens: int = 32,
    reward_fn=None,
    answer_fn=None,
    success_fn=None,
    grad_var: bool = True,
    params="all",
    out_dir=None,
    seed: int = 0,
    progress: bool = True,
    batch_generate: bool = True,
    return_grams: bool = False,
):
    """Sample G rollouts per query and build the (rollouts, groups) frames (docs/conventions.md).

    queries: DataFrame with query_id, prompt (chat-formatted text), references (list[str]),
    task ('qa_f1' | 'hotpot' | 'math'), optionally dataset. reward_fn(task, completion,
    references) -> [0, 2] (default ``rewards.task_reward``), answer_fn(completion, task)
    (default ``rewards.extract_answer``), success_fn(task, reward) (default
    ``rewards.is_success``). Query k is sampled after ``torch.manual_seed(seed + k)``.
    With ``grad_var``: V(q) = gradient_variance(K, A) with A the GRPO advantages
    (``grpo_advantages``) and K = ``group_gradient_gram`` over ``params`` (the model is used
    in the mode it is in: eval mode keeps dropout out of the gradients); without it the groups
    frame has no grad_var, grad_norm2_mean or t_gradvar column (never a NaN placeholder).
    ``batch_generate=False`` samples the G rollouts one call at a time (less memory).

    With ``out_dir``, each finished query is written atomically to
    ``out_dir/parts/<k>_<query_id>.parquet`` (+ ``.gram.parquet``, ``.groups.parquet``); a
    restarted call with the same settings skips finished queries. Returns the frames in query
    order; with ``return_grams`` (and ``grad_var``) also the groups' Gram matrices as one
    ``gram_frame`` (None when a part from an older run has none).
    """
    if G < 1:
        raise ValueError(f"G must be >= 1, got {G}")
    _check_queries(queries)
    if reward_fn is None or answer_fn is None or success_fn is None:
        from .. import rewards

        reward_fn = reward_fn or rewards.task_reward
        answer_fn = answer_fn or rewards.extract_answer
        success_fn = success_fn or rewards.is_success
    settings = dict(
        G=G,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        grad_var=grad_var,
        params=params if isinstance(params, str) else "custom",
        seed=seed,
        batch_generate=batch_generate,
    )
    parts = None
    if out_dir is not None:
        parts = Path(out_dir) / "parts"
        parts.mkdir(parents=True, exist_ok=True)
        cfg_path = Path(out_dir) / "collect_settings.json"
        if cfg_path.exists():
            old = json.loads(cfg_path.read_text())
            if old != settings:
                raise ValueError(f"{out_dir} holds parts collected with other settings {old}; now {settings}")
        else:
            write_json(cfg_path, settings, indent=None)
    tqdm = require("tqdm").tqdm
    rollouts, groups, grams = [], [], []
    for k, (_, row) in enumerate(tqdm(list(queries.iterrows()), desc="collect", disable=not progress)):
        stem = f"{k:05d}_{_safe(row['query_id'])}"
        if parts is not None and (parts / f"{stem}.groups.parquet").exists():
            part = pd.read_parquet(parts / f"{stem}.parquet")
            if len(part) != G:  # a part of another run, or edited: never a group of another size
                raise ValueError(
                    f"{parts / stem}.parquet holds {len(part)} rollouts, not G = {G}; delete it "
                    f"(and its .groups.parquet) to collect that query again"
                )
            if "temperature" not in part.columns:  # a part of an older run: the settings say which
                part = part.assign(temperature=float(temperature))
            rollouts.append(part)
            groups.append(pd.read_parquet(parts / f"{stem}.groups.parquet"))
            gram_part = parts / f"{stem}.gram.parquet"
            grams.append(pd.read_parquet(gram_part) if gram_part.exists() else None)
            continue
        r, g, K = _query_parts(
            model,
            tokenizer,
            k,
            row,
            G=G,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            reward_fn=reward_fn,
            answer_fn=answer_fn,
            success_fn=success_fn,
            grad_var=grad_var,
            params=params,
            batch_generate=batch_generate,
            seed=seed,
        )
        if parts is not None:  # the groups part last: its presence marks the query finished
            write_frame(r, parts / f"{stem}.parquet")
            if K is not None:
                write_frame(K, parts / f"{stem}.gram.parquet")
            write_frame(g, parts / f"{stem}.groups.parquet")
        rollouts.append(r)
        groups.append(g)
        grams.append(K)
    if not rollouts:
        raise ValueError("queries frame is empty")
    ro = validate_rollouts(pd.concat(rollouts, ignore_index=True))
    gr = validate_groups(pd.concat(groups, ignore_index=True))
    if not return_grams:
        return ro, gr
    gm = None if (not grams or any(x is None for x in grams)) else pd.concat(grams, ignore_index=True)
    return ro, gr, gm
