"""Score many generated hostile model answers with the math reward; print the slowest call, the
mean, the fallbacks by reason, a table per family, and the sympy worker's per-call overhead.

    python bench/hostile.py            # 100,000 answers
    python bench/hostile.py --n 5000   # a quick look

Answers are drawn (seeded) from families a model or an attacker could produce: random LaTeX
token soup, power towers, factorials, huge numbers, deep \\frac/\\sqrt nesting, unbalanced and
repeated \\boxed{, float literals with huge exponents, method calls (``\\pi.n(99999999)``),
polynomial powers against a reordering, roots of huge numbers, ``<think>`` tags (unclosed,
repeated, nested), up to 64 KB each. Every answer is scored by ``task_reward("math", ...)``
against a reference; the issue's bound is 2 s for any completion up to 64 KB.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict

from tqdm import tqdm

from gcpo_analysis import rewards

TOKENS = [
    "\\boxed{",
    "{",
    "}",
    "^",
    "^{",
    "\\frac",
    "\\sqrt",
    "\\sqrt[",
    "]",
    "!",
    "9999",
    "99",
    "7",
    "0",
    "(",
    ")",
    "x",
    "y",
    "\\pi",
    "e",
    "i",
    ",",
    "=",
    "\\left(",
    "\\right)",
    ".",
    "-",
    "+",
    "\\cdot",
    "\\infty",
    "\\text{",
    "$",
    "__import__('os')",
    "lambda:",
    "'",
    "%",
    "1e999999",
    ".n(",
    "9999)",
    "<think>",
    "</think>",
    "E",
    "j",
    "0x",
]
REFERENCES = ["1", "\\frac{1}{2}", "2\\sqrt{3}", "x^2+1", "(1, 2)", "9999^{9999}", "\\pi"]
FAMILIES = (
    "token soup",
    "power tower",
    "factorial, symbolic power",
    "huge number",
    "deep nesting",
    "unclosed boxes",
    "plausible",
    "long soup",
    "float literal",
    "method call",
    "polynomial power",
    "root of a huge number",
    "think tags",
)


def hostile_answer(rng: random.Random, family: str) -> tuple[str, str | None]:
    """(answer, reference or None for a random one of REFERENCES)."""
    if family == "token soup":
        return "".join(rng.choice(TOKENS) for _ in range(rng.randrange(1, 120))), None
    if family == "power tower":
        body = str(rng.choice([2, 9, 99, 9999, 10**6]))
        for _ in range(rng.randrange(2, 8)):
            body = f"({body})^{{{rng.choice([2, 99, 9999, 99999])}}}"
        return f"The answer is \\boxed{{{body}}}", None
    if family == "factorial, symbolic power":
        return (
            rf"\boxed{{{rng.randrange(10**6)}{'!' * rng.randrange(1, 5)} + (x+{rng.randrange(9)})^{{{rng.randrange(10**5)}}}}}",
            None,
        )
    if family == "huge number":
        return "\\boxed{" + "9" * rng.randrange(100, 65_000) + "}", None
    if family == "deep nesting":
        n = rng.randrange(10, 4000)
        cmd = rng.choice(["\\frac{1}{", "\\sqrt{", "{", "("])
        return "\\boxed{" + cmd * n + "1" + rng.choice(["}", ")"]) * (n + rng.randrange(-2, 3)) + "}", None
    if family == "unclosed boxes":
        return "\\boxed{" * rng.randrange(100, 9000), None
    if family == "plausible":
        a, b = rng.randrange(1, 50), rng.randrange(1, 50)
        return rng.choice(
            [
                rf"\boxed{{\frac{{{a}}}{{{b}}}}}",
                rf"\boxed{{{a}\sqrt{{{b}}}}}",
                f"The answer is {a * b}.",
                rf"\boxed{{{a}x^2+{b}}}",
                rf"\boxed{{\frac{{{a}\pi}}{{{b}}}}}",
            ]
        ), None
    if family == "long soup":
        return "".join(rng.choice(TOKENS) for _ in range(rng.randrange(1000, 9000))), None
    if family == "float literal":
        mantissa = rng.choice(["1", "9.99", "2", ".5", "123456789"])
        exponent = rng.choice([rng.randrange(10**3, 10**10), -rng.randrange(10**3, 10**10), rng.randrange(400)])
        body = rng.choice(
            [
                f"{mantissa}e{exponent}",
                f"{mantissa}E{exponent}",
                f"2^{{{mantissa}e{abs(exponent)}}}",
                f"x^{{{mantissa}e{abs(exponent)}}}",
                f"\\sqrt{{{mantissa}e{exponent}}}",
            ]
        )
        return f"\\boxed{{{body}}}", None
    if family == "method call":
        n = rng.choice([99, 99999999, 10**12])
        body = rng.choice(
            [
                rf"\pi.n({n})",
                rf"\pi.evalf({n})",
                "x.expand()",
                "(1).__class__",
                f"E.n({n})",
                f"sympy.N(pi, {n})",
                "x.subs(x, 9^{9^{9}})",
                "__import__('os').system('true')",
                "(lambda: 9**9**9)()",
                f"getattr(pi, 'n')({n})",
                f"pi.n({n})",
            ]
        )
        return f"\\boxed{{{body}}}", None
    if family == "polynomial power":
        names = rng.sample("abcdefghkmnpqrstuvwxyz", rng.randrange(2, 9))
        n = rng.randrange(2, 70)
        shuffled = names[:]
        rng.shuffle(shuffled)
        return f"\\boxed{{({'+'.join(names)})^{{{n}}}}}", f"({'+'.join(shuffled)})^{{{n}}}"
    if family == "root of a huge number":
        bits = rng.randrange(500, 7001)
        radicand = rng.choice(
            [
                str(rng.getrandbits(bits)),
                f"2^{{{bits}}}+{rng.randrange(1, 99)}",
                f"7^{{{bits // 3}}}+3",
                f"{rng.getrandbits(min(bits, 600))}",
            ]
        )
        return rng.choice(
            [
                f"\\boxed{{\\sqrt{{{radicand}}}}}",
                f"\\boxed{{\\sqrt[3]{{{radicand}}}}}",
                f"\\boxed{{({radicand})^{{1/2}}}}",
                f"\\boxed{{({radicand})^{{0.5}}}}",
            ]
        ), None
    # think tags: repeated, unclosed, nested, a box inside or after
    size = rng.randrange(1000, 64 * 1024)
    parts = ["<think>", "</think>", "<THINK>", "x", " \\boxed{1} ", "<think><think>", "</think></think>"]
    pattern = rng.choice([["<think>"], ["</think>"], parts, ["<think>", "y" * 50]])
    text = []
    while sum(map(len, text)) < size:
        text.append(rng.choice(pattern))
    return "".join(text)[:size] + rng.choice(["", "\\boxed{1}", "</think>\\boxed{2}"]), None


def overhead(reps: int = 2000) -> str:
    """Per-call cost of the worker: the round trip of a cached comparison, and the median of
    cold symbolic comparisons through the worker against the same ones in this process."""
    import statistics

    from gcpo_analysis.rewards.math import sympy_check, sympy_worker
    from gcpo_analysis.rewards.math.syntax import latex_to_code

    call = sympy_worker.WORKER.call
    call(["equiv", "x", "x"], timeout=5)
    t0 = time.perf_counter()
    for _ in range(reps):
        call(["equiv", "x", "x"], timeout=5)
    round_trip = (time.perf_counter() - t0) / reps
    pairs = [
        (latex_to_code(a), latex_to_code(b))
        for a, b in [
            (r"2\sqrt{2}", r"\sqrt{8}"),
            ("x^2+2x+1", "(x+1)^{2}"),
            (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}"),
        ]
    ]
    sympy_check.warm()
    worker, local = [], []
    for _ in range(20):
        for a, b in pairs:
            call(["clear"], timeout=5)
            t0 = time.perf_counter()
            call(["equiv", a, b], timeout=5)
            worker.append(time.perf_counter() - t0)
            sympy_check.parse.cache_clear()
            t0 = time.perf_counter()
            sympy_check.compare(a, b)
            local.append(time.perf_counter() - t0)
    return (
        f"worker round trip (cached pair): {1e6 * round_trip:.0f} µs; a cold symbolic comparison "
        f"(median of {len(worker)}): {1e3 * statistics.median(worker):.2f} ms in the worker, "
        f"{1e3 * statistics.median(local):.2f} ms in-process"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="answers to score")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rewards.task_reward("math", "\\boxed{2\\sqrt{2}}", ["\\sqrt{8}"])  # start the worker before the clock
    rewards.math_fallbacks(reset=True)
    slowest, total, longest, n_two = (0.0, ""), 0.0, 0, 0
    by_family = defaultdict(lambda: [0, 0.0, 0.0])  # count, total s, slowest s
    for _ in tqdm(range(args.n), desc="hostile answers", mininterval=2):
        family = rng.choice(FAMILIES)
        answer, reference = hostile_answer(rng, family)
        longest = max(longest, len(answer))
        t0 = time.perf_counter()
        r = rewards.task_reward("math", answer, [reference or rng.choice(REFERENCES)])
        dt = time.perf_counter() - t0
        total += dt
        n_two += r == 2.0
        stats = by_family[family]
        stats[0], stats[1], stats[2] = stats[0] + 1, stats[1] + dt, max(stats[2], dt)
        if dt > slowest[0]:
            slowest = (dt, answer)
    fallbacks = rewards.math_fallbacks()
    reasons = " / ".join(f"{fallbacks.get(k, 0):,}" for k in rewards.FALLBACK_REASONS)
    print()
    print(
        f"| answers | longest | total | mean | slowest call | reward 2 | fallbacks ({' / '.join(rewards.FALLBACK_REASONS)}) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {args.n:,} | {longest:,} chars | {total:.1f} s | {1e3 * total / args.n:.2f} ms | "
        f"{slowest[0]:.3f} s | {n_two:,} | {reasons} |"
    )
    print(f"\nslowest answer ({len(slowest[1]):,} chars): {slowest[1][:160]!r}...\n")
    print("| family | answers | mean | slowest |")
    print("|---|---:|---:|---:|")
    for family in FAMILIES:
        count, seconds, worst = by_family[family]
        print(f"| {family} | {count:,} | {1e3 * seconds / max(count, 1):.2f} ms | {worst:.3f} s |")
    print("\n" + overhead())


if __name__ == "__main__":
    main()
