"""Score many generated hostile model answers with the math reward; print the slowest call and
the fallback count.

    python bench/hostile.py            # 100,000 answers
    python bench/hostile.py --n 5000   # a quick look

Answers are drawn (seeded) from families a model or an attacker could produce: random LaTeX
token soup, power towers, factorials, huge numbers, deep \\frac/\\sqrt nesting, unbalanced and
repeated \\boxed{, up to 64 KB each. Every answer is scored by ``task_reward("math", ...)``
against a reference; the issue's bound is 2 s for any completion up to 64 KB.
"""
from __future__ import annotations

import argparse
import random
import time

from tqdm import tqdm

from gcpo_analysis import rewards

TOKENS = ["\\boxed{", "{", "}", "^", "^{", "\\frac", "\\sqrt", "\\sqrt[", "]", "!", "9999", "99", "7",
          "0", "(", ")", "x", "y", "\\pi", "e", "i", ",", "=", "\\left(", "\\right)", ".", "-", "+",
          "\\cdot", "\\infty", "\\text{", "$", "__import__('os')", "lambda:", "'", "%"]


def hostile_answer(rng: random.Random) -> str:
    kind = rng.randrange(8)
    if kind == 0:  # token soup
        return "".join(rng.choice(TOKENS) for _ in range(rng.randrange(1, 120)))
    if kind == 1:  # power tower
        depth = rng.randrange(2, 8)
        body = str(rng.choice([2, 9, 99, 9999, 10**6]))
        for _ in range(depth):
            body = f"({body})^{{{rng.choice([2, 99, 9999, 99999])}}}"
        return f"The answer is \\boxed{{{body}}}"
    if kind == 2:  # factorials and symbolic powers
        return rf"\boxed{{{rng.randrange(10**6)}{'!' * rng.randrange(1, 5)} + (x+{rng.randrange(9)})^{{{rng.randrange(10**5)}}}}}"
    if kind == 3:  # a huge number
        return "\\boxed{" + "9" * rng.randrange(100, 65_000) + "}"
    if kind == 4:  # deep nesting
        n = rng.randrange(10, 4000)
        cmd = rng.choice(["\\frac{1}{", "\\sqrt{", "{", "("])
        return "\\boxed{" + cmd * n + "1" + rng.choice(["}", ")"]) * (n + rng.randrange(-2, 3)) + "}"
    if kind == 5:  # repeated unclosed boxes
        return "\\boxed{" * rng.randrange(100, 9000)
    if kind == 6:  # a plausible answer
        a, b = rng.randrange(1, 50), rng.randrange(1, 50)
        return rng.choice([rf"\boxed{{\frac{{{a}}}{{{b}}}}}", rf"\boxed{{{a}\sqrt{{{b}}}}}", f"The answer is {a * b}."])
    return "".join(rng.choice(TOKENS) for _ in range(rng.randrange(1000, 9000)))  # long soup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="answers to score")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    references = ["1", "\\frac{1}{2}", "2\\sqrt{3}", "x^2+1", "(1, 2)", "9999^{9999}"]
    rewards.task_reward("math", "\\boxed{\\frac{49}{27}}", ["1"])  # import and warm up sympy before the clock
    rewards.math_fallbacks(reset=True)
    slowest, total, longest, n_two = (0.0, ""), 0.0, 0, 0
    for _ in tqdm(range(args.n), desc="hostile answers", mininterval=2):
        answer = hostile_answer(rng)
        longest = max(longest, len(answer))
        t0 = time.perf_counter()
        r = rewards.task_reward("math", answer, [rng.choice(references)])
        dt = time.perf_counter() - t0
        total += dt
        n_two += r == 2.0
        if dt > slowest[0]:
            slowest = (dt, answer)
    fallbacks = rewards.math_fallbacks()
    print()
    print("| answers | longest | total | mean | slowest call | reward 2 | fallbacks (length / cost) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.n:,} | {longest:,} chars | {total:.1f} s | {1e3 * total / args.n:.2f} ms | "
          f"{slowest[0]:.3f} s | {n_two:,} | {fallbacks.get('length', 0):,} / {fallbacks.get('cost', 0):,} |")
    print(f"\nslowest answer ({len(slowest[1]):,} chars): {slowest[1][:160]!r}...")


if __name__ == "__main__":
    main()
