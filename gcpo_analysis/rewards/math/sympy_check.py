"""The sympy half of the math grader: what the grading worker process runs (docs/conventions.md
"Rewards"). Parse checked code, size the expression tree, compare two answers.

Imported by the worker (``gcpo_analysis.rewards.math.sympy_worker``), which runs every call under a hard
time limit; the grader's own process never imports it, so neither sympy's import time nor a
sympy computation that does not end can reach the caller. The tree guard below still keeps
the worker's time for real comparisons: it refuses, before anything evaluates, what is known
to take unbounded time (towers, huge exponents, expansions, roots of huge numbers).
"""

from __future__ import annotations

import functools
import math
import random
import string
import warnings

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from .syntax import (
    MAX_BITS,
    MAX_EXPANDED_TERMS,
    MAX_EXPONENT,
    MAX_NODES,
    MAX_ROOT_BITS,
    MAX_SYMBOLIC_EXPONENT,
    plain_arithmetic,
)

# Every letter is a plain Symbol (sympy's namespace would read N, S, O, Q as functions), except
# e and i, the constants they are in MATH answers.
_LOCAL = {ch: sympy.Symbol(ch) for ch in string.ascii_letters}
_LOCAL.update({"pi": sympy.pi, "oo": sympy.oo, "e": sympy.E, "i": sympy.I, "ln": sympy.log})
_TRANSFORMATIONS = standard_transformations + (implicit_multiplication_application, convert_xor)
REASONS = ("cost", "memory")  # what ``handle`` may name besides None


@functools.lru_cache(maxsize=4096)  # a group's G completions share one reference; repeats are common
def parse(code: str):
    """(expression, None) for plain-arithmetic code that passes the tree guard; (None, "cost")
    over the guard; (None, None) for code that is not plain arithmetic or does not parse."""
    if plain_arithmetic(code) is None:  # checked by the caller too; eval never sees anything else
        return None, None
    try:
        expr = parse_expr(code.strip(), local_dict=dict(_LOCAL), evaluate=False, transformations=_TRANSFORMATIONS)
    except MemoryError:
        return None, "memory"
    except Exception:  # any syntax/type error means "not a parseable expression"
        return None, None
    if not isinstance(expr, sympy.Expr):
        return None, None
    return (None, "cost") if over_cost_guard(expr) else (expr, None)


@functools.lru_cache(maxsize=8192)
def _log2_size(expr) -> float:
    """An upper estimate of log2 |value| of a numeric sympy tree (symbols count as 7 bits, the
    size of the random points they are evaluated at), computed in floats: 9999^9999^9999 is
    sized without ever being built. inf when the estimate itself overflows."""
    if expr.is_Integer or expr.is_Rational:
        return float(max(abs(expr.p).bit_length(), abs(expr.q).bit_length()))
    if expr.is_Float:
        return float(abs(expr._mpf_[2]) + expr._mpf_[3]) if expr._mpf_[1] else 0.0
    if expr.is_Symbol or expr.is_NumberSymbol or expr is sympy.I or not expr.args:
        return 7.0
    sizes = [_log2_size(a) for a in expr.args]
    if expr.is_Pow:
        base, exp = sizes
        if exp > 60:
            return math.inf
        if not expr.exp.free_symbols:  # small enough to evaluate in floats: use its real size
            return max(base, 1.0) * _exponent(expr)[0]
        return max(base, 1.0) * 2.0**exp
    if expr.is_Mul:
        return sum(sizes)
    return max(sizes) + math.log2(len(sizes))  # Add, functions (sqrt, sin, log, ...)


@functools.lru_cache(maxsize=8192)
def _exponent(power) -> tuple[float, bool]:
    """(|n|, n is an integer) for the exponent n of a power without symbols in it, evaluated
    in 15-digit floats whatever its form (``1/(3)`` and ``2*32`` parse unevaluated); (inf,
    False) when n is over 2^60 or not a finite number."""
    n = power.exp
    if n.is_Integer or n.is_Rational:
        return (abs(float(n)) if abs(n) < 2**60 else math.inf), bool(n.is_Integer)
    if _log2_size(n) > 60:
        return math.inf, False
    value = complex(sympy.N(n, 15))
    if not (math.isfinite(value.real) and math.isfinite(value.imag)):
        return math.inf, False
    return abs(value), value.imag == 0 and value.real == round(value.real)


def over_cost_guard(expr) -> bool:
    """True if evaluating ``expr`` could take unbounded time: more than MAX_NODES nodes; a
    numeric size over 2^MAX_BITS (towers such as (9999^9999)^9999, which a per-power exponent
    check misses); an exponent (of any form without symbols: ``2^{2*5000}`` too) over
    MAX_EXPONENT, or over MAX_SYMBOLIC_EXPONENT on a base with symbols; a root (a non-integer
    exponent) of a number over 2^MAX_ROOT_BITS (sympy factors the radicand: √(2^7000 + 1)
    takes seconds). Checked before anything evaluates the expression."""
    nodes = 0
    for _ in sympy.preorder_traversal(expr):
        nodes += 1
        if nodes > MAX_NODES:
            return True
    try:
        if not _log2_size(expr) <= MAX_BITS:
            return True
        for node in sympy.preorder_traversal(expr):
            if node.is_Pow and not node.exp.free_symbols:
                n, integer = _exponent(node)
                symbolic = bool(node.base.free_symbols)
                if n > (MAX_SYMBOLIC_EXPONENT if symbolic else MAX_EXPONENT):
                    return True
                if not integer and not symbolic and not _log2_size(node.base) <= MAX_ROOT_BITS:
                    return True
        return False
    except (OverflowError, ValueError, TypeError, AttributeError):
        return True


def _expanded_terms(expr) -> int:
    """An upper bound on the number of terms of ``expand(expr)`` for the parts with symbols,
    capped at MAX_EXPANDED_TERMS + 1: a sum adds, a product multiplies, (t_1 + ... + t_k)^n
    has C(n + k - 1, k - 1) terms (the multinomial count; a negative n expands the denominator
    alike). Numeric parts count 1. The cap keeps nested powers from building huge counts."""
    cap = MAX_EXPANDED_TERMS + 1
    if not expr.free_symbols:
        return 1
    if expr.is_Add:
        return min(cap, sum(_expanded_terms(a) for a in expr.args))
    if expr.is_Mul:
        count = 1
        for a in expr.args:
            count = min(cap, count * _expanded_terms(a))
        return count
    if expr.is_Pow and not expr.exp.free_symbols:
        n, integer = _exponent(expr)  # n <= MAX_SYMBOLIC_EXPONENT: the guard came first
        if integer:
            return min(cap, math.comb(int(n) + _expanded_terms(expr.base) - 1, int(n)))
    return 1


def equal(ea, eb) -> tuple[bool, str | None]:
    """(equal, reason) for two parsed answers that passed the guard. Numbers: exact rationals
    (integers, fractions) equal exactly, other numbers within relative 1e-6 (±oo compared as
    themselves). With symbols: equal if the evaluated forms are identical ((c+b+a)^64 and
    (a+b+c)^64 are); unequal if a - b ≠ 0 at one of 3 seeded random rational points; else
    equal if ``expand(a - b) == 0`` or ``simplify(a - b) == 0`` (simplify skipped above 60
    operations). An expansion of more than MAX_EXPANDED_TERMS terms is not done: (False,
    "cost"). Any sympy error gives (False, None)."""
    try:
        diff = ea - eb
        if diff == 0:
            return True, None
        xa, xb = ea.doit(), eb.doit()
        if not (ea.free_symbols or eb.free_symbols):
            if xa.is_Rational and xb.is_Rational:  # integers/fractions: exact, 10^6 ≠ 10^6 - 1
                return bool(xa == xb), None
            va, vb = complex(sympy.N(xa)), complex(sympy.N(xb))
            if not all(map(math.isfinite, (va.real, va.imag, vb.real, vb.imag))):
                return va == vb, None  # ±oo: a - b is nan, compare the infinities themselves
            return abs(va - vb) <= 1e-6 * max(1.0, abs(va), abs(vb)), None
        if xa == xb:
            return True, None
        # Cheap rejection first: unequal expressions almost always differ at a random point.
        rng = random.Random(0)
        symbols = sorted(ea.free_symbols | eb.free_symbols, key=str)
        for _ in range(3):
            point = {x: sympy.Rational(rng.randint(1, 97), rng.randint(1, 13)) for x in symbols}
            try:  # a pole or a non-numeric value at this point says nothing; try another
                value, scale = complex(diff.evalf(subs=point)), abs(complex(ea.evalf(subs=point)))
            except (TypeError, ValueError, ZeroDivisionError):
                continue
            if math.isfinite(abs(value)) and math.isfinite(scale) and abs(value) > 1e-9 * max(1.0, scale):
                return False, None
        if _expanded_terms(ea) + _expanded_terms(eb) > MAX_EXPANDED_TERMS:
            return False, "cost"
        if sympy.expand(diff) == 0:
            return True, None
        if sympy.count_ops(diff) > 60:  # simplify can take minutes on big expressions
            return False, None
        return bool(sympy.simplify(diff) == 0), None
    except MemoryError:
        return False, "memory"
    except Exception:  # sympy raises many types on exotic input; unequal is the safe answer
        return False, None


def compare(code_a: str, code_b: str) -> tuple[bool, str | None]:
    """(equal, reason): reason names the guard ("cost", "memory") that kept the pair from
    sympy's comparison, else None."""
    (ea, ra), (eb, rb) = parse(code_a), parse(code_b)
    if ea is None or eb is None:
        return False, ra or rb
    return equal(ea, eb)


def _math_verify():
    """math-verify's parse and verify, or None when it is not installed; its log lines about the
    timeouts it leaves to us are silenced (this process is the time limit)."""
    try:
        from math_verify import parse as mv_parse
        from math_verify import verify as mv_verify
    except ImportError:
        return None
    import logging

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    return mv_parse, mv_verify


def _as_latex(text: str) -> str:
    """An answer as math-verify's LaTeX extraction reads it: inside $...$ unless it is delimited."""
    return text if ("$" in text or "\\boxed" in text or "\\[" in text) else f"${text}$"


_COMBINATORIAL = (sympy.factorial, sympy.factorial2, sympy.subfactorial, sympy.binomial, sympy.gamma)


def _huge_combinatorics(value) -> bool:
    """A factorial, binomial or gamma of a number over 2^14 (999999! has 5.5 million digits):
    math-verify would evaluate it."""
    try:
        return any(
            isinstance(node, _COMBINATORIAL) and any(_log2_size(x) > 14 for x in node.args)
            for node in sympy.preorder_traversal(value)
        )
    except (OverflowError, ValueError, TypeError, AttributeError):
        return True


def verify(gold: str, answer: str) -> tuple[bool | None, str | None]:
    """(equal, reason) of two answer texts by math-verify (Hugging Face's ``math_verify``: sets,
    intervals, matrices, units, LaTeX normalisation); (None, None) when it is silent (not
    installed, or it extracts no value from one side), so the caller's own comparison decides.
    The parsed values pass ``over_cost_guard`` before ``verify`` evaluates them: (False, "cost")."""
    engine = _math_verify()
    if engine is None:
        return None, None
    mv_parse, mv_verify = engine
    try:
        g = mv_parse(_as_latex(gold), parsing_timeout=None)
        a = mv_parse(_as_latex(answer), parsing_timeout=None)
    except MemoryError:
        return False, "memory"
    except Exception:
        return None, None
    if not g or not a:
        return None, None
    for value in (g[0], a[0]):
        if isinstance(value, sympy.Basic) and (over_cost_guard(value) or _huge_combinatorics(value)):
            return False, "cost"
    try:
        return bool(mv_verify(g, a, timeout_seconds=None)), None
    except MemoryError:
        return False, "memory"
    except Exception:
        return None, None


def warm() -> None:
    """Import-time work done once, before the worker forks its comparers: sympy's parser and
    evaluator caches (the first parse takes ~50 ms), math-verify's import and grammar (~2 s)."""
    compare("((1)/(2))", "x**2 + sqrt(8)")
    verify("\\frac{1}{2}", "\\{1, 2\\} \\cup [0, 1]")


def handle(request):
    """The worker's entry point, on JSON values: ``["equiv", code_a, code_b]`` → ``[equal,
    reason]``; ``["verify", gold, answer]`` → ``[equal or null, reason]`` (math-verify on the
    texts; null: it is silent); ``["clear"]`` empties the parse cache → ``null``. sympy's warnings on odd input
    (deprecations) are silenced: the verdict is the answer, the caller's stderr is not a log."""
    if request == ["clear"]:
        parse.cache_clear()
        return None
    op, code_a, code_b = request
    if op not in ("equiv", "verify") or not isinstance(code_a, str) or not isinstance(code_b, str):
        raise ValueError(f"unknown request {request!r:.80}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list((compare if op == "equiv" else verify)(code_a, code_b))
