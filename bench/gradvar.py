"""Benchmark of the exact per-query Gram matrix K_ij = g_i . g_j (gcpo_analysis.gradvar).

On the packaged SmolLM2-135M-Instruct (tied embeddings), all parameters, random token ids,
completion = the last --completion tokens, for G x T in --G x --T:
(a) floor: one batched forward + backward (``loss.backward()``) of sum_i log pi(y_i | q);
(b) ours:  group_gradient_gram (one forward + one backward with hooks);
(c) naive: G single-sequence backward passes, each gradient flattened to fp32 on the CPU
    (G x 135M floats), then their Gram.
Time is one run after a small warm-up. Peak memory: on CUDA torch.cuda.max_memory_allocated
above the allocation before the run; on CPU the process RSS sampled every 2 ms by a psutil
thread, above the RSS before the run (freed heap is handed back with malloc_trim between runs).
The table also gives max |K_ours - K_naive| / max |K_naive|.

    python bench/gradvar.py [--quick] [--G 8 16] [--T 128 320] [--completion 64] [--no-naive]
                            [--device cpu|cuda]

--quick runs only G=16, T=128. The device defaults to cuda when available.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from gcpo_analysis.gradvar import group_gradient_gram, naive_gram, sequence_logprobs  # noqa: E402
from gcpo_analysis.models import load_policy  # noqa: E402


def _trim():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: RSS may include freed heap, peaks are then upper bounds
        pass


class _RSSPeak:
    """Peak RSS growth (bytes) of this process while the block runs, sampled by a thread."""

    def __init__(self, interval=0.002):
        import psutil

        self.proc, self.interval = psutil.Process(), interval

    def __enter__(self):
        self.base = self.peak = self.proc.memory_info().rss
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)
        self.growth = self.peak - self.base


def measure(fn, device):
    """(seconds, peak bytes above the start, result) of fn()."""
    _trim()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        return dt, torch.cuda.max_memory_allocated() - base, out
    with _RSSPeak() as rss:
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
    return dt, rss.growth, out


def floor(model, ids, am, cm):
    loss = sequence_logprobs(model, ids, am, cm).sum()
    loss.backward()
    model.zero_grad(set_to_none=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--G", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--T", type=int, nargs="+", default=[128, 320])
    ap.add_argument("--completion", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="only G=16, T=128")
    ap.add_argument("--no-naive", action="store_true", help="skip (c)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    if args.quick:
        args.G, args.T = [16], [128]
    model, _ = load_policy(device=args.device)
    V = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)

    def batch(G, T):
        ids = torch.randint(0, V, (G, T), generator=gen)
        cm = torch.zeros(G, T, dtype=torch.long)
        cm[:, T - args.completion :] = 1
        return ids.to(args.device), torch.ones_like(ids).to(args.device), cm.to(args.device)

    warm = batch(2, args.completion + 8)
    floor(model, *warm)
    group_gradient_gram(model, *warm)
    rows = []
    for G in args.G:
        for T in args.T:
            b = batch(G, T)
            ta, ma, _ = measure(lambda b=b: floor(model, *b), args.device)
            tb, mb, K = measure(lambda b=b: group_gradient_gram(model, *b), args.device)
            row = dict(G=G, T=T, ta=ta, ma=ma, tb=tb, mb=mb)
            if not args.no_naive:
                tc, mc, R = measure(lambda b=b: naive_gram(model, *b), args.device)
                row.update(tc=tc, mc=mc, err=float(np.abs(K - R).max() / np.abs(R).max()))
                del R
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    mb_ = 2**20
    print(
        f"\nSmolLM2-135M, all {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
        f"device {args.device}, completion = last {args.completion} tokens\n"
    )
    print(
        "| G | T | (a) floor s | (a) MB | (b) ours s | (b) MB | (c) naive s | (c) MB "
        "| (b)/(a) time | (b)/(a) mem | (c)/(b) time | (c)/(b) mem | rel. err |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        naive = f"{r['tc']:.2f} | {r['mc'] / mb_:.0f}" if "tc" in r else "- | -"
        ratios = (
            f"{r['tc'] / r['tb']:.2f} | {r['mc'] / max(r['mb'], 1):.2f} | {r['err']:.1e}" if "tc" in r else "- | - | -"
        )
        print(
            f"| {r['G']} | {r['T']} | {r['ta']:.2f} | {r['ma'] / mb_:.0f} | {r['tb']:.2f} | "
            f"{r['mb'] / mb_:.0f} | {naive} | {r['tb'] / r['ta']:.2f} | "
            f"{r['mb'] / max(r['ma'], 1):.2f} | {ratios} |"
        )


if __name__ == "__main__":
    main()
