"""Final-answer extraction from model completions (paper Appendix E; docs/conventions.md
"Rewards"): the free-text answer of a QA completion and the final answer of a math completion.

Completions are untrusted: every function here runs in time linear in the completion's length,
whatever it holds (thousands of unclosed ``\\boxed{`` or ``<think>`` tags included).
"""

from __future__ import annotations

import re

_SPECIAL_TOKENS = re.compile(r"<\|[^|>]*\|>|</?s>|<pad>|<eos>|<bos>")
_THINK_TAG = re.compile(r"<(/?)think>", re.I)
_ANSWER_MARKER = re.compile(r"(?:final\s+answer|answer)\s*(?:is\s*:?|:)\s*", re.I)


def strip_think(text: str) -> str:
    """``text`` with each ``<think>`` … ``</think>`` block replaced by a space: a block runs from
    a ``<think>`` to the first ``</think>`` after it (tags do not nest; an unclosed ``<think>``
    and a stray ``</think>`` stay). The result of ``re.sub(r"<think>.*?</think>", " ", text,
    flags=re.S | re.I)`` in one pass over the tags: the regex rescans the rest of the text from
    every unclosed ``<think>``, quadratic time on ``"<think>" * 10_000``."""
    out, kept, opened = [], 0, None
    for m in _THINK_TAG.finditer(text):
        if not m.group(1):
            if opened is None:
                opened = m.start()
        elif opened is not None:
            out += [text[kept:opened], " "]
            kept, opened = m.end(), None
    out.append(text[kept:])
    return "".join(out)


def _visible(completion: str) -> str:
    return strip_think(_SPECIAL_TOKENS.sub(" ", completion))


def extract_qa_answer(completion: str) -> str:
    """Free-text answer of a QA completion (paper Appendix E "extracted free-form answer").

    Rule: drop chat special tokens (``<|...|>``, ``</s>``) and ``<think>...</think>`` blocks;
    if an "Answer:" / "answer is" / "final answer:" marker occurs, keep the text after the
    LAST marker; take the first non-empty line; strip whitespace, markdown ``*``/``#``/`` ` ``,
    quotes and periods at both ends. Returns "" when nothing is left."""
    if not isinstance(completion, str):
        raise ValueError(f"completion must be a string, got {type(completion).__name__}")
    text = _visible(completion)
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        text = text[markers[-1].end() :]
    for line in text.splitlines():
        line = line.strip(" \t*#`\"'“”.")
        if line:
            return line
    return ""


_BOX_COMMANDS = ("\\boxed", "\\fbox", "\\framebox")
_BARE_BOX_TOKEN = re.compile(r"\s+([^\s$]+)")


def matching_braces(text: str) -> dict[int, int]:
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
    match = matching_braces(text) if starts else {}
    for _start, end in reversed(starts):
        rest = text[end : end + 1]
        if rest == "{":
            close = match.get(end)
            if close is not None:
                return text[end + 1 : close].strip()
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
    Chat special tokens and ``<think>`` blocks are dropped first. Returns None when none applies."""
    if not isinstance(completion, str):
        return None
    text = _visible(completion)
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        tail = text[markers[-1].end() :].strip().split("\n")[0].strip()
        tail = tail.strip("$ ").rstrip(".").strip("$ *")
        if tail:
            return tail
    numbers = _NUMBER.findall(text)
    return numbers[-1].rstrip(",") if numbers else None
