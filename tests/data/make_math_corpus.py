"""Build tests/data/math_corpus.jsonl: (answer, reference) pairs whose verdict is known by
construction, for the math reward's correctness test.

    python tests/data/make_math_corpus.py /path/to/math500/test.json

Two parts:
- MATH500: each reference answer against a rewriting that keeps its value (``\\boxed{}``,
  ``$...$``, spaces after commas and around + and =, ``\\dfrac``, ``a/b`` for ``\\frac{a}{b}``,
  ``n.0`` for an integer) -> equal; and against a change of value (integer n -> n + 1, a
  fraction turned upside down, an ordered pair swapped) -> not equal. Which rewriting applies is
  decided from the answer's form alone, seeded, so the file is reproducible.
- HAND: the families the issue names, written out with their verdicts (sets, intervals,
  matrices, repeating decimals, binomials, factorials, logs, units, empty sets, and wrong
  answers that differ only in spacing or order).
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

HAND = [  # (answer, reference, equal, family)
    (r"\{1,2\}", r"\{2,1\}", True, "set"),
    (r"\{1, 2, 3\}", r"\{3,2,1\}", True, "set"),
    (r"\{1,2\}", r"\{1,3\}", False, "set"),
    (r"\{-1, 4\}", r"\{4, -1\}", True, "set"),
    (r"\{0\}", r"\{1\}", False, "set"),
    (r"\{\frac{1}{2}, 3\}", r"\{3, 0.5\}", True, "set"),
    (r"[1,2]", r"[1, 2]", True, "interval"),
    (r"(1,2]", r"[1,2]", False, "interval"),
    (r"x \in [1, 2]", r"[1,2]", True, "interval"),
    (r"(-\infty, 3)", r"(-\infty,3)", True, "interval"),
    (r"(-\infty, 3]", r"(-\infty,3)", False, "interval"),
    (r"[0, \frac{1}{2})", r"[0, 0.5)", True, "interval"),
    (r"(1,2)\cup(3,4)", r"(3,4)\cup(1,2)", True, "interval"),
    (r"(1,2)", r"[1,2)", False, "interval"),
    (r"[2, 5)", r"[2,5]", False, "interval"),
    (r"(0, \infty)", r"(0,\infty)", True, "interval"),
    (r"\begin{pmatrix} 12 \\ 3 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 23 \end{pmatrix}", False, "matrix"),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}", True, "matrix"),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}", False, "matrix"),
    (r"\begin{pmatrix} \frac{1}{2} \\ 3 \end{pmatrix}", r"\begin{pmatrix} 0.5 \\ 3 \end{pmatrix}", True, "matrix"),
    (r"\begin{bmatrix} 1 \\ 2 \end{bmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", True, "matrix"),
    (r"\begin{pmatrix} 2 \\ -1 \end{pmatrix}", r"\begin{pmatrix} -1 \\ 2 \end{pmatrix}", False, "matrix"),
    (r"\begin{pmatrix} 1 & 0 \\ 0 & 1 \end{pmatrix}", r"\begin{pmatrix} 1&0\\0&1 \end{pmatrix}", True, "matrix"),
    (r"0.\overline{3}", r"\frac13", True, "repeating decimal"),
    (r"0.36", r"0.\overline{36}", False, "repeating decimal"),
    (r"\frac{4}{11}", r"0.\overline{36}", True, "repeating decimal"),
    (r"0.1\overline{6}", r"\frac16", True, "repeating decimal"),
    (r"1.\overline{142857}", r"\frac{8}{7}", True, "repeating decimal"),
    (r"0.\overline{9}", r"1", True, "repeating decimal"),
    (r"0.3", r"0.\overline{3}", False, "repeating decimal"),
    (r"\frac{1}{3}", r"0.\overline{6}", False, "repeating decimal"),
    (r"\binom{5}{2}", r"10", True, "binomial"),
    (r"\binom{6}{3}", r"20", True, "binomial"),
    (r"\binom{6}{3}", r"21", False, "binomial"),
    (r"\dbinom{10}{1}", r"10", True, "binomial"),
    (r"\binom{7}{2}", r"\binom{7}{5}", True, "binomial"),
    (r"\binom{7}{2}", r"\binom{7}{3}", False, "binomial"),
    (r"5!", r"120", True, "factorial"),
    (r"4!", r"25", False, "factorial"),
    (r"\frac{6!}{4!}", r"30", True, "factorial"),
    (r"0!", r"1", True, "factorial"),
    (r"3! \cdot 2", r"12", True, "factorial"),
    (r"6!", r"720", True, "factorial"),
    (r"\log_2 8", r"3", True, "log"),
    (r"\log_3 81", r"4", True, "log"),
    (r"\log_{10} 1000", r"3", True, "log"),
    (r"\log_2 8", r"4", False, "log"),
    (r"\log_2 3", r"\frac{\ln 3}{\ln 2}", True, "log"),
    (r"\ln 1", r"0", True, "log"),
    (r"\log_5 25", r"\log_2 4", True, "log"),
    (r"\log_2 9", r"3", False, "log"),
    (r"5\text{ cm}", r"5", True, "unit"),
    (r"90^\circ", r"90", True, "unit"),
    (r"10\%", r"10", True, "unit"),
    (r"\$5", r"5", True, "unit"),
    (r"12 \text{ inches}", r"12", True, "unit"),
    (r"5\text{ cm}", r"6", False, "unit"),
    (r"45^\circ", r"90", False, "unit"),
    (r"3\text{ hours}", r"3", True, "unit"),
    (r"\$18.90", r"18.90", True, "unit"),
    (r"\emptyset", r"\varnothing", True, "empty set"),
    (r"\varnothing", r"\emptyset", True, "empty set"),
    (r"\emptyset", r"0", False, "empty set"),
    (r"\emptyset", r"\{0\}", False, "empty set"),
    (r"(1,2)", r"(2,1)", False, "order"),
    (r"(3, -1)", r"(-1, 3)", False, "order"),
    (r"1, 2", r"2, 1", True, "order"),
    (r"12", r"21", False, "order"),
    (r"(1, 2, 3)", r"(1, 3, 2)", False, "order"),
    (r"-3, 2", r"2, -3", True, "order"),
    (r"(1, 23)", r"(12, 3)", False, "spacing"),
    (r"1,23", r"12,3", False, "spacing"),
    (r"x^2+1", r"1+x^2", True, "expression"),
    (r"\sqrt{8}", r"2\sqrt2", True, "expression"),
    (r"\frac{\sqrt3}{2}", r"\frac{\sqrt2}{2}", False, "expression"),
    (r"6 - 5i", r"-5i+6", True, "expression"),
    (r"2x+3", r"3+2x", True, "expression"),
    (r"2x+3", r"3x+2", False, "expression"),
    (r"(x+1)^2", r"x^2+2x+1", True, "expression"),
    (r"\frac{\pi}{2}", r"\frac{\pi}{3}", False, "expression"),
    (r"\sqrt{2}/2", r"\frac{1}{\sqrt2}", True, "expression"),
    (r"\text{Evelyn}", r"Evelyn", True, "text"),
    (r"\text{(C)}", r"C", True, "text"),
    (r"\text{(C)}", r"D", False, "text"),
    (r"3", r"3.0", True, "number"),
    (r"\frac12", r"0.5", True, "number"),
    (r"1,000", r"1000", True, "number"),
    (r"1000", r"1001", False, "number"),
    (r"-7", r"7", False, "number"),
    (r"x=3", r"3", True, "number"),
    (r"0.25", r"\frac{1}{4}", True, "number"),
    (r"2.5", r"\frac{5}{2}", True, "number"),
    (r"2.5", r"2.4", False, "number"),
]


def spaced(a: str) -> str:
    """Spaces after commas and around +, = (LaTeX ignores them in math mode); a thousands
    separator ``10,\\!080`` is left alone (a space there would read as a list)."""
    return re.sub(r"\s*([+=])\s*", r" \1 ", re.sub(r",(?!\\!)(?!\d{3}(?!\d))\s*", ", ", a)).strip()


def rewrites(a: str, rng: random.Random) -> list[tuple[str, str]]:
    """(rewriting, how) pairs that keep the value of answer ``a``."""
    out = [(rf"\boxed{{{a}}}", "boxed"), (f"${a}$", "dollars")]
    if spaced(a) != a:
        out.append((spaced(a), "spacing"))
    if r"\frac" in a and r"\dfrac" not in a:
        out.append((a.replace(r"\frac", r"\dfrac"), "dfrac"))
    m = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", a)
    if m:
        out.append((f"{m.group(1)}{m.group(2)}/{m.group(3)}", "slash"))
    if re.fullmatch(r"-?\d+", a):
        out.append((f"{a}.0", "decimal point"))
    if r"\left" in a:
        out.append((re.sub(r"\\(left|right)(?![A-Za-z])", "", a), "no left/right"))
    squeezed = re.sub(r"(\\[A-Za-z]+) +| +", lambda m: m.group(1) + " " if m.group(1) else "", a)
    if squeezed != a:  # the space that ends a control word (\cot x) stays
        out.append((squeezed, "no spaces"))
    return out


def changes(a: str) -> list[tuple[str, str]]:
    """(changed, how) pairs that change the value of answer ``a``."""
    out = []
    if re.fullmatch(r"-?\d+", a):
        out.append((str(int(a) + 1), "n + 1"))
    m = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", a)
    if m and m.group(2) != m.group(3) and int(m.group(2)) > 0:
        out.append((rf"{m.group(1)}\frac{{{m.group(3)}}}{{{m.group(2)}}}", "upside down"))
    m = re.fullmatch(r"\\left\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\\right\)|\((-?\d+),\s*(-?\d+)\)", a)
    if m:
        x, y = [g for g in m.groups() if g is not None]
        if x != y:
            out.append((f"({y}, {x})", "pair swapped"))
    return out


def build(math500: Path, per_kind: int = 30, seed: int = 0) -> list[dict]:
    """Up to ``per_kind`` seeded pairs of each rewriting and change, plus HAND."""
    rng = random.Random(seed)
    answers = list(dict.fromkeys(r["answer"] for r in json.loads(math500.read_text())))  # each once
    kinds: dict = {}
    for a in answers:
        for w, how in rewrites(a, rng):
            kinds.setdefault((how, True), []).append((w, a))
        for w, how in changes(a):
            kinds.setdefault((how, False), []).append((w, a))
    rows = []
    for (how, equal), pairs in sorted(kinds.items()):
        for w, a in rng.sample(pairs, min(per_kind, len(pairs))):
            rows.append(dict(answer=w, reference=a, equal=equal, family=f"MATH500 {how}"))
    rows += [dict(answer=a, reference=r, equal=e, family=f) for a, r, e, f in HAND]
    return rows


if __name__ == "__main__":
    rows = build(Path(sys.argv[1]))
    out = Path(__file__).with_name("math_corpus.jsonl")
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {out}: {len(rows)} pairs ({sum(r['equal'] for r in rows)} equal)")
