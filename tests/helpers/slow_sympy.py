"""A grading-worker target for tests (``sympy_worker.Worker(target="tests.helpers.slow_sympy")``):
``sympy_check``'s, except that a comparison whose first answer contains the letter z never
ends, a stand-in for a sympy computation that slips past every static guard."""

from gcpo_analysis.rewards.math import sympy_check

warm = sympy_check.warm


def handle(request):
    if request[0] in ("equiv", "verify") and "z" in request[1]:
        while True:
            pass
    return sympy_check.handle(request)
