"""Hostile model answers (issue "Trust"): the math reward, the math judge and answer extraction
never execute anything and never hang. Each test asserts the time bound the issue sets for any
completion up to 64 KB (2 s), the reward, and the fallback reason counted."""

import time

import pandas as pd
import pytest
from helpers.embedders import HashEmbedder as _HashEmbedder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcpo_analysis import rewards

ANSWER_BUDGET_S = 2.0  # the bound for any completion up to 64 KB


# ----------------------------------------------------------------------------- model answers
def _think_maze() -> str:
    """64 KB of nested, stray and unclosed <think> tags; the box after the last, unclosed,
    <think> stays visible (a truncated reasoning block keeps its text)."""
    head = "<think>" + "<think>x</think>" * 1500 + "</think>" * 500 + "<THINK>y"
    return head + "<think>" * ((64 * 1024 - len(head) - 16) // 7) + r"\boxed{1}"


# name: (completion, reference, reward, the fallback reason counted or None)
HOSTILE_ANSWERS = {
    "power tower": (r"So \boxed{(9999^{9999})^{9999}}", "1", 0.0, "cost"),
    "8000 unclosed boxes": ("\\boxed{" * 8000, "1", 0.0, None),
    "symbolic power": (r"\boxed{(x+1)^{9999}}", "1", 0.0, "cost"),
    "deep fractions": ("\\boxed{" + "\\frac{1}{" * 3000 + "2" + "}" * 6001, "1", 0.0, "length"),
    "deep roots": ("\\boxed{" + "\\sqrt{" * 5000 + "2" + "}" * 5001, "1", 0.0, "length"),
    "deep parentheses": ("\\boxed{" + "(" * 30 + "1" + ")" * 30 + "}", "1", 0.0, "depth"),
    "64 KB of digits": ("\\boxed{" + "9" * 65_000 + "}", "1", 0.0, "length"),
    "64 KB of braces": ("{" * 32_000 + "}" * 32_000, "1", 0.0, None),
    "exponent chain": (r"\boxed{2^{2^{2^{2^{2^{2^{2}}}}}}}", "1", 0.0, "cost"),
    # math-verify reads factorials (5! = 120): a literal n over MAX_FACTORIAL is a counted guard
    "factorial": (r"\boxed{9999!!!}", "1", 0.0, "cost"),
    # sympy.parsing.latex evaluated 1000000! while parsing; the grader no longer uses it
    "factorial 1000000!": (r"\boxed{1000000!}", "1", 0.0, "cost"),
    "float literal 1e999999999": (r"\boxed{1e999999999}", "1", 0.0, "cost"),
    "method call .n(99999999)": (r"\boxed{\pi.n(99999999)}", "1", 0.0, None),
    "code": (r"\boxed{__import__('os').system('true')}", "1", 0.0, None),
    "polynomial power against a reordering": (r"\boxed{(a+b+c+d+e+f)^{64}}", "(f+e+d+c+b+a)^{64}", 2.0, None),
    # equal; math-verify proves it within the budget (before it, a counted "cost" fallback, reward 0)
    "polynomial power that needs expanding": (
        r"\boxed{(2a+2b+2c+2d+2e+2f)^{64}}",
        "2^{64}(a+b+c+d+e+f)^{64}",
        2.0,
        None,
    ),
    "square root of a 7,000-bit integer": ("\\boxed{\\sqrt{" + str(2**7000 + 1) + "}}", "1", 0.0, "length"),
    "square root of 2^7000 + 1": (r"\boxed{\sqrt{2^{7000}+1}}", "1", 0.0, "cost"),
    "cube root of 7^2500 + 3": (r"\boxed{\sqrt[3]{7^{2500}+3}}", "1", 0.0, "cost"),
    "10,000 <think> tags": ("<think>" * 10_000, "1", 0.0, None),
    "64 KB of nested and unclosed <think> tags": (_think_maze(), "1", 2.0, None),
}


def _fallbacks_since(before: dict) -> dict:
    after = rewards.math_fallbacks()
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


@pytest.fixture()
def warm_grader():
    """The sympy worker started (once per process, ~1 s) and the pair cache empty, so that
    each test times the comparison itself."""
    rewards.task_reward("math", r"\boxed{2\sqrt{2}}", [r"\sqrt{8}"])
    rewards.clear_caches()


@pytest.mark.parametrize("name", sorted(HOSTILE_ANSWERS))
def test_a_hostile_answer_is_scored_within_the_time_bound(name, warm_grader):
    completion, reference, reward, reason = HOSTILE_ANSWERS[name]
    assert len(completion) <= 70_000  # 64 KB, and the audit's "<think>" * 10,000
    before = rewards.math_fallbacks()
    t0 = time.perf_counter()
    r = rewards.task_reward("math", completion, [reference])
    assert time.perf_counter() - t0 < ANSWER_BUDGET_S
    assert r == reward
    assert _fallbacks_since(before) == ({reason: 1} if reason else {})


def test_towers_are_sized_before_anything_evaluates_them(warm_grader):
    before = rewards.math_fallbacks()
    assert rewards.math_equiv("(9999^{9999})^{9999}", "1") is False
    assert rewards.math_equiv(r"(x+1)^{9999}", r"(1+x)^{9998}") is False
    assert rewards.math_equiv(r"(a+b+c)^{2 \cdot 500}", r"(c+b+a)^{1000}") is False  # unevaluated exponents too
    assert _fallbacks_since(before) == {"cost": 3}
    # small powers are still compared exactly
    assert rewards.math_equiv("2^{10}", "1024") and rewards.math_equiv(r"e^{i\pi}", "-1")
    assert rewards.math_equiv("(2^{3})^{2}", "64")


def test_code_never_reaches_eval_and_float_literals_meet_the_exponent_guard():
    from gcpo_analysis.rewards.math.syntax import latex_to_code, plain_arithmetic, static_guard

    for answer in (r"\pi.n(99999999)", "x.expand()", "(1).__class__", "E.n(9)", "1//2", "x[0]", "f(x=1)"):
        assert latex_to_code(answer) is None, answer
    for code in ("pi.n(5)", "a[0]", "f(x=1)", "'s'", "1e5", "0x1f", "2j", "lambda: 1", "x.y", "xy"):
        assert plain_arithmetic(code) is None, code
    assert rewards.math_equiv(r"N(\pi)", r"\pi N")  # one letter is a symbol, never sympy's N()
    assert latex_to_code("1e999999999") == "(1*10**(999999999))"
    assert static_guard(latex_to_code("1e999999999")) == "cost"
    assert latex_to_code("0x1F") == "0 x 1 F"  # no hexadecimal literal: four symbols and numbers
    assert rewards.math_equiv("1e3", "1000") and rewards.math_equiv("2.5e-1", r"\frac14")


@given(
    st.lists(st.sampled_from(["<think>", "</think>", "<THINK>", "</Think>", "a", "\n", "<", ">"]), max_size=40).map(
        "".join
    )
)
def test_strip_think_is_the_regex_rule(text):
    import re

    assert rewards.strip_think(text) == re.sub(r"<think>.*?</think>", " ", text, flags=re.S | re.I)


@pytest.mark.slow
def test_a_comparison_past_the_time_limit_is_killed_counted_and_the_next_one_is_right(monkeypatch):
    from gcpo_analysis.rewards.math import sympy_worker

    worker = sympy_worker.Worker(target="tests.helpers.slow_sympy")  # "z" in an answer: never ends
    monkeypatch.setattr(sympy_worker, "WORKER", worker)
    rewards.clear_caches()
    try:
        assert rewards.math_equiv(r"2\sqrt{2}", r"\sqrt{8}")
        supervisor = worker.pid()
        before = rewards.math_fallbacks()
        t0 = time.perf_counter()
        assert rewards.task_reward("math", r"\boxed{z^2+1}", ["1+z^2"]) == 0.0
        assert time.perf_counter() - t0 < ANSWER_BUDGET_S
        assert _fallbacks_since(before) == {"time": 1}
        # a fresh worker (forked by the same supervisor) answers the next comparisons correctly
        assert worker.pid() == supervisor
        assert rewards.math_equiv(r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}")
        assert rewards.math_equiv("x^2+2x+1", "(x+1)^2") and not rewards.math_equiv("x^2+2x", "(x+1)^2")
        assert rewards.math_equiv(r"\sqrt[3]{8}", "2") and not rewards.math_equiv(r"3\pi", "9")
        assert _fallbacks_since(before) == {"time": 1}
        with pytest.raises(sympy_worker.WorkerTimeout):  # the limit holds for the raw call too
            worker.call(["equiv", "z", "1"], timeout=0.2)
    finally:
        worker.close()


def test_a_worker_that_cannot_start_is_loud_and_counted(monkeypatch):
    from gcpo_analysis.rewards.math import sympy_worker

    monkeypatch.setattr(sympy_worker, "WORKER", sympy_worker.Worker(target="gcpo_analysis.no_such_module"))
    rewards.clear_caches()
    before = rewards.math_fallbacks()
    with pytest.warns(RuntimeWarning, match="could not start.*counted as 'worker'"):
        assert rewards.math_equiv(r"2\sqrt{2}", r"\sqrt{8}") is False
    with pytest.warns(RuntimeWarning, match="retrying 60 s after the failure"):  # no second start
        assert rewards.math_equiv(r"3\sqrt{3}", r"\sqrt{27}") is False
    assert _fallbacks_since(before) == {"worker": 2}
    assert rewards.math_equiv("1.50", r"\frac{3}{2}")  # numbers need no worker


def test_equivalences_that_need_sympy_go_through_the_worker(monkeypatch, warm_grader):
    from gcpo_analysis.rewards.math import sympy_worker

    calls = []
    real_call = sympy_worker.WORKER.call
    monkeypatch.setattr(
        sympy_worker.WORKER, "call", lambda request, timeout: calls.append(request) or real_call(request, timeout)
    )
    for a, b, same in [
        (r"2\sqrt{2}", r"\sqrt{8}", True),
        (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}", True),
        ("x^2+2x+1", "(x+1)^2", True),
        (r"\frac{1}{2 n+2}", r"\frac{1}{2(n+1)}", True),
        (r"e^{i\pi}", "-1", True),
        ("2^{1009}", "2^{1009}+1", False),
        (r"\pi", "3.1416", False),
        ("(a+b)^{3}", "a^3+3a^2b+3ab^2+b^3", True),
        ("(a+b)^{3}", "a^3+b^3", False),
    ]:
        assert rewards.math_equiv(a, b) is same, (a, b)
    # math-verify first ("verify"), our sympy comparison where it is silent or reads e as a variable
    assert len([c for c in calls if c[0] == "verify"]) == 9 and all(c[0] in ("verify", "equiv") for c in calls)
    calls.clear()
    assert rewards.math_equiv("0.25", r"\frac{1}{4}") and not rewards.math_equiv("1000000", "999999")
    assert calls == []  # numbers are compared without the worker


def test_a_forked_process_starts_its_own_worker(warm_grader):
    import os

    from gcpo_analysis.rewards.math import sympy_worker

    parent_supervisor = sympy_worker.WORKER.pid()
    pid = os.fork()
    if pid == 0:  # the child: a worker of its own, the parent's left alone
        code = 1
        try:
            ok = rewards.math_equiv(r"3\sqrt{3}", r"\sqrt{27}")
            code = 0 if ok and sympy_worker.WORKER.pid() not in (None, parent_supervisor) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sympy_worker.WORKER.pid() == parent_supervisor and rewards.math_equiv(r"5\sqrt{5}", r"\sqrt{125}")


def test_importing_rewards_starts_no_process_and_imports_no_sympy():
    import subprocess
    import sys

    code = (
        "import sys; import gcpo_analysis.rewards; from gcpo_analysis.rewards.math import sympy_worker; "
        "assert sympy_worker.WORKER.pid() is None and 'sympy' not in sys.modules; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_fallbacks_are_counted_and_reach_score_groups_metadata():
    from gcpo_analysis.measures import score_groups

    long = "1+" * 150 + "1"
    rollouts = pd.DataFrame(
        {
            "query_id": [0] * 3,
            "rollout_id": [0, 1, 2],
            "completion": ["a", "b", "c"],
            "answer": [long, long + "+1", "2"],
            "reward": [0.0, 2.0, 0.0],
        }
    )
    with pytest.warns(UserWarning, match="fell back to string"):
        groups = score_groups(rollouts, ["cd", "rd", "se"], judge="math", embedder=_HashEmbedder())
    assert groups.attrs["gcpo"]["math_fallbacks"].get("length", 0) >= 1


def test_extraction_is_linear_not_quadratic():
    text = "\\boxed{" * 8000 + r"\boxed{42}"
    assert rewards.extract_boxed(text) == "42"
    assert rewards.extract_boxed(r"\boxed 7 and more") == "7"


LATEX_TOKENS = [
    "\\boxed{",
    "\\fbox{",
    "{",
    "}",
    "^",
    "^{",
    "\\frac",
    "\\sqrt",
    "\\sqrt[",
    "]",
    "!",
    "9999",
    "99",
    "2",
    "0",
    "(",
    ")",
    "x",
    "y",
    "\\pi",
    "e",
    "i",
    ",",
    "=",
    "\\left(",
    "\\right)",
    ".",
    "-",
    "+",
    "*",
    "/",
    "\\cdot",
    "\\infty",
    "\\text{",
    "$",
    "\\\\",
    "__import__",
    "os.system('touch /tmp/x')",
    "lambda",
    ":",
    "'",
    '"',
    "%",
    "1e999999999",
    "9.9E99999",
    ".n(",
    "99999999)",
    ".evalf(",
    "x.expand()",
    "E",
    "j",
    "0x1F",
    "<think>",
    "</think>",
    "(a+b+c+d+e+f)",
    "^{64}",
    "^{9999}",
    "9" * 60,
]
REFERENCES = ["1", "\\frac{1}{2}", "x^2", "(1, 2)", "9999^{9999}", "(f+e+d+c+b+a)^{64}"]


def _tower(parts):
    body = str(parts[0])
    for n in parts[1:]:
        body = f"({body})^{{{n}}}"
    return body


ANSWER = st.one_of(
    st.lists(st.sampled_from(LATEX_TOKENS), max_size=60).map("".join),  # token soup
    st.lists(st.sampled_from([2, 9, 99, 9999, 10**6, "x", "1.5e9"]), min_size=2, max_size=7).map(_tower),
    st.tuples(st.integers(1, 10**6), st.integers(1, 4)).map(lambda t: f"{t[0]}{'!' * t[1]}"),
    st.integers(1, 70_000).map(lambda n: "9" * n),
    st.tuples(
        st.sampled_from(["\\frac{1}{", "\\sqrt{", "{", "(", "\\sqrt[3]{"]), st.integers(1, 3000), st.integers(-2, 2)
    ).map(lambda t: t[0] * t[1] + "7" + "}" * max(0, t[1] + t[2])),
    st.tuples(st.sampled_from(["1", "9.99", ".5"]), st.integers(-(10**10), 10**10)).map(lambda t: f"{t[0]}e{t[1]}"),
    st.tuples(st.lists(st.sampled_from("abcdefxyz"), min_size=1, max_size=8, unique=True), st.integers(0, 80)).map(
        lambda t: f"({'+'.join(t[0])})^{{{t[1]}}}"
    ),
    st.tuples(st.integers(1, 7000), st.integers(0, 99)).map(lambda t: f"\\sqrt{{2^{{{t[0]}}}+{t[1]}}}"),
    st.tuples(
        st.sampled_from(["<think>", "</think>", "<think><think>x</think>"]), st.integers(1, 9000), st.booleans()
    ).map(lambda t: t[0] * t[1] + ("\\boxed{1}" if t[2] else "")),
)


@pytest.mark.slow
@settings(
    max_examples=200,  # 1,000 took 2.5 min of CI; every strategy above still gets ~25 draws
    deadline=int(ANSWER_BUDGET_S * 1000),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ANSWER, st.booleans(), st.sampled_from(REFERENCES))
def test_fuzz_math_reward_terminates_in_range(answer, boxed, reference):
    completion = f"\\boxed{{{answer}}}" if boxed else answer
    t0 = time.perf_counter()
    r = rewards.task_reward("math", completion, [reference])
    assert time.perf_counter() - t0 < ANSWER_BUDGET_S
    assert r in (0.0, 2.0)
    extracted = rewards.extract_math_answer(completion)
    assert extracted is None or isinstance(extracted, str)
    assert isinstance(rewards.math_equiv(answer, reference), bool)
    assert set(rewards.math_fallbacks()) <= set(rewards.FALLBACK_REASONS)


def test_parse_expr_never_sees_code(tmp_path):
    marker = tmp_path / "pwned"
    for payload in (
        f"__import__('pathlib').Path('{marker}').touch()",
        f"\\boxed{{__import__('os').system('touch {marker}')}}",
    ):
        assert rewards.task_reward("math", payload, ["1"]) == 0.0
    assert not marker.exists()
