"""Equivalence of math answers (Appendix E): ``grading`` (math_equiv, fallbacks), ``normalize``
(the string clean-up before a comparison), ``syntax`` (the static guard that keeps hostile
expressions out of sympy), ``sympy_worker`` (a time-limited subprocess that runs sympy and
math-verify) and ``sympy_check``, its entry."""
