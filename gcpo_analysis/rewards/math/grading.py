"""Math answer equivalence: the rule of the math reward and the math judge (paper Table
"Per-task reward definitions"; docs/conventions.md "Rewards").

The equivalence engine is Hugging Face's ``math-verify`` (sets, intervals, matrices, units,
binomials, factorials, logs, LaTeX normalisation), run in the worker process under a hard time
limit, behind our static guards (``_text_guard``). Our own rules stay only where it is silent
or wrong, and say so: numbers (integers, decimals, fractions of integers) are compared here
without the worker; repeating decimals (``0.\\overline{36}``, which it reads as 0) and
``\\varnothing`` (a variable to it) are rewritten first; where it extracts nothing, or reads
letters as variables ("10 dollars", ``oo``, ``e^{i\\pi}``), the older chain decides: the
string clean-up of the MATH evaluation (Hendrycks et al. 2021, ``is_equiv``) and Minerva's
``normalize_final_answer`` (Lewkowycz et al. 2022), tuples, and sympy in the same worker; never
for matrices, whose row breaks that clean-up deletes. Accuracy on tests/data/math_corpus.jsonl
(370 pairs with known verdicts): 331/370 before math-verify, 370/370 with it.

Model answers are untrusted. An answer reaches sympy only as plain-arithmetic code
(``math_syntax``) that passed the static guards (length, nesting depth, token count, literal
exponents), and sympy runs only in the worker (``sympy_worker``), which sizes the expression
tree before it evaluates anything (``sympy_check.over_cost_guard``) and is killed when a
comparison exceeds the time budget. A pair over any guard is compared as strings and the
fallback is counted by reason (``math_fallbacks``).
"""

from __future__ import annotations

import functools
import re
import threading
import time
import warnings
from collections import Counter, OrderedDict
from fractions import Fraction

from . import sympy_worker
from .normalize import normalize_math_answer
from .syntax import (
    MAX_FACTORIAL,
    MAX_MATH_CHARS,
    MAX_VERIFY_CHARS,
    MAX_VERIFY_DEPTH,
    latex_to_code,
    prepare_answer,
    static_guard,
)

MATH_TIME_BUDGET_S = 1.0  # sympy time of one answer against all its references (bound: 2 s in all)
FALLBACK_REASONS = ("length", "depth", "cost", "memory", "time", "worker")
_FALLBACKS: Counter = Counter()  # comparisons decided as strings since the last reset, by reason


def math_fallbacks(reset: bool = False) -> dict[str, int]:
    """How many math comparisons were decided by string equality because an answer was over a
    guard, by reason, counted per compared pair of answers since the last reset:

    * "length": a normalised answer longer than MAX_MATH_CHARS;
    * "depth": brackets nested deeper than MAX_VERIFY_DEPTH (math-verify) or MAX_DEPTH (sympy);
    * "cost": the size guards (tokens, expression nodes, exponents, number size, root and
      expansion size; ``static_guard``, ``sympy_check.over_cost_guard``);
    * "memory": the worker ran out of its address-space limit;
    * "time": sympy exceeded the time budget (MATH_TIME_BUDGET_S per answer) and was killed;
    * "worker": no sympy worker could run (a warning says why).

    Callers that score many answers (``score_groups``, the study, the trainer) record it in
    their output's metadata."""
    out = dict(_FALLBACKS)
    if reset:
        _FALLBACKS.clear()
    return out


# ----------------------------------------------------------------------------- equivalence
def math_equiv(a, b) -> bool:
    """True if two final answers are mathematically the same (paper Table "Per-task reward
    definitions": "extracted answer matches").

    ``normalize_math_answer`` string equality; else tuples/intervals/lists are compared
    element-wise (bracket types must agree when both have them, so ``(1,2)`` ≠ ``[1,2)``; bare
    comma lists such as "2, -3" may match in any order; nesting up to 3 levels); numbers
    (integers, decimals, ``\\frac`` of integers) here: integers and fractions exactly, decimals
    within relative 1e-6; anything else by sympy in the worker (``sympy_check.equal``: numbers
    the same way, expressions with symbols by random points, then ``expand``/``simplify``).
    Pairs over a guard are compared as strings and counted in ``math_fallbacks()`` (reasons
    there); an answer that is not plain arithmetic (``math_syntax.latex_to_code``) is compared
    as a string, uncounted. All sympy work for one call shares MATH_TIME_BUDGET_S. Never
    raises, never evaluates code, returns within the budget plus a few ms (the first sympy
    comparison of a process also waits for the worker to start, ~1 s)."""
    return math_equiv_any(a, [b])


def math_equiv_any(answer, references) -> bool:
    """True if ``answer`` is ``math_equiv`` to one of ``references``, with one time budget for
    all of them; fallbacks are counted per compared pair."""
    if answer is None:
        return False
    deadline = time.monotonic() + MATH_TIME_BUDGET_S
    a = prepare_answer(answer)
    for ref in references:
        b = prepare_answer(ref) if ref is not None else ""
        if not a or not b:
            continue
        guards: set = set()
        equal = _pair_equiv(a, b, guards, deadline)
        _FALLBACKS.update(guards)
        if equal:
            return True
    return False


# ----------------------------------------------------------------------------- math-verify first
_MATRIX = re.compile(r"\\begin|\\\\|&")  # a matrix or an environment: math-verify's verdict stands
_FACTORIAL = re.compile(r"(\d{1,9})\s*!")


def _text_guard(s: str) -> str | None:
    """The static guards on an answer text before any parser sees it: "length" over
    MAX_VERIFY_CHARS, "depth" for brackets nested deeper than MAX_VERIFY_DEPTH, and the guards of the
    plain-arithmetic form when it has one (token count, literal exponents)."""
    if len(s) > MAX_VERIFY_CHARS:
        return "length"
    depth = peak = 0
    for ch in s:
        depth += (ch in "([{") - (ch in ")]}")
        peak = max(peak, depth)
    if peak > MAX_VERIFY_DEPTH:
        return "depth"
    if any(int(m.group(1)) > MAX_FACTORIAL for m in _FACTORIAL.finditer(s)):
        return "cost"
    code = latex_to_code(normalize_math_answer(s))
    return static_guard(code) if code is not None else None


def _pair_equiv(a: str, b: str, guards: set, deadline: float) -> bool:
    """Numbers (integers, decimals, fractions of integers) exactly, here, without a worker;
    else math-verify's verdict on (answer a, reference b) in the worker, behind the static guards
    (over a guard: unequal, counted). Where math-verify is silent, or says unequal because it
    reads letters as variables (unit words as in "10 dollars", sympy's ``oo``, ``e`` in
    ``e^{i\\pi}``), our own comparison decides (``_equiv_normalized``: the MATH/Minerva clean-up,
    tuples, sympy); not for matrices, whose row breaks that clean-up deletes (12 \\\\ 3 -> 123)."""
    if a == b:
        return True
    na, nb = normalize_math_answer(a), normalize_math_answer(b)
    if na == nb and not _MATRIX.search(a + b):
        return True
    guard = "length" if max(len(na), len(nb)) > MAX_MATH_CHARS else None
    if guard is None and _number(na) is not None and _number(nb) is not None:
        return _scalar_equiv(na, nb, deadline)[0]
    guard = guard or _text_guard(a) or _text_guard(b)
    if guard:
        guards.add(guard)
        return False
    verdict, reason = _verify(a, b, deadline)
    if reason:
        guards.add(reason)
        return False
    if verdict or (verdict is False and _MATRIX.search(a + b)):
        return verdict
    return _equiv_normalized(na, nb, 0, guards, deadline)


@functools.cache
def math_verify_missing() -> bool:
    """Whether math-verify, a declared dependency, is missing: said once in a warning (the
    comparisons then fall to our own clean-up and sympy, which judge fewer forms equal)."""
    import importlib.util

    if importlib.util.find_spec("math_verify") is not None:
        return False
    warnings.warn(
        "math grader: math-verify is not installed (a gcpo dependency; pip install math-verify): "
        "answers go to gcpo's own clean-up and sympy only, which judge fewer forms equal "
        "(sets, intervals, some LaTeX)",
        RuntimeWarning,
        stacklevel=2,
    )
    return True


def _verify(a: str, b: str, deadline: float) -> tuple[bool | None, str | None]:
    """(verdict or None when math-verify is silent, guard reason) from the worker, cached."""
    if math_verify_missing():
        return None, None
    cached = _PAIRS.get(("verify", a, b))
    if cached is not None:
        return cached
    left = deadline - time.monotonic()
    if left <= 0:
        return None, "time"
    try:
        reply = sympy_worker.WORKER.call(["verify", b, a], timeout=left)
    except sympy_worker.WorkerTimeout:
        result = (None, "time")
        if left >= MATH_TIME_BUDGET_S / 2:
            _PAIRS.put(("verify", a, b), result)
        return result
    except sympy_worker.WorkerUnavailable as err:
        return None, _no_worker(err)[1]
    if not (
        isinstance(reply, list)
        and len(reply) == 2
        and reply[0] in (True, False, None)
        and reply[1] in (None, "cost", "memory")
    ):
        return None, _no_worker(f"malformed reply {reply!r:.80}")[1]
    result = (reply[0], reply[1])
    _PAIRS.put(("verify", a, b), result)
    return result


def _split_top(s: str) -> tuple[str, list[str], str]:
    """(open, elements, close): top-level comma split, with an enclosing bracket pair if any."""
    opening, closing = "", ""
    if len(s) >= 2 and s[0] in "([{" and s[-1] in ")]}":
        depth = 0
        for k, ch in enumerate(s):
            depth += ch in "([{"
            depth -= ch in ")]}"
            if depth == 0 and k < len(s) - 1:
                break
        else:
            opening, closing, s = s[0], s[-1], s[1:-1]
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return opening, parts, closing


def _equiv_normalized(na: str, nb: str, depth: int, guards: set, deadline: float) -> bool:
    if na == nb:
        return True
    if len(na) > MAX_MATH_CHARS or len(nb) > MAX_MATH_CHARS:
        guards.add("length")  # also bounds the tuple split below
        return False
    (oa, pa, ca), (ob, pb, cb) = _split_top(na), _split_top(nb)
    if depth < 3 and (len(pa) > 1 or len(pb) > 1):
        if len(pa) != len(pb) or len(pa) > 20:
            return False
        if oa and ob and (oa, ca) != (ob, cb):
            return False
        same = lambda x, y: _equiv_normalized(x, y, depth + 1, guards, deadline)  # noqa: E731 - nested tuples
        if all(same(x, y) for x, y in zip(pa, pb)):
            return True
        if oa or ob:
            return False
        remaining = list(pb)  # bare lists ("all solutions, separated by commas") are unordered
        for x in pa:
            hit = next((j for j, y in enumerate(remaining) if same(x, y)), None)
            if hit is None:
                return False
            remaining.pop(hit)
        return True
    equal, guard = _scalar_equiv(na, nb, deadline)
    if guard:
        guards.add(guard)
    return equal


_INTEGER = re.compile(r"-?\d+")
_DECIMAL = re.compile(r"-?\d+\.\d+")
_FRACTION = re.compile(r"(-?)\\frac\{(-?\d+)\}\{(-?\d*[1-9]\d*)\}")
# scientific notation and powers of ten: 1e-7, 2.5E3, 2.5\times10^{3}, 10^{-7}, 3\cdot10^5
_SCIENTIFIC = re.compile(r"(-?\d+(?:\.\d+)?)[eE]([+-]?\d+)")
_POWER_OF_TEN = re.compile(r"(?:(-?\d+(?:\.\d+)?)(?:\\times|\\cdot|\*))?10\^(?:\{([+-]?\d+)\}|([+-]?\d))")
MAX_EXPONENT = 400  # |k| of 10^k read exactly (a Fraction of 10^400 is cheap; 10^(10^9) is not)
# Two numbers, either written as a decimal (or in scientific notation), are equal when
# |a - b| <= MATH_REL_TOL * max(|a|, |b|): a relative tolerance, the same at every scale (so 1e-7
# and 0 differ, and 0.000001 and 0.0000011, 10% apart, differ); integers and fractions are exact.
MATH_REL_TOL = Fraction(1, 10**6)


def _number(s: str) -> tuple[Fraction, bool] | None:
    """(value, is_decimal) of an integer, a decimal, a number in scientific notation or times a
    power of ten, or a ``\\frac`` of integers (non-zero denominator), else None: the answers that
    need no sympy. Scientific notation counts as a decimal (it is one, rounded)."""
    if _INTEGER.fullmatch(s):
        return Fraction(int(s)), False
    if _DECIMAL.fullmatch(s):
        return Fraction(s), True
    m = _SCIENTIFIC.fullmatch(s) or _POWER_OF_TEN.fullmatch(s)
    if m:
        exponent = int(m.group(2) if m.group(2) is not None else m.group(3))
        if abs(exponent) > MAX_EXPONENT:
            return None
        return Fraction(m.group(1) or 1) * Fraction(10) ** exponent, True
    m = _FRACTION.fullmatch(s)
    if m:
        return Fraction(int(m.group(2)), int(m.group(3))) * (-1 if m.group(1) else 1), False
    return None


class _Cache:
    """A small thread-safe LRU map of answer pairs to (equal, reason)."""

    def __init__(self, size: int = 4096):
        self.size, self._lock = size, threading.Lock()
        self._data: OrderedDict[tuple[str, str], tuple[bool, str | None]] = OrderedDict()

    def get(self, key):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        return None

    def put(self, key, value) -> None:
        with self._lock:
            self._data[key] = value
            if len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_PAIRS = _Cache()  # a group's G completions share a reference; repeated pairs are common


def _scalar_equiv(na: str, nb: str, deadline: float) -> tuple[bool, str | None]:
    """(equal, reason) for two normalised scalar answers; reason names the guard that sent the
    pair to string equality. A pair the worker could not run is not cached (it may run later)."""
    if na == nb:
        return True, None
    if len(na) > MAX_MATH_CHARS or len(nb) > MAX_MATH_CHARS:
        return False, "length"
    cached = _PAIRS.get((na, nb))
    if cached is not None:
        return cached
    xa, xb = _number(na), _number(nb)
    if xa is not None and xb is not None:
        (va, dec_a), (vb, dec_b) = xa, xb
        same = va == vb if not (dec_a or dec_b) else abs(va - vb) <= MATH_REL_TOL * max(abs(va), abs(vb))
        result: tuple[bool, str | None] = (bool(same), None)
        keep = True
    else:
        result, keep = _sympy_equiv(na, nb, deadline)
    if keep:
        _PAIRS.put((na, nb), result)
    return result


def _sympy_equiv(na: str, nb: str, deadline: float) -> tuple[tuple[bool, str | None], bool]:
    """((equal, reason), cacheable): the pair through the syntax check, the static guard and
    the worker. Not cacheable: no worker, or a timeout with less than half the budget left
    (the same pair may finish given its full time)."""
    code_a, code_b = latex_to_code(na), latex_to_code(nb)
    if code_a is None or code_b is None:
        return (False, None), True
    reason = static_guard(code_a) or static_guard(code_b)
    if reason:
        return (False, reason), True
    left = deadline - time.monotonic()
    if left <= 0:
        return (False, "time"), False
    try:
        reply = sympy_worker.WORKER.call(["equiv", code_a, code_b], timeout=left)
    except sympy_worker.WorkerTimeout:
        return (False, "time"), left >= MATH_TIME_BUDGET_S / 2
    except sympy_worker.WorkerUnavailable as err:
        return _no_worker(err), False
    if not (
        isinstance(reply, list)
        and len(reply) == 2
        and isinstance(reply[0], bool)
        and reply[1] in (None, "cost", "memory")
    ):
        return _no_worker(f"malformed reply {reply!r:.80}"), False
    return (reply[0], reply[1]), True


def _no_worker(why) -> tuple[bool, str]:
    warnings.warn(
        f"math grader: no sympy comparison ({why}); the answers are compared as strings, "
        f"counted as 'worker' in math_fallbacks()",
        RuntimeWarning,
        stacklevel=4,
    )
    return False, "worker"


def clear_caches() -> None:
    """Forget cached comparisons, here and in the worker if one runs (cold-cache benchmarks)."""
    _PAIRS.clear()
    if sympy_worker.WORKER.pid() is not None:
        try:
            sympy_worker.WORKER.call(["clear"], timeout=10.0)
        except (sympy_worker.WorkerTimeout, sympy_worker.WorkerUnavailable):
            pass
