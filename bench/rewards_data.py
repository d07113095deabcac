"""Benchmark of the rewards and the benchmark loaders; prints a markdown table.

(a) load_queries on each local benchmark file (data folder of the README table);
(b) math_reward of MATH500 reference solutions against their answers (mostly the string path),
    OlympiadBench final answers against themselves rewritten ("$x$" → "x", lists reordered),
    and a table of symbolic pairs that need sympy (\\sqrt{8} vs 2\\sqrt{2} ...);
(c) qa_reward / hotpot_reward / BLEU of NarrativeQA and HotpotQA reference answers.
Time is wall clock of one pass with cold caches, memory the tracemalloc peak of a second pass.

    python bench/rewards_data.py [--data-dir DIR]   # DIR holds qasper/, hotpotqa/, math500/, aime24/, olympiadbench/
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gcpo_analysis import rewards as R  # noqa: E402
from gcpo_analysis.data import load_queries  # noqa: E402

FILES = {
    "narrativeqa": None,
    "qasper": "qasper/sample_small.json",
    "hotpotqa": "hotpotqa/test.jsonl",
    "math500": "math500/test.json",
    "aime24": "aime24/test.jsonl",
    "olympiadbench": "olympiadbench/test.jsonl",
}
SYMBOLIC = [
    (r"2\sqrt{2}", r"\sqrt{8}"),
    (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}"),
    ("x^2+2x+1", "(x+1)^2"),
    (r"\frac{1}{2 n+2}", r"\frac{1}{2(n+1)}"),
    (r"3\pi", r"\pi\cdot 3"),
    ("0.75", r"\tfrac34"),
    ("(1,2)", "(1.0, 2)"),
    ("1+2i", "2i+1"),
]


def _cold():
    R.clear_caches()


def timed(fn):
    """Wall time of one cold-cache pass, then tracemalloc peak of a second cold pass (tracing
    slows sympy several-fold, so it is kept out of the timing)."""
    _cold()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    _cold()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, dt, peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data-dir", default="data", help="folder with the local benchmark files of FILES (missing ones are skipped)"
    )
    args = ap.parse_args()
    base = Path(args.data_dir)
    rows, frames = [], {}
    for ds, rel in FILES.items():
        path = None if rel is None else base / rel
        if path is not None and not path.exists():
            print(f"skipping {ds}: {path} not found", file=sys.stderr)
            continue
        df, dt, mb = timed(lambda ds=ds, path=path: load_queries(ds, path))
        frames[ds] = df
        rows.append((f"load_queries {ds}", len(df), dt, mb))

    if "math500" in frames:
        import json

        recs = json.loads((base / FILES["math500"]).read_text())
        out, dt, mb = timed(lambda: [R.math_reward(r["solution"], r["answer"]) for r in recs])
        rows.append(
            (
                f"math_reward MATH500 gold solutions (acc {100 * sum(o == 2 for o in out) / len(out):.1f}%)",
                len(out),
                dt,
                mb,
            )
        )
    if "olympiadbench" in frames:
        refs = frames["olympiadbench"].references.tolist()
        rewritten = [", ".join(reversed([a.replace("$", "") for a in ref[0].split("$,")])) for ref in refs]
        out, dt, mb = timed(lambda: [R.math_equiv(w, ref[0]) for w, ref in zip(rewritten, refs)])
        rows.append(
            (f"math_equiv OlympiadBench rewritten answers (equal {100 * sum(out) / len(out):.1f}%)", len(out), dt, mb)
        )
    pairs = SYMBOLIC * 25
    out, dt, mb = timed(lambda: [R.math_equiv(a, b) for a, b in pairs])
    rows.append((f"math_equiv symbolic pairs (equal {100 * sum(out) / len(out):.0f}%)", len(pairs), dt, mb))

    if "narrativeqa" in frames:
        refs = frames["narrativeqa"].references.tolist()
        preds = [f"Answer: {r[-1]}" for r in refs]
        out, dt, mb = timed(lambda: [R.qa_reward(p, r[:1]) for p, r in zip(preds, refs)])
        rows.append(("qa_reward NarrativeQA (ref 2 vs ref 1)", len(out), dt, mb))
        out, dt, mb = timed(lambda: [R.bleu(r[-1], r[:1]) for r in refs])
        rows.append(("sentence bleu NarrativeQA (ref 2 vs ref 1)", len(out), dt, mb))
        m, dt, mb = timed(lambda: R.task_metrics("qa_f1", preds, [r[:1] for r in refs], extract=True))
        rows.append(
            (f"task_metrics qa_f1 (Acc {m['Acc']:.1f}, BLEU {m['BLEU']:.1f}, F1 {m['F1']:.1f})", len(preds), dt, mb)
        )
    if "hotpotqa" in frames:
        refs = frames["hotpotqa"].references.tolist()
        out, dt, mb = timed(lambda: [R.hotpot_reward(f"The answer is {r[0]}.", r) for r in refs])
        rows.append(("hotpot_reward HotpotQA gold answers", len(out), dt, mb))

    print("| step | items | time (s) | items/s | peak memory (MiB) |")
    print("|---|---:|---:|---:|---:|")
    for name, n, dt, mb in rows:
        print(f"| {name} | {n} | {dt:.3f} | {n / dt:,.0f} | {mb:.1f} |")


if __name__ == "__main__":
    main()
