"""Math-answer equality with a stated relative tolerance, tested on tiny and huge numbers,
scientific notation and powers of ten; token F1 after Unicode NFKC."""

import warnings

import pytest

from gcpo_analysis.rewards import math_equiv, token_f1
from gcpo_analysis.rewards.math import grading


@pytest.mark.parametrize(
    "a, b, equal",
    [
        ("0.0000001", "0", False),  # was equal: an absolute 1e-6 floor
        ("1e-7", "0", False),
        ("10^{-7}", "0", False),
        ("0.000001", "0.0000011", False),  # 10% apart, was equal
        ("1e-30", "2e-30", False),
        ("1.5e-30", "0.0000000000000000000000000000015", True),
        ("1e20", "1.0000000001e20", True),  # relative 1e-10
        ("1e20", "1.1e20", False),
        ("123456789012345678901234567890", "123456789012345678901234567891", False),  # integers: exact
        ("2.5\\times10^{3}", "2500", True),
        ("2.5 \\times 10^{3}", "2500.1", False),
        ("3\\cdot10^5", "300000", True),
        ("1E5", "100000", True),
        ("10^{-7}", "1e-7", True),
        ("0.333333", "\\frac{1}{3}", True),  # within 1e-6 relative
        ("0.33333", "\\frac{1}{3}", False),
        ("0", "0.0", True),
        ("-1e-7", "1e-7", False),
    ],
)
def test_numbers_compare_with_a_relative_tolerance(a, b, equal):
    assert math_equiv(a, b) is equal
    assert math_equiv(b, a) is equal


def test_the_tolerance_is_the_stated_one():
    tol = float(grading.MATH_REL_TOL)
    assert tol == 1e-6
    x = 123.456
    assert math_equiv(f"{x}", f"{x * (1 + 0.5 * tol):.12f}")
    assert not math_equiv(f"{x}", f"{x * (1 + 2 * tol):.12f}")


def test_huge_exponents_are_not_computed():
    assert grading._number("1e999999999") is None  # 10^(10^9) is never built
    assert not math_equiv("1e999999999", "1e999999998")


@pytest.mark.parametrize(
    "pred, ref",
    [("cafe\u0301", "café"), ("ﬁsh", "fish"), ("Ｔｏｋｙｏ", "Tokyo"), ("x²", "x2")],
)
def test_token_f1_is_one_for_one_word_in_two_unicode_forms(pred, ref):
    assert token_f1(pred, [ref]) == 1.0


def test_a_missing_math_verify_is_a_warning(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "math_verify" else real(name, *a))
    grading.math_verify_missing.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="math-verify is not installed"):
            assert grading.math_verify_missing()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert grading.math_verify_missing()  # said once
    finally:
        grading.math_verify_missing.cache_clear()
