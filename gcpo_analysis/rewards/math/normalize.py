"""The string clean-up of a final math answer before it is compared: the MATH evaluation's
``is_equiv`` clean-up (Hendrycks et al. 2021) and Minerva's ``normalize_final_answer``
(Lewkowycz et al. 2022), with unit words removed only as whole words (``grading`` uses it)."""

from __future__ import annotations

import re

from ..extraction import extract_boxed

# Unit words of Minerva's REMOVED_EXPRESSIONS, removed here only as whole words (Minerva's plain
# substring removal turns "\left" into "\le" via "ft"; we drop \left first and use \b).
_UNIT_WORDS = (
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "ft",
    "hours",
    "km",
    "units",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "days",
    "seconds",
)
_UNIT_RE = re.compile(r"(?<![\\A-Za-z])(?:{})(?![A-Za-z])".format("|".join(_UNIT_WORDS)))
_REMOVE_LITERAL = (
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\quad",
    "\\displaystyle",
    "\\ldots",
    "\\dots",
    "\\cdots",
    "{}^\\circ",
    "^{\\circ}",
    "^\\circ",
    "°",
    "\\degree",
    "\\%",
    "%",
    "\\$",
    "$",
    "{,}",
    '"',
    "\\mathrm{th}",
)
# "x =", "k=", "f(x) =", "a_1 =" prefixes: MATH drops an lhs of <= 2 characters; we also drop
# a single-letter function or subscripted variable (OlympiadBench answers "f(x)=2x").
_SHORT_LHS = re.compile(r".{0,2}|[A-Za-z]\s*\(\s*[A-Za-z]\s*\)|[A-Za-z]_\{?\w+\}?")
_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|overline|operatorname)\s*\{([^{}]*)\}")


def normalize_math_answer(s) -> str:
    """String normalisation of a final math answer, reimplementing the MATH ``strip_string``
    (Hendrycks et al. 2021) and Minerva ``normalize_final_answer`` (Lewkowycz et al. 2022):
    take a ``\\boxed{}`` body; drop ``\\left``/``\\right``, thin spaces ``\\! \\, \\;``,
    degrees ``^\\circ``, ``\\%``, ``\\$``/``$``, ``\\dots``; ``\\dfrac``/``\\tfrac``→``\\frac``;
    drop a trailing ``\\text{unit}`` and whole-word unit names (Minerva's list), unwrap
    ``\\text{X}``/``\\textbf{X}``/``\\overline{X}``; the articles "a"/"an" before a word; a short
    "x =" prefix (lhs ≤ 2 chars, as MATH, or "f(x) =", "a_1 ="); all spaces; ``\\frac12``→``\\frac{1}{2}``,
    ``\\sqrt2``→``\\sqrt{2}``; ``a/b`` of integers→``\\frac{a}{b}``; ``0.5``→``\\frac{1}{2}``;
    ``.5``→``0.5``; thousands separators ``1,000``→``1000``; a trailing ``.``."""
    s = "" if s is None else str(s).strip()
    boxed = extract_boxed(s)
    if boxed is not None and s.startswith(("\\boxed", "\\fbox", "$\\boxed")):
        s = boxed
    s = s.replace("\n", " ").replace("\\\\", "\\")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])", "", s)
    for lit in _REMOVE_LITERAL:
        s = s.replace(lit, "")
    s = s.replace("\\ ", " ").replace("mbox", "text")
    s = re.sub(r"(?<=\S)\s*\\text\{\s*[A-Za-z][A-Za-z\s]*\}(\^\d)?\s*$", "", s)  # trailing unit
    s = re.sub(r"(?<![\w\\])(?:an?)\s+(?=[A-Za-z]{2})", "", s)
    stripped = _UNIT_RE.sub("", s)
    if re.search(r"[0-9A-Za-z]", stripped):
        s = stripped
    for _ in range(3):
        s = _WRAPPERS.sub(r"\1", s)
    parts = s.split("=")
    if len(parts) == 2 and _SHORT_LHS.fullmatch(parts[0].strip()):
        s = parts[1]
    s = re.sub(r"\s+", "", s)
    arg = r"(\d|[A-Za-z]|\{[^{}]*\})"
    s = re.sub(r"\\frac" + arg + arg, lambda m: "\\frac" + "".join(_brace(g) for g in m.groups()), s)
    s = re.sub(r"\\sqrt(?![\[{])" + arg, lambda m: "\\sqrt" + _brace(m.group(1)), s)
    s = re.sub(r"^(-?)(\d+)/(\d+)$", r"\1\\frac{\2}{\3}", s)
    s = re.sub(r"(^|[^\d])\.(\d)", r"\g<1>0.\2", s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    s = s.rstrip(".")
    if s == "0.5":
        s = "\\frac{1}{2}"
    return s


def _brace(g: str) -> str:
    return g if g.startswith("{") else "{" + g + "}"
