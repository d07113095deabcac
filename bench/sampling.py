"""Seconds per decode step of the gcpo loop's sampler against the floor of streaming the weights:

    python bench/sampling.py                       # Q = 1 and 2 groups, 5 interleaved rounds
    python bench/sampling.py --queries 2 --rounds 9 --threads 1

Workload (that of bench/trl_step.py): the packaged SmolLM2-135M-Instruct in fp32
with LoRA r = 8 on q_proj/v_proj, cpu_smoke prompts (NarrativeQA, 96-token passages), G = 8,
32 new tokens, temperature 0.9, one seed per group. Samplers (``sampling_kernels``): ``exact``
(transformers ``generate``, one call per group: today's samples), ``onednn`` and ``bf16``
(``gcpo_train/sampling/kernels.py``: the step's groups in one loop on prepacked weights), ``fused``
(``gcpo_train/sampling/fused.py``: that loop with a hand-written Llama decode step instead of the
transformers forward) and ``fused_bf16`` (that step on bfloat16 weights: the floor stays the fp32
weights' bytes, the policy's own).

The floor is what one decode step cannot beat: reading every weight once. Two measures of it, on
this machine with the same threads: ``copy`` (a memcpy of the weight bytes, ``Tensor.copy_``)
and ``GEMV`` (one row times every weight matrix, torch's default kernel). A decode step's time is
the sampler's time over the steps it decoded (prefill included), wall and
process CPU (with one torch thread the CPU time is the work, robust to a machine shared with
other jobs; wall time is what a user waits).
Methods run interleaved (round 1: each in turn, then round 2...), so a machine whose load drifts
slows them alike; each number is the median over rounds. ``same tokens``: rows whose tokens equal
``exact``'s for the same seeds. Memory: the process's peak RSS, and the packed weights' bytes
(the one copy the packed samplers keep). Printed beside the floor, not a floor: the linear layers
of one 8-row step alone on packed weights (what the rest of a decode step adds is attention,
the sampling draw and the per-token small ops).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_workload(n_prompts: int):
    """The policy (LoRA-wrapped, eval mode), its tokenizer and ``n_prompts`` cpu_smoke prompts."""
    from gcpo_analysis.prompts import build_prompt
    from gcpo_train.config import load_config
    from gcpo_train.evaluation.splits import load_split
    from gcpo_train.model.policy import load_model_and_tokenizer, wrap_lora

    cfg = load_config(ROOT / "configs" / "cpu_smoke.yaml", dict(output_dir=str(ROOT / "runs" / "bench_sampling")))
    model, tok = load_model_and_tokenizer("packaged", "float32")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = wrap_lora(model, 8, 16, 0.0, ["q_proj", "v_proj"]).eval()
    queries = load_split(cfg, cfg.train_split).iloc[:n_prompts]
    prompts = [build_prompt(r, tok, max_context_tokens=cfg.max_context_tokens) for _, r in queries.iterrows()]
    return model, tok, prompts, cfg


def clock(fn, *args):
    """(wall seconds, process CPU seconds, result) of one call ``fn(*args)``."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    return time.perf_counter() - t0, time.process_time() - c0, out


def median_seconds(fn, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``repeats`` calls after a warm-up."""
    fn()
    runs = [clock(fn) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def floors(model, repeats: int = 9) -> dict:
    """Seconds to read every weight once: a memcpy of their bytes, and a one-row GEMV pass."""
    import torch

    params = list(model.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    buf = torch.empty_like(flat)
    mats = [p.detach() for p in params if p.dim() == 2]
    xs = {m.shape[1]: torch.randn(1, m.shape[1], dtype=m.dtype) for m in mats}

    def gemv():
        for m in mats:
            torch.nn.functional.linear(xs[m.shape[1]], m)

    # not a floor: the linear layers of one 8-row decode step alone, on oneDNN-prepacked weights
    lins = [m.weight.detach() for m in model.modules() if type(m) is torch.nn.Linear]
    packed = [(torch.ops.mkldnn._reorder_linear_weight(w, 8), torch.randn(8, w.shape[1])) for w in lins]

    def linears():
        for w, x in packed:
            torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")

    return dict(
        bytes=flat.numel() * flat.element_size(),
        copy=median_seconds(lambda: buf.copy_(flat), repeats),
        gemv=median_seconds(gemv, repeats),
        linears=median_seconds(linears, repeats),
    )


def policy_gap(model, tok, prompts, reference, kernels, G: int, temperature: float) -> tuple[float, float]:
    """(mean, largest) total-variation distance between the next-token distributions (softmax of
    logits / T) of ``kernels``' decode step and the float32 policy's (``fused``'s step, logits
    within about 1e-5 of the model's), teacher-forced along the ``exact`` sampler's rollouts
    ``reference`` (their unfinished rows): how far a bf16 sampler's policy is from π_θ."""
    import torch

    from gcpo_analysis.tokens import position_ids
    from gcpo_train.sampling.fused import FusedKernels
    from gcpo_train.sampling.generate import _encode
    from gcpo_train.sampling.kernels import model_step

    ids, att = _encode(tok, prompts, None, None)
    positions = position_ids(att)
    completion, live = reference.completion_ids, reference.completion_mask.bool()
    T = completion.shape[1]
    probs = []
    for k in (kernels, FusedKernels()):
        with torch.no_grad(), k.applied(model):
            step = (k.decode_step if isinstance(k, FusedKernels) else model_step)(model, ids, att, positions, G, T)
            current, out = ids[:, -1:].repeat_interleave(G, dim=0), []
            for t in range(T):
                out.append(torch.softmax(step(current, t) / temperature, dim=-1))
                current = completion[:, t : t + 1]
        probs.append(torch.stack(out, dim=1))  # (rows, T, V)
    tv = 0.5 * (probs[0] - probs[1]).abs().sum(-1)[live]
    return float(tv.mean()), float(tv.max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", default="1,2", help="groups per step (Q), comma-separated (default 1,2)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported")
    ap.add_argument("--group_size", type=int, default=8)
    ap.add_argument("--max_new_tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    from gcpo_train.sampling.registry import check_kernels, make_kernels, sampler, sampler_names

    names = sampler_names()
    ap.add_argument("--samplers", default=",".join(names), help="subset of " + ", ".join(names))
    args = ap.parse_args()
    import torch

    from gcpo_train.sampling.generate import generate_groups

    if args.threads:
        torch.set_num_threads(args.threads)
    samplers = args.samplers.split(",")
    for s in samplers:
        check_kernels(s)
    qs = [int(q) for q in args.queries.split(",")]
    warnings.simplefilter("ignore")
    model, tok, prompts, cfg = load_workload(max(qs))
    load0 = os.getloadavg()
    floor = floors(model)
    kernels = {s: make_kernels(s) for s in samplers}
    G, T = args.group_size, args.max_new_tokens

    def sample(name, q):
        return generate_groups(
            model,
            tok,
            prompts[:q],
            G,
            max_new_tokens=T,
            temperature=cfg.temperature,
            seeds=list(range(100, 100 + q)),
            kernels=kernels[name],
        )

    packed_mib, pack_s = {}, {}
    for s in samplers:  # warm-up; the packed samplers pack their weights here
        pack_s[s] = clock(sample, s, 1)[0]
        if kernels[s] is not None:
            packed_mib[s] = sum(hit[1].nbytes for hit in kernels[s]._packed.values()) / 2**20  # (key, packed, ...)
    per_step = {(s, q): [] for s in samplers for q in qs}
    reference_sampler = next((s for s in samplers if sampler(s).fp32_exact), None)  # transformers generate
    same, exact = {}, {}  # exact: the reference sampler's rollouts of each Q (the same seeds every round)
    for _ in range(args.rounds):
        for q in qs:
            reference = None
            for s in samplers:
                wall, cpu, batch = clock(sample, s, q)
                per_step[(s, q)].append((wall / batch.n_completion, cpu / batch.n_completion))
                if s == reference_sampler:
                    reference = exact[q] = batch
                elif reference is not None and (s, q) not in same:
                    n = min(reference.n_completion, batch.n_completion)
                    rows = (reference.completion_ids[:, :n] == batch.completion_ids[:, :n]).all(1)
                    same[(s, q)] = f"{int(rows.sum())}/{len(rows)}"
    gap = {}  # the bf16 samplers' distance from the float32 policy, along exact's rollouts of the first Q
    if exact:
        for s in (s for s in samplers if sampler(s).bf16):
            gap[s] = policy_gap(model, tok, prompts[: qs[0]], exact[qs[0]], kernels[s], G, cfg.temperature)
    load1 = os.getloadavg()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"\nCPU, {torch.get_num_threads()} torch thread(s); load average {load0[0]:.2f} -> {load1[0]:.2f}; "
        f"median of {args.rounds} interleaved rounds; G = {G}, {T} new tokens, prompts of "
        f"{[len(tok(p)['input_ids']) for p in prompts]} tokens\n"
    )
    mb = floor["bytes"] / 1e6
    (copy_w, copy_c), (gemv_w, gemv_c) = floor["copy"], floor["gemv"]
    print(
        f"floor: the {mb:.0f} MB of fp32 weights read once: copy {1e3 * copy_w:.1f} ms wall, {1e3 * copy_c:.1f} ms CPU "
        f"({mb / 1e3 / copy_w:.1f} GB/s); GEMV {1e3 * gemv_w:.1f} ms wall, {1e3 * gemv_c:.1f} ms CPU "
        f"({mb / 1e3 / gemv_w:.1f} GB/s); the linear layers of an 8-row step alone on packed weights "
        f"{1e3 * floor['linears'][0]:.1f} ms wall, {1e3 * floor['linears'][1]:.1f} ms CPU\n"
    )
    print(
        "| Q groups | rows | sampler | ms per decode step, wall | vs copy | vs GEMV | CPU ms per step "
        "| vs copy (CPU) | vs exact (CPU) | same tokens |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for q in qs:
        base = statistics.median(c for _, c in per_step[(reference_sampler, q)]) if reference_sampler else float("nan")
        for s in samplers:
            w = statistics.median(r[0] for r in per_step[(s, q)])
            c = statistics.median(r[1] for r in per_step[(s, q)])
            print(
                f"| {q} | {q * G} | {s} | {1e3 * w:.1f} | {w / copy_w:.2f}x | {w / gemv_w:.2f}x | {1e3 * c:.1f} "
                f"| {c / copy_c:.2f}x | {c / base:.2f}x | {same.get((s, q), '')} |"
            )
    packed = ", ".join(
        f"{s} {packed_mib[s]:.0f} MiB (packed in {pack_s[s]:.1f} s with its first call)" for s in packed_mib
    )
    for s, (mean_tv, max_tv) in gap.items():
        print(
            f"\n{s}: its next-token distribution against the float32 policy's, teacher-forced along exact's "
            f"{qs[0] * G} rollouts: total variation {mean_tv:.4f} on average, {max_tv:.4f} at most"
        )
    print(f"\npeak RSS {peak:.0f} MiB (all samplers in this process); packed weights kept: {packed or 'none'}")


if __name__ == "__main__":
    main()
