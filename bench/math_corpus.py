"""Accuracy of the math reward's equivalence on tests/data/math_corpus.jsonl (pairs with verdicts
known by construction; tests/data/make_math_corpus.py): overall, per family, and every miss.

    python bench/math_corpus.py
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

from gcpo_analysis.rewards.math.grading import math_equiv, math_fallbacks

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "math_corpus.jsonl"


def main() -> None:
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    math_equiv("1", "1")  # start the worker before the clock
    hits, misses, by_family, slowest = 0, [], defaultdict(lambda: [0, 0]), 0.0
    t_all = time.perf_counter()
    for r in rows:
        math_fallbacks(reset=True)
        t0 = time.perf_counter()
        got = math_equiv(r["answer"], r["reference"])
        took = time.perf_counter() - t0
        if took > slowest:
            slowest, slow_pair = took, (r["answer"], r["reference"], math_fallbacks())
        ok = got == r["equal"]
        hits += ok
        by_family[r["family"]][0] += ok
        by_family[r["family"]][1] += 1
        if not ok:
            misses.append(r)
    print(
        f"accuracy {hits}/{len(rows)} = {hits / len(rows):.1%} ({sum(r['equal'] for r in rows)} equal pairs); "
        f"{time.perf_counter() - t_all:.1f} s in all, slowest pair {slowest:.2f} s {slow_pair}"
    )
    for family, (ok, n) in sorted(by_family.items()):
        print(f"  {family:28s} {ok:3d}/{n:3d}")
    for r in misses:
        print(f"  MISS ({'equal' if r['equal'] else 'unequal'}, {r['family']}): {r['answer']!r} vs {r['reference']!r}")


if __name__ == "__main__":
    main()
