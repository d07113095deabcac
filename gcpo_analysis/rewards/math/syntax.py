"""A normalised LaTeX answer as sympy-syntax code, the check that such code is plain arithmetic,
and the static guard on its size (docs/conventions.md "Rewards").

Pure string work, no sympy: the grader runs it on every answer before anything reaches the
sympy worker (``gcpo_analysis.rewards.math.sympy_worker``), and the worker runs ``plain_arithmetic`` again
before ``parse_expr`` (which calls ``eval``) sees a string. Plain arithmetic means: decimal
numbers without exponents, single letters, the function names of ``FUNCS``, ``+ - * / **``
and parentheses. Nothing else gets through, so no attribute access (``pi.n(10**8)``), no float
literal that sympy would make exact (``1e999999999``), no string, call of an arbitrary name, or
keyword.
"""

from __future__ import annotations

import io
import re
import tokenize
from fractions import Fraction

from ..extraction import extract_boxed, matching_braces

# The guards: an answer over one is compared as a string, and the fallback is counted by the
# reason named in brackets (``math_grading.math_fallbacks``).
MAX_MATH_CHARS = 200  # [length] longer normalised answers: run time of everything below
MAX_DEPTH = 24  # [depth] parentheses nested deeper (recursion in sympy and in the guard)
MAX_NODES = 300  # [cost] more tokens here, or more expression-tree nodes in the worker
MAX_EXPONENT = 10_000  # [cost] larger numeric exponents (an exact 9^9^9 never ends)
MAX_BITS = 65_536  # [cost] numbers whose estimated size exceeds 2^MAX_BITS (towers included)
MAX_SYMBOLIC_EXPONENT = 64  # [cost] (x + 1)^n with larger n is not expanded
MAX_EXPANDED_TERMS = 500  # [cost] no expand() of more terms (~0.3 ms a term)
MAX_VERIFY_CHARS = 400  # [length] longer answer texts reach no parser (math-verify)
MAX_VERIFY_DEPTH = 12  # [depth] brackets nested deeper: math-verify's parser takes ~1 s at 23 levels
MAX_FACTORIAL = 1000  # [cost] n! of a larger literal n (math-verify evaluates factorials)
MAX_ROOT_BITS = 1_024  # [cost] roots of numbers over 2^MAX_ROOT_BITS (sympy factors the radicand)

FUNCS = frozenset({"sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "pi", "oo"})
_LATEX_TO_PY = [
    (r"\cdot", "*"),
    (r"\times", "*"),
    (r"\div", "/"),
    (r"\pi", " pi "),
    (r"\infty", " oo "),
    (r"\ln", " ln "),
    (r"\log", " log "),
    (r"\exp", " exp "),
    (r"\sin", " sin "),
    (r"\cos", " cos "),
    (r"\tan", " tan "),
    (r"\cot", " cot "),
    (r"\sec", " sec "),
    (r"\csc", " csc "),
]
# 1.5e-3 is scientific notation, as Python reads it; written as a power of ten so that the
# exponent meets the exponent guard instead of sympy building 10^999999999 inside a Float.
_SCIENTIFIC = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")
# "2x" -> "2 x", "x2" -> "x 2": no 0x1F, 1j or 0b1 literal, no multi-character name
_DIGIT_LETTER = re.compile(r"(?<=\d)(?=[A-Za-z])|(?<=[A-Za-z])(?=\d)")
_CHARS = re.compile(r"[0-9A-Za-z+\-*/(). ]*")
_NUMBER_TOKEN = re.compile(r"\d+(?:\.\d+)?")
_OPERATORS = frozenset({"+", "-", "*", "/", "**", "(", ")"})


def latex_to_code(s: str) -> str | None:
    """sympy-syntax code of a normalised answer (``\\frac``, ``\\sqrt[n]{}``, ``^{}``,
    ``\\cdot``, ``\\pi``, trig, logs; ``1.5e3`` as ``1.5*10**(3)``), or None when the answer is
    not plain arithmetic (``plain_arithmetic``): unknown commands, ``!``, quotes, dots outside
    numbers. Letter runs that are not function names become single-letter symbols ("xy" → "x y").
    Hand-written because ``sympy.parsing.latex`` needs antlr4 and evaluates while it parses."""
    braces = matching_braces(s)
    out, k = [], 0
    while k < len(s):
        for cmd, kind in (("\\frac", "frac"), ("\\sqrt", "sqrt")):
            if s.startswith(cmd, k):
                k += len(cmd)
                root = None
                if kind == "sqrt" and s.startswith("[", k):
                    close = s.find("]", k)
                    if close < 0:
                        return None
                    root, k = latex_to_code(s[k + 1 : close]), close + 1
                    if root is None:
                        return None
                groups = []
                for _ in range(2 if kind == "frac" else 1):
                    end = braces.get(k) if s.startswith("{", k) else None
                    inner = None if end is None else latex_to_code(s[k + 1 : end])
                    if inner is None:
                        return None
                    groups.append(inner)
                    assert end is not None  # inner is None when end is
                    k = end + 1
                if kind == "frac":
                    out.append(f"(({groups[0]})/({groups[1]}))")
                elif root is not None:
                    out.append(f"(({groups[0]})**(1/({root})))")
                else:
                    out.append(f"sqrt({groups[0]})")
                break
        else:
            out.append(s[k])
            k += 1
    text = "".join(out)
    for latex, py in _LATEX_TO_PY:
        text = text.replace(latex, py)
    text = text.replace("{", "(").replace("}", ")").replace("^", "**")
    text = _SCIENTIFIC.sub(r"(\1*10**(\2))", text)
    text = _DIGIT_LETTER.sub(" ", text)
    if not _CHARS.fullmatch(text):
        return None
    text = re.sub(r"[A-Za-z]+", lambda m: m.group(0) if m.group(0) in FUNCS else " ".join(m.group(0)), text)
    return text if plain_arithmetic(text) else None


def plain_arithmetic(code: str) -> list[str] | None:
    """The Python tokens of ``code`` if every one is a decimal number (no exponent, no ``j``,
    no base prefix), a single letter, a name in ``FUNCS`` or one of ``+ - * / ** ( )``; else
    None. What ``parse_expr`` may evaluate: arithmetic on symbols, never an attribute, index,
    keyword, string or call of anything outside ``FUNCS``."""
    if not isinstance(code, str) or not _CHARS.fullmatch(code) or not code.strip():
        return None
    tokens = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code.strip()).readline):
            kind, text = tok.type, tok.string
            if kind in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER):
                continue
            if not (
                (kind == tokenize.NUMBER and _NUMBER_TOKEN.fullmatch(text))
                or (kind == tokenize.NAME and (len(text) == 1 or text in FUNCS))
                or (kind == tokenize.OP and text in _OPERATORS)
            ):
                return None
            tokens.append(text)
    except (tokenize.TokenError, SyntaxError):
        return None
    return tokens


def static_guard(code: str) -> str | None:
    """The guard that needs no parse: "depth" if parentheses nest deeper than MAX_DEPTH,
    "cost" for more than MAX_NODES tokens or a literal exponent over MAX_EXPONENT
    (``2**(1000000)``); None when the code passes (the worker then checks the parsed tree).
    ``code`` is ``latex_to_code`` output."""
    tokens = plain_arithmetic(code) or []
    if len(tokens) > MAX_NODES:
        return "cost"
    depth = 0
    for k, tok in enumerate(tokens):
        depth += (tok == "(") - (tok == ")")
        if depth > MAX_DEPTH:
            return "depth"
        if _NUMBER_TOKEN.fullmatch(tok):
            j = k - 1
            while j >= 0 and tokens[j] in ("(", "-", "+"):
                j -= 1
            if j >= 0 and tokens[j] == "**" and float(tok) > MAX_EXPONENT:
                return "cost"
    return None


# ----------------------------------------------------------------------------- before math-verify
_REPEATING = re.compile(r"(-?)(\d*+)\.(\d*+)\\overline\{(\d++)\}")


def _repeating_to_fraction(m) -> str:
    """0.\\overline{36} -> \\frac{36}{99}; 1.2\\overline{3} -> \\frac{111}{90} (exact)."""
    sign, whole, fixed, period = m.groups()
    value = (
        Fraction(int(whole or 0))
        + (Fraction(int(fixed), 10 ** len(fixed)) if fixed else 0)
        + Fraction(int(period), (10 ** len(period) - 1) * 10 ** len(fixed))
    )
    return f"{sign}\\frac{{{value.numerator}}}{{{value.denominator}}}"


def prepare_answer(text) -> str:
    """The answer text math-verify compares: stripped, a leading ``\\boxed{}`` unwrapped, and our
    own rewriting only where math-verify is silent or wrong: ``\\varnothing`` is read as a
    symbol (so ``\\emptyset`` differs) and a repeating decimal ``0.\\overline{36}`` as 0."""
    s = "" if text is None else str(text).strip()
    boxed = extract_boxed(s)
    if boxed is not None and s.startswith(("\\boxed", "\\fbox", "$\\boxed")):
        s = boxed.strip()
    s = s.replace("\\varnothing", "\\emptyset")
    if "\\overline" in s and len(s) <= MAX_VERIFY_CHARS:  # the regex is quadratic on 64 KB of digits
        s = _REPEATING.sub(_repeating_to_fraction, s)
    return s
