"""Task rewards, answer extraction and evaluation metrics (paper Appendix E, Table
"Per-task reward definitions"; docs/conventions.md "Rewards").

Rewards live on [0, 2]:

* NarrativeQA, Qasper (task ``qa_f1``): r = 2 · max_ref token-F1(extracted answer, ref);
* HotpotQA (task ``hotpot``): r = 2 · F1 of the official HotpotQA evaluation (EM reported too);
* MATH500, AIME24, OlympiadBench (task ``math``): r = 2 if the extracted answer is equivalent to
  the reference, else 0.

Token-F1 / EM follow the SQuAD evaluation script (normalisation: lower-case, strip punctuation
and the articles a/an/the, collapse whitespace). BLEU is sacrebleu. Math equivalence
reimplements the string clean-up of the MATH evaluation (Hendrycks et al. 2021, ``is_equiv``)
and Minerva's ``normalize_final_answer`` (Lewkowycz et al. 2022), followed by a sympy check.

This module is longer than ~400 lines because the math grader (LaTeX clean-up, a safe
LaTeX→sympy converter, tuple/interval handling) belongs with the reward it defines; no
installed library does it (``sympy.parsing.latex`` needs the antlr4 runtime, used when present).
"""
from __future__ import annotations

import functools
import importlib.util
import math
import random
import re
import string
from collections import Counter
from typing import Sequence

TASK_OF_DATASET = {
    "narrativeqa": "qa_f1",
    "qasper": "qa_f1",
    "hotpotqa": "hotpot",
    "math500": "math",
    "aime24": "math",
    "olympiadbench": "math",
}
TASKS = ("qa_f1", "hotpot", "math")
REWARD_MAX = 2.0


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")


def _as_refs(references, what: str = "references") -> list[str]:
    if isinstance(references, str):
        return [references]
    if references is None:
        raise ValueError(f"{what} is None")
    try:
        refs = list(references)
    except TypeError:
        raise ValueError(f"{what} must be a string or a list of strings, got {type(references).__name__}") from None
    if not refs:
        raise ValueError(f"{what} is empty")
    for r in refs:
        if not isinstance(r, str):
            raise ValueError(f"{what} must be strings, got {type(r).__name__}: {r!r}")
    return refs


# ----------------------------------------------------------------------------- SQuAD metrics
_PUNCT = frozenset(string.punctuation)

def normalize_answer(s: str) -> str:
    """SQuAD answer normalisation: lower-case, drop punctuation, drop articles (a, an, the),
    collapse whitespace (Rajpurkar et al. 2016, official v1.1/v2.0 evaluation script)."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _f1_single(prediction: str, reference: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not pred or not gold:  # SQuAD v2.0 rule: both empty -> 1, one empty -> 0
        return float(pred == gold)
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, references) -> float:
    """max_ref F1(pred, ref), F1 = 2PR/(P+R) over the multiset overlap of normalised tokens
    (SQuAD script; paper Appendix E: NarrativeQA/Qasper reward = 2 × this).

    ``references`` is a string or a non-empty list of strings. An empty normalised prediction
    and an empty normalised reference give 1, one of them empty gives 0 (SQuAD v2.0)."""
    return max(_f1_single(prediction, r) for r in _as_refs(references))


def exact_match(prediction: str, references) -> float:
    """max_ref 1[normalize_answer(pred) == normalize_answer(ref)] (SQuAD script)."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(r) for r in _as_refs(references)))


def qa_accuracy(prediction: str, references) -> float:
    """Accuracy for QA (paper §5 "Benchmarks"): 1 if max token-F1 > 0.5 else 0."""
    return float(token_f1(prediction, references) > 0.5)


def bleu(prediction: str, references) -> float:
    """Sentence BLEU on 0–100 with sacrebleu: ``BLEU(effective_order=True)`` i.e. 13a
    tokenizer, mixed case, 'exp' smoothing, effective n-gram order (sacrebleu's
    ``sentence_bleu`` defaults); multiple references allowed (paper Table 1 "BLEU")."""
    from sacrebleu.metrics import BLEU

    return float(BLEU(effective_order=True).sentence_score(prediction, _as_refs(references)).score)


def corpus_bleu(predictions: Sequence[str], references_list: Sequence) -> float:
    """Corpus BLEU on 0–100 (sacrebleu defaults: 13a, no smoothing) for evaluation tables.

    references_list[i] holds the references (str or list) of predictions[i]; items may have
    different numbers of references (sacrebleu accepts missing references as None)."""
    from sacrebleu.metrics import BLEU

    if len(predictions) != len(references_list):
        raise ValueError(f"{len(predictions)} predictions but {len(references_list)} reference sets")
    refs = [_as_refs(r, f"references[{i}]") for i, r in enumerate(references_list)]
    width = max((len(r) for r in refs), default=0)
    streams = [[r[k] if k < len(r) else None for r in refs] for k in range(width)]
    return float(BLEU().corpus_score(list(predictions), streams).score)


def hotpot_f1_em(prediction: str, gold) -> tuple[float, float]:
    """(F1, EM) of the official HotpotQA evaluation (Yang et al. 2018, ``hotpot_evaluate_v1``):
    SQuAD F1/EM, except that if either normalised string is one of yes/no/noanswer and the
    two differ, F1 = 0. A list of golds takes the max of each."""
    best_f1, best_em = 0.0, 0.0
    for g in _as_refs(gold, "gold"):
        p, n = normalize_answer(prediction), normalize_answer(g)
        em = float(p == n)
        special = {"yes", "no", "noanswer"}
        f1 = 0.0 if (p in special or n in special) and p != n else _f1_single(prediction, g)
        best_f1, best_em = max(best_f1, f1), max(best_em, em)
    return best_f1, best_em


# ----------------------------------------------------------------------------- extraction
_SPECIAL_TOKENS = re.compile(r"<\|[^|>]*\|>|</?s>|<pad>|<eos>|<bos>")
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_ANSWER_MARKER = re.compile(r"(?:final\s+answer|answer)\s*(?:is\s*:?|:)\s*", re.I)


def extract_qa_answer(completion: str) -> str:
    """Free-text answer of a QA completion (paper Appendix E "extracted free-form answer").

    Rule: drop chat special tokens (``<|...|>``, ``</s>``) and ``<think>...</think>`` blocks;
    if an "Answer:" / "answer is" / "final answer:" marker occurs, keep the text after the
    LAST marker; take the first non-empty line; strip whitespace, markdown ``*``/``#``/`` ` ``,
    quotes and periods at both ends. Returns "" when nothing is left."""
    if not isinstance(completion, str):
        raise ValueError(f"completion must be a string, got {type(completion).__name__}")
    text = _THINK.sub(" ", _SPECIAL_TOKENS.sub(" ", completion))
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        text = text[markers[-1].end():]
    for line in text.splitlines():
        line = line.strip(" \t*#`\"'“”.")
        if line:
            return line
    return ""


_BOX_COMMANDS = ("\\boxed", "\\fbox", "\\framebox")
_BARE_BOX_TOKEN = re.compile(r"\s+([^\s$]+)")


def _matching_braces(text: str) -> dict[int, int]:
    """{index of '{': index of its matching '}'} for every closed brace, in one linear pass.
    Unclosed '{' are absent. One pass instead of a scan per box keeps a completion made of
    thousands of unclosed ``\\boxed{`` linear, not quadratic, in its length."""
    match, stack = {}, []
    for k, ch in enumerate(text):
        if ch == "{":
            stack.append(k)
        elif ch == "}" and stack:
            match[stack.pop()] = k
    return match


def extract_boxed(text: str) -> str | None:
    """Content of the LAST complete ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\framebox{...}``
    (MATH ``last_boxed_only_string``), nested braces matched by a counting scan. ``\\boxed 5``
    (no braces) yields the token up to the next space or ``$``. An unclosed box (a truncated
    completion) is skipped in favour of the previous complete one. None if there is none.
    Linear time in len(text), whatever it holds."""
    if not isinstance(text, str):
        return None
    starts = sorted(
        (m.start(), m.end()) for cmd in _BOX_COMMANDS for m in re.finditer(re.escape(cmd) + r"(?![A-Za-z])", text)
    )
    match = _matching_braces(text) if starts else {}
    for start, end in reversed(starts):
        rest = text[end:end + 1]
        if rest == "{":
            close = match.get(end)
            if close is not None:
                return text[end + 1:close].strip()
        elif rest == " ":
            token = _BARE_BOX_TOKEN.match(text, end)
            if token:
                return token.group(1)
    return None


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def extract_math_answer(completion: str) -> str | None:
    """Final answer of a math completion, tried in order:

    1. the last complete ``\\boxed{}`` (``extract_boxed``) — the format the prompt asks for;
    2. the text after the last "answer is" / "answer:" / "final answer (is):" marker, up to the
       end of its line, with ``$`` and a trailing period stripped (models that forget the box);
    3. the last number in the completion (``-12``, ``3.5``, ``1,000``, ``3/4``) — Minerva-style
       last-number fallback.
    Returns None when none applies."""
    if not isinstance(completion, str):
        return None
    text = _THINK.sub(" ", _SPECIAL_TOKENS.sub(" ", completion))
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        tail = text[markers[-1].end():].strip().split("\n")[0].strip()
        tail = tail.strip("$ ").rstrip(".").strip("$ *")
        if tail:
            return tail
    numbers = _NUMBER.findall(text)
    return numbers[-1].rstrip(",") if numbers else None


def extract_answer(completion: str, task: str):
    """Dispatch: ``qa_f1``/``hotpot`` → extract_qa_answer, ``math`` → extract_math_answer."""
    _check_task(task)
    return extract_math_answer(completion) if task == "math" else extract_qa_answer(completion)


# ----------------------------------------------------------------------------- math normalisation
# Unit words of Minerva's REMOVED_EXPRESSIONS, removed here only as whole words (Minerva's plain
# substring removal turns "\left" into "\le" via "ft"; we drop \left first and use \b).
_UNIT_WORDS = (
    "square", "ways", "integers", "dollars", "mph", "inches", "ft", "hours", "km", "units",
    "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds",
    "meters", "meals", "edges", "students", "childrentickets", "multiples", "days", "seconds",
)
_UNIT_RE = re.compile(r"(?<![\\A-Za-z])(?:%s)(?![A-Za-z])" % "|".join(_UNIT_WORDS))
_REMOVE_LITERAL = (
    "\\!", "\\,", "\\;", "\\:", "\\quad", "\\displaystyle", "\\ldots", "\\dots", "\\cdots",
    "{}^\\circ", "^{\\circ}", "^\\circ", "°", "\\degree", "\\%", "%", "\\$", "$", "{,}", '"',
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


# ----------------------------------------------------------------------------- math equivalence
MAX_MATH_CHARS = 200  # longer answers are compared as strings only (guards sympy run time)
MAX_EXPONENT = 10_000  # larger numeric exponents are not evaluated (an exact 9^9^9 never ends)
MAX_BITS = 65_536  # numbers whose estimated size exceeds 2^MAX_BITS are not evaluated
MAX_SYMBOLIC_EXPONENT = 64  # (x + 1)^n with larger n is not expanded
MAX_NODES = 300  # expression trees with more nodes are compared as strings only
_FALLBACKS: Counter = Counter()  # guard hits since the last reset: answers compared as strings


def math_fallbacks(reset: bool = False) -> dict[str, int]:
    """How many math comparisons fell back to string equality because an answer was over a
    guard ({"length": n, "cost": m}), counted per ``math_equiv`` call since the last reset.
    Callers that score many answers (``score_groups``, the study, the trainer) record it in
    their output's metadata."""
    out = dict(_FALLBACKS)
    if reset:
        _FALLBACKS.clear()
    return out
_FUNCS = {"sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "pi", "oo"}
_LATEX_TO_PY = [
    (r"\cdot", "*"), (r"\times", "*"), (r"\div", "/"), (r"\pi", " pi "), (r"\infty", " oo "),
    (r"\ln", " ln "), (r"\log", " log "), (r"\exp", " exp "), (r"\sin", " sin "), (r"\cos", " cos "),
    (r"\tan", " tan "), (r"\cot", " cot "), (r"\sec", " sec "), (r"\csc", " csc "),
]


def _latex_to_sympy_str(s: str) -> str | None:
    """Hand-written converter of simple LaTeX (\\frac, \\sqrt[n]{}, ^{}, \\cdot, \\pi, trig) to
    sympy syntax, because ``sympy.parsing.latex`` needs antlr4. Returns None for anything else
    (unknown commands, ``!``, quotes, multi-letter names) so that ``parse_expr`` — which runs
    ``eval`` — only ever sees digits, operators, single letters and whitelisted names."""
    braces = _matching_braces(s)
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
                    root, k = _latex_to_sympy_str(s[k + 1:close]), close + 1
                groups = []
                for _ in range(2 if kind == "frac" else 1):
                    if not s.startswith("{", k):
                        return None
                    close = braces.get(k)
                    if close is None:
                        return None
                    inner = _latex_to_sympy_str(s[k + 1:close])
                    if inner is None:
                        return None
                    groups.append(inner)
                    k = close + 1
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
    if "\\" in text or not re.fullmatch(r"[0-9A-Za-z+\-*/().\s]*", text):
        return None
    # Split unknown multi-letter runs into single-letter symbols ("xy" -> "x y"): keeps eval safe.
    text = re.sub(r"[A-Za-z]+", lambda m: m.group(0) if m.group(0) in _FUNCS else " ".join(m.group(0)), text)
    return text


def _log2_size(expr, sympy) -> float:
    """An upper estimate of log2 |value| of a numeric sympy tree (symbols count as 7 bits, the
    size of the random points they are evaluated at), computed in floats: 9999^9999^9999 is
    sized without ever being built. inf when the estimate itself overflows."""
    if expr.is_Integer or expr.is_Rational:
        return float(max(abs(expr.p).bit_length(), abs(expr.q).bit_length()))
    if expr.is_Float:
        return float(abs(expr._mpf_[2]) + expr._mpf_[3]) if expr._mpf_[1] else 0.0
    if expr.is_Symbol or expr.is_NumberSymbol or expr is sympy.I or not expr.args:
        return 7.0
    sizes = [_log2_size(a, sympy) for a in expr.args]
    if expr.is_Pow:
        base, exp = sizes
        if exp > 60:
            return math.inf
        if not expr.exp.free_symbols:  # small enough to evaluate in floats: use its real size
            exp_value = abs(complex(sympy.N(expr.exp, 15)))
            return max(base, 1.0) * (exp_value if math.isfinite(exp_value) else math.inf)
        return max(base, 1.0) * 2.0 ** exp
    if expr.is_Mul:
        return sum(sizes)
    return max(sizes) + math.log2(len(sizes))  # Add, functions (sqrt, sin, log, ...)


def _over_cost_guard(expr, sympy) -> bool:
    """True if evaluating ``expr`` exactly could take unbounded time: too many nodes, a numeric
    size over 2^MAX_BITS (towers such as (9999^9999)^9999, which a per-power exponent check
    misses), a numeric exponent over MAX_EXPONENT, or a symbolic power over
    MAX_SYMBOLIC_EXPONENT (its expansion). Checked before anything evaluates the expression."""
    nodes = 0
    for node in sympy.preorder_traversal(expr):
        nodes += 1
        if nodes > MAX_NODES:
            return True
        if node.is_Pow and node.exp.is_Number:
            n = abs(float(node.exp))
            limit = MAX_SYMBOLIC_EXPONENT if node.base.free_symbols else MAX_EXPONENT
            if not math.isfinite(n) or n > limit:
                return True
    try:
        return not _log2_size(expr, sympy) <= MAX_BITS
    except (OverflowError, ValueError, TypeError, AttributeError):
        return True


@functools.lru_cache(maxsize=4096)  # a group's G completions share one reference; repeats are common
def _to_sympy(s: str):
    """(sympy expression or None, guard) for a normalised answer: guard is "length" or "cost"
    when the answer is over a guard (then compared as a string), else None. None expression on
    a parse error or unsafe input."""
    if not s:
        return None, None
    if len(s) > MAX_MATH_CHARS:
        return None, "length"
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor, implicit_multiplication_application, parse_expr, standard_transformations,
    )

    code = _latex_to_sympy_str(s)
    expr = None
    if code is not None and code.strip():
        # Every letter is a plain Symbol (sympy's namespace would read N, S, O, Q as functions),
        # except e and i, the constants they are in MATH answers.
        local = {ch: sympy.Symbol(ch) for ch in string.ascii_letters}
        local.update({"pi": sympy.pi, "oo": sympy.oo, "e": sympy.E, "i": sympy.I, "ln": sympy.log})
        try:
            expr = parse_expr(code, local_dict=local, evaluate=False,
                              transformations=standard_transformations + (implicit_multiplication_application, convert_xor))
        except Exception:  # any syntax/type error means "not a parseable expression"
            expr = None
    elif importlib.util.find_spec("antlr4") is not None:  # sympy's own LaTeX parser, if runnable
        try:
            from sympy.parsing.latex import parse_latex

            expr = parse_latex(s)
        except Exception:
            expr = None
    if expr is None or not isinstance(expr, sympy.Expr):
        return None, None
    if _over_cost_guard(expr, sympy):
        return None, "cost"
    return expr, None


@functools.lru_cache(maxsize=4096)
def _scalar_equiv(a: str, b: str) -> tuple[bool, str | None]:
    """(equal, guard): guard names the guard that sent the comparison to string equality."""
    if a == b:
        return True, None
    (ea, ga), (eb, gb) = _to_sympy(a), _to_sympy(b)
    if ea is None or eb is None:
        return False, ga or gb
    return _sympy_equiv(ea, eb), None


def _sympy_equiv(ea, eb) -> bool:
    import sympy

    try:
        diff = ea - eb
        if diff == 0:
            return True
        if not (ea.free_symbols or eb.free_symbols):
            xa, xb = ea.doit(), eb.doit()
            if xa.is_Rational and xb.is_Rational:  # integers/fractions: exact, 10^6 ≠ 10^6 - 1
                return bool(xa == xb)
            va, vb = complex(sympy.N(ea)), complex(sympy.N(eb))
            if not all(map(math.isfinite, (va.real, va.imag, vb.real, vb.imag))):
                return va == vb  # ±oo: a - b is nan, compare the infinities themselves
            return abs(va - vb) <= 1e-6 * max(1.0, abs(va), abs(vb))
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
                return False
        if sympy.expand(diff) == 0:
            return True
        if sympy.count_ops(diff) > 60:  # simplify can take minutes on big expressions
            return False
        return bool(sympy.simplify(diff) == 0)
    except Exception:  # sympy raises many types on exotic input; unequal is the safe answer
        return False


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
    parts, depth, cur = [], 0, []
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


def math_equiv(a, b) -> bool:
    """True if two final answers are mathematically the same (paper Table "Per-task reward
    definitions": "extracted answer matches").

    normalize_math_answer string equality; else tuples/intervals/lists are compared element-wise
    (bracket types must agree when both have them, so ``(1,2)`` ≠ ``[1,2)``; bare comma lists
    such as "2, -3" may match in any order; nesting up to 3 levels); scalars by sympy (safe
    converter ``_latex_to_sympy_str``; ``sympy.parsing.latex`` when antlr4 is installed and the
    converter declines): exact rationals (integers, fractions) equal exactly, other numbers
    within relative 1e-6; expressions with symbols are
    unequal if a - b ≠ 0 at one of 3 seeded random rational points, else equal if
    ``expand(a - b) == 0`` or ``simplify(a - b) == 0`` (simplify skipped above 60 operations).
    Strings longer than MAX_MATH_CHARS, and expressions over the cost guard (``_over_cost_guard``:
    more than MAX_NODES nodes, a numeric size over 2^MAX_BITS — towers included — or an exponent
    over MAX_EXPONENT / MAX_SYMBOLIC_EXPONENT), are compared as strings only and counted in
    ``math_fallbacks()``; any parse error gives False (never raises, never hangs)."""
    if a is None or b is None:
        return False
    na, nb = normalize_math_answer(a), normalize_math_answer(b)
    if not na or not nb:
        return False
    guards: set = set()
    equal = _equiv_normalized(na, nb, depth=0, guards=guards)
    _FALLBACKS.update(guards)
    return equal


def _equiv_normalized(na: str, nb: str, depth: int, guards: set) -> bool:
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
        same = lambda x, y: _equiv_normalized(x, y, depth + 1, guards)  # noqa: E731 - nested tuples
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
    equal, guard = _scalar_equiv(na, nb)
    if guard:
        guards.add(guard)
    return equal


# ----------------------------------------------------------------------------- rewards
def qa_reward(completion: str, references) -> float:
    """r = 2 · max_ref token-F1(extract_qa_answer(completion), ref) ∈ [0, 2] (Appendix E,
    NarrativeQA and Qasper)."""
    return REWARD_MAX * token_f1(extract_qa_answer(completion), references)


def hotpot_reward(completion: str, references) -> float:
    """r = 2 · F1 of hotpot_f1_em(extract_qa_answer(completion), gold) ∈ [0, 2] (Appendix E)."""
    return REWARD_MAX * hotpot_f1_em(extract_qa_answer(completion), references)[0]


def math_reward(completion: str, reference) -> float:
    """r = 2 if math_equiv(extract_math_answer(completion), reference) else 0 (Appendix E,
    MATH500 / AIME24 / OlympiadBench). A list reference matches if any element does."""
    pred = extract_math_answer(completion)
    return REWARD_MAX * float(any(math_equiv(pred, r) for r in _as_refs(reference, "reference")))


def task_reward(task: str, completion: str, references) -> float:
    """Reward of one completion for ``task`` ∈ {qa_f1, hotpot, math}; always in [0, 2]."""
    _check_task(task)
    fn = {"qa_f1": qa_reward, "hotpot": hotpot_reward, "math": math_reward}[task]
    return fn(completion, references)


def is_success(task: str, reward: float) -> bool:
    """Success of a rollout: QA/hotpot F1 > 0.5 ⇔ reward > 1.0; math reward == 2."""
    _check_task(task)
    if reward is None or not math.isfinite(float(reward)) or not 0.0 <= reward <= REWARD_MAX:
        raise ValueError(f"reward {reward!r} is not a number in [0, {REWARD_MAX}]")
    return reward == REWARD_MAX if task == "math" else reward > REWARD_MAX / 2


def task_metrics(task: str, predictions: Sequence[str], references_list: Sequence, extract: bool = False) -> dict:
    """Evaluation metrics over a test set (paper Tables 1–3): qa_f1 → {Acc (F1 > 0.5), BLEU
    (corpus), F1} in percent; hotpot → {F1, EM} in percent (official HotpotQA); math →
    {accuracy} in percent; plus n. ``predictions`` are extracted answers (``extract_answer``
    output, None/"" for none); ``extract=True`` takes raw completions and extracts them here
    (re-extracting an extracted math answer would be wrong: "\\frac{1}{2}" → last number "2")."""
    _check_task(task)
    if len(predictions) != len(references_list):
        raise ValueError(f"{len(predictions)} predictions but {len(references_list)} reference sets")
    if not predictions:
        raise ValueError("task_metrics needs at least one prediction")
    answers = [extract_answer(p, task) if extract else p for p in predictions]
    answers = [a if a is not None else "" for a in answers]
    n = len(answers)
    if task == "qa_f1":
        f1 = [token_f1(a, r) for a, r in zip(answers, references_list)]
        return {"Acc": 100.0 * sum(x > 0.5 for x in f1) / n,
                "BLEU": corpus_bleu(answers, references_list),
                "F1": 100.0 * sum(f1) / n, "n": n}
    if task == "hotpot":
        scores = [hotpot_f1_em(a, r) for a, r in zip(answers, references_list)]
        return {"F1": 100.0 * sum(s[0] for s in scores) / n,
                "EM": 100.0 * sum(s[1] for s in scores) / n, "n": n}
    hits = [any(math_equiv(a, r) for r in _as_refs(refs)) for a, refs in zip(answers, references_list)]
    return {"accuracy": 100.0 * sum(hits) / n, "n": n}
