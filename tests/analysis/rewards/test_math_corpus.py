"""The math reward on tests/data/math_corpus.jsonl: 370 (answer, reference) pairs whose verdict is
known by construction (tests/data/make_math_corpus.py: MATH500's answers against rewritings and
changes of value, plus sets, intervals, matrices, repeating decimals, binomials, factorials,
logs, units, empty sets, order and spacing). Before math-verify (a57d336) 331/370 were right."""

import json
from pathlib import Path

import pytest

from gcpo_analysis.rewards.math.grading import math_equiv, math_fallbacks

CORPUS = Path(__file__).resolve().parents[2] / "data" / "math_corpus.jsonl"
ROWS = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def roomy_budget(monkeypatch):
    """Correctness, not speed, is tested here (test_rewards_hostile.py holds the 2 s bound): a
    loaded CI machine must not turn a verdict into a time fallback."""
    from gcpo_analysis.rewards.math import grading as math_grading

    monkeypatch.setattr(math_grading, "MATH_TIME_BUDGET_S", 10.0)
    math_grading.clear_caches()


def test_the_corpus_is_large_and_balanced():
    assert len(ROWS) >= 300
    assert 0.2 < sum(not r["equal"] for r in ROWS) / len(ROWS) < 0.5
    assert len({(r["answer"], r["reference"]) for r in ROWS}) == len(ROWS)


@pytest.mark.slow
def test_every_verdict_of_the_corpus_is_right():
    pytest.importorskip("math_verify")
    math_equiv("1", "1")  # start the worker
    wrong = []
    math_fallbacks(reset=True)
    for r in ROWS:
        if math_equiv(r["answer"], r["reference"]) != r["equal"]:
            wrong.append((r["family"], r["answer"], r["reference"], r["equal"]))
    assert not wrong, wrong
    assert math_fallbacks() == {}  # every verdict is a comparison, none a guard's string fallback


@pytest.mark.parametrize(
    "answer, reference, equal",
    [
        (r"\begin{pmatrix} 12 \\ 3 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 23 \end{pmatrix}", False),
        ("0.36", r"0.\overline{36}", False),
        (r"\{1,2\}", r"\{2,1\}", True),
        (r"x \in [1, 2]", "[1,2]", True),
        (r"\log_2 8", "3", True),
        (r"\binom{5}{2}", "10", True),
        ("5!", "120", True),
        (r"\emptyset", r"\varnothing", True),
    ],
)
def test_the_issues_examples(answer, reference, equal):
    """The issue's probes: wrong answers that scored 2, right ones that scored 0."""
    pytest.importorskip("math_verify")
    from gcpo_analysis.rewards import task_reward

    assert task_reward("math", rf"\boxed{{{answer}}}", [reference]) == (2.0 if equal else 0.0)
