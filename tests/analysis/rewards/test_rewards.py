"""Tests for gcpo_analysis.rewards: SQuAD F1/EM, BLEU, HotpotQA rule, extraction, math grading."""

import math

import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st

from gcpo_analysis import rewards as R


# ----------------------------------------------------------------------------- SQuAD
@pytest.mark.parametrize(
    "raw, norm",
    [
        ("The Cat, sat!", "cat sat"),
        ("  an   Apple a day ", "apple day"),
        ("theory of the", "theory of"),  # "the" inside "theory" is not an article
        ("U.S.A.", "usa"),
    ],
)
def test_normalize_answer(raw, norm):
    assert R.normalize_answer(raw) == norm


def test_token_f1_hand_worked():
    # pred tokens {cat, sat}, gold {cat, sat, on, mat}: P = 1, R = 1/2, F1 = 2/3
    assert R.token_f1("the cat sat", "cat sat on the mat") == pytest.approx(2 / 3)
    # tokens are a multiset: pred [x, x, y], gold [x, y, z]: common 2, P = R = 2/3
    assert R.token_f1("x x y", "x y z") == pytest.approx(2 / 3)
    # max over references
    assert R.token_f1("Mark Hunter", ["a student", "Mark Hunter"]) == 1.0
    assert R.token_f1("Paris", ["London"]) == 0.0
    # SQuAD v2 empty handling: both empty after normalisation -> 1, one empty -> 0
    assert R.token_f1("the", "a") == 1.0
    assert R.token_f1("", "Paris") == 0.0
    assert R.token_f1("Paris", "") == 0.0


def test_exact_match_and_accuracy():
    assert R.exact_match("The Eiffel Tower!", "eiffel tower") == 1.0
    assert R.exact_match("Eiffel", ["eiffel tower", "tower"]) == 0.0
    assert R.token_f1("cat sat", "cat sat on mat") == pytest.approx(2 / 3)  # P=1, R=1/2
    assert R.qa_accuracy("cat sat", "cat sat on mat") == 1.0
    assert R.qa_accuracy("cat", "cat sat on mat") == 0.0  # F1 = 2*(1*0.25)/1.25 = 0.4


def test_bad_references():
    with pytest.raises(ValueError, match="empty"):
        R.token_f1("x", [])
    with pytest.raises(ValueError, match="strings"):
        R.token_f1("x", [1])


# ----------------------------------------------------------------------------- BLEU
def test_bleu_matches_sacrebleu():
    pred, refs = "the cat is on the mat today", ["the cat sat on the mat", "a cat is on a mat"]
    assert R.bleu(pred, refs) == pytest.approx(sacrebleu.sentence_bleu(pred, refs).score)
    assert R.bleu("identical sentence here ok", "identical sentence here ok") == pytest.approx(100.0)
    assert 0.0 <= R.bleu("zzz", "the cat") < 1e-6 + 100


def test_corpus_bleu_matches_sacrebleu_and_ragged_refs():
    preds = ["the cat sat on the mat", "a dog barks loudly at night"]
    refs = [["the cat sat on a mat"], ["a dog barks at night"]]
    direct = sacrebleu.corpus_bleu(preds, [[r[0] for r in refs]]).score
    assert R.corpus_bleu(preds, refs) == pytest.approx(direct)
    ragged = [["the cat sat on a mat", "cat on mat"], "a dog barks at night"]
    direct2 = sacrebleu.corpus_bleu(
        preds, [["the cat sat on a mat", "a dog barks at night"], ["cat on mat", None]]
    ).score
    assert R.corpus_bleu(preds, ragged) == pytest.approx(direct2)
    with pytest.raises(ValueError, match="predictions"):
        R.corpus_bleu(preds, refs[:1])


# ----------------------------------------------------------------------------- HotpotQA
def test_hotpot_yes_no_rule():
    assert R.hotpot_f1_em("yes", "no") == (0.0, 0.0)
    assert R.hotpot_f1_em("Yes.", "yes") == (1.0, 1.0)
    # gold "yes", prediction contains "yes": SQuAD F1 is 1/2 (P = 1/3, R = 1), HotpotQA says 0
    assert R.token_f1("yes it is", "yes") == pytest.approx(0.5)
    assert R.hotpot_f1_em("yes it is", "yes") == (0.0, 0.0)
    assert R.hotpot_f1_em("noanswer", "Paris") == (0.0, 0.0)
    f1, em = R.hotpot_f1_em("city of Tulsa", "Tulsa")  # P = 1/3, R = 1 -> F1 = 0.5
    assert (f1, em) == (pytest.approx(0.5), 0.0)


# ----------------------------------------------------------------------------- extraction
def test_extract_boxed_nested_and_last():
    assert R.extract_boxed(r"so \boxed{\frac{1}{\sqrt{2}}}.") == r"\frac{1}{\sqrt{2}}"
    assert R.extract_boxed(r"\boxed{1} then \fbox{2} and \boxed{3}") == "3"
    assert R.extract_boxed(r"\fbox{7} after \boxed{6}") == "6"
    assert R.extract_boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"
    assert R.extract_boxed(r"the answer is \boxed 5$") == "5"
    assert R.extract_boxed(r"\boxed{4} but truncated \boxed{\frac{1}") == "4"
    assert R.extract_boxed("no box here") is None


def test_extract_math_answer_fallbacks():
    assert R.extract_math_answer(r"x \boxed{2} and 99") == "2"
    assert R.extract_math_answer("Thus the final answer is $12$.") == "12"
    assert R.extract_math_answer("So the answer is: 3/4.\nDone") == "3/4"
    assert R.extract_math_answer("we get 3 apples, then 4.5 pears") == "4.5"
    assert R.extract_math_answer("no digits at all") is None
    assert R.extract_answer(r"\boxed{5}", "math") == "5"
    with pytest.raises(ValueError, match="unknown task"):
        R.extract_answer("x", "poetry")


def test_extract_qa_answer_rule():
    assert R.extract_qa_answer("<think>hmm, Lyon?</think>Answer: Paris.<|im_end|>") == "Paris"
    assert R.extract_qa_answer("Paris\nbecause it is the capital") == "Paris"
    assert R.extract_qa_answer("\n  **The Eiffel Tower**  \n") == "The Eiffel Tower"
    assert R.extract_qa_answer('Reasoning... so the answer is "Mark".') == "Mark"
    assert R.extract_qa_answer("Answer: one\nAnswer: two\nmore") == "two"
    assert R.extract_qa_answer("") == ""


# ----------------------------------------------------------------------------- math equivalence
EQUIV = [
    (r"\frac{1}{2}", "0.5", True),
    (r"\dfrac12", "1/2", True),
    (r"2\sqrt{2}", r"\sqrt{8}", True),
    ("(1,2)", "(1, 2)", True),
    (r"10^\circ", "10", True),
    (r"10^{\circ}", "10", True),
    ("x=3", "3", True),
    (r"\$5", "5", True),
    ("3", "4", False),
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})", True),
    ("(1,2)", "[1,2)", False),
    ("(2,-3)", "(-3,2)", False),
    ("2, -3", "-3,2", True),  # bare comma lists are unordered
    (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}", True),
    ("1,000", "1000", True),
    ("50\\%", "50", True),
    (r"5\text{ cm}", "5", True),
    ("10 dollars", "10", True),
    (r"\frac{1}{2 n+2}", r"\frac{1}{2(n+1)}", True),
    ("$2^{1009}$", "2^{1009}", True),
    ("x^2+2x+1", "(x+1)^2", True),
    ("x^2+2x", "(x+1)^2", False),
    ("1+2i", "2i+1", True),
    (r"\infty", "oo", True),
    (r"-\infty", r"\infty", False),
    ("0.333", r"\frac13", False),
    (r"3\pi", r"\pi\cdot3", True),
    (r"\boxed{5}", "5", True),
    ("2a + b", "2 + b", False),  # Minerva's plain "a " removal would make these equal
    (r"\sqrt2", r"\sqrt{2}", True),
    (r"\frac{\pi}{2}", r"\frac12\pi", True),
    (r"-\frac{1}{2}", "-0.5", True),
    (r"\tfrac{3}{4}", "0.75", True),
    (r"[1, \infty)", r"[1,\infty)", True),
    (r"\sqrt[3]{8}", "2", True),
    ("5.00", "5", True),
    (r"\text{(A)}", "(A)", True),
    ("(1,2,3)", "(1,2)", False),
    ("1000000", "999999", False),  # integers compare exactly, not within a relative tolerance
    ("2^{1009}", "2^{1009}+1", False),
    (r"f(x)=2 x", "2x", True),
    ("2N+S", "S+N+N", True),  # capital letters are symbols, not sympy's N() / S
    (r"e^{i\pi}", "-1", True),
    ("", "", False),
]


@pytest.mark.parametrize("a, b, expected", EQUIV)
def test_math_equiv_table(a, b, expected):
    assert R.math_equiv(a, b) is expected
    assert R.math_equiv(b, a) is expected


def test_math_equiv_never_evaluates_or_hangs_on_hostile_input():
    assert R.math_equiv("__import__('os').getcwd()", "1") is False
    assert R.math_equiv("9^9^9^9", "1") is False
    assert R.math_equiv("2^{1000000}", "3") is False
    assert R.math_equiv("2^{10}", "1024") is True
    assert R.math_equiv("1+" * 300 + "1", "301") is False  # over MAX_MATH_CHARS: strings only
    assert R.math_equiv(None, "1") is False


@pytest.mark.parametrize(
    "raw, norm",
    [
        (r"\dfrac12", r"\frac{1}{2}"),
        (r"\sqrt2", r"\sqrt{2}"),
        (r"\left(1,2\right)", "(1,2)"),
        ("x = 5.", "5"),
        (".25", "0.25"),
        (r"\text{ Yes }", "Yes"),
        (r"\frac{a}b", r"\frac{a}{b}"),
    ],
)
def test_normalize_math_answer(raw, norm):
    assert R.normalize_math_answer(raw) == norm


# ----------------------------------------------------------------------------- rewards
def test_rewards_values():
    assert R.qa_reward("Answer: the cat sat", ["cat sat on the mat"]) == pytest.approx(2 * (2 * 1 * 0.5 / 1.5))
    assert R.hotpot_reward("Answer: yes", "no") == 0.0
    assert R.hotpot_reward("Tulsa", "Tulsa") == 2.0
    assert R.math_reward(r"... so \boxed{\frac{1}{2}}", "0.5") == 2.0
    assert R.math_reward(r"... so \boxed{3}", "4") == 0.0
    assert R.math_reward("no answer at all", "4") == 0.0
    assert R.math_reward(r"\boxed{2}", ["1", "$2$"]) == 2.0
    assert R.task_reward("math", r"\boxed{7}", "7") == 2.0
    assert R.TASK_OF_DATASET["qasper"] == "qa_f1" and R.TASK_OF_DATASET["olympiadbench"] == "math"


def test_is_success():
    assert R.is_success("qa_f1", 1.01) and not R.is_success("qa_f1", 1.0)
    assert R.is_success("math", 2.0) and not R.is_success("math", 1.99)
    with pytest.raises(ValueError, match="reward"):
        R.is_success("qa_f1", float("nan"))
    with pytest.raises(ValueError, match="reward"):
        R.is_success("math", 2.5)


def test_task_metrics():
    m = R.task_metrics("qa_f1", ["Answer: cat sat", "dog"], [["cat sat"], ["a bird"]], extract=True)
    assert m["Acc"] == 50.0 and m["F1"] == 50.0 and m["n"] == 2
    assert m["BLEU"] == pytest.approx(sacrebleu.corpus_bleu(["cat sat", "dog"], [["cat sat", "a bird"]]).score)
    h = R.task_metrics("hotpot", ["yes", "city of Tulsa"], ["no", "Tulsa"])
    assert h == {"F1": pytest.approx(25.0), "EM": 0.0, "n": 2}
    assert R.task_metrics("math", [r"\boxed{1}", r"\boxed{2}"], ["1", "3"], extract=True)["accuracy"] == 50.0
    # already-extracted answers (the default) are not re-extracted: "\frac{1}{2}" must not become "2"
    assert R.task_metrics("math", [r"\frac{1}{2}", None], ["0.5", "1"])["accuracy"] == 50.0
    with pytest.raises(ValueError):
        R.task_metrics("math", [], [])


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    task=st.sampled_from(["qa_f1", "hotpot"]),
    completion=st.text(max_size=40),
    refs=st.lists(st.text(max_size=20), min_size=1, max_size=3),
)
def test_qa_rewards_in_range(task, completion, refs):
    r = R.task_reward(task, completion, refs)
    assert 0.0 <= r <= 2.0 and not math.isnan(r)


@settings(max_examples=30, deadline=None)
@given(num=st.integers(-(10**6), 10**6), den=st.integers(1, 50))
def test_math_reward_fraction_property(num, den):
    # a reduced or unreduced fraction equals its decimal only when the decimal is exact
    ref = f"\\frac{{{num}}}{{{den}}}"
    assert R.math_reward(f"\\boxed{{{num}/{den}}}", ref) == 2.0
    assert R.math_reward(f"\\boxed{{{num + den}/{den}}}", ref) == 0.0
