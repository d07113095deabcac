"""Multiple-choice answers written as QA (``gcpo pilot choice-as-qa``): which option an answer
copies, and whether which option a policy copies depends on the query (``choice_dependence``),
the statistics of ``gcpo pilot choice-gate``."""

from __future__ import annotations

import numpy as np

from gcpo_analysis.rewards import normalize_answer


def options_of(question: str) -> list[str]:
    """The options that choice_as_qa.py wrote under "Options:", one "- text" per line."""
    head, sep, tail = question.rpartition("\nOptions:\n")
    if not sep:
        raise ValueError(f"question {question[:60]!r} has no 'Options:' block (not written by choice_as_qa.py)")
    return [line[2:] for line in tail.splitlines() if line.startswith("- ")]


def chosen(answer: str, options: list[str]) -> str:
    """The option (its position, from 0) that the answer copies, or 'other'."""
    norm = normalize_answer(answer or "")
    hits = [k for k, o in enumerate(options) if normalize_answer(o) == norm]
    return str(hits[0]) if hits else "other"


def ci_text(low: float, high: float) -> str:
    """A 95% interval as the gate tables print it: [+1.2, -0.3]."""
    return f"[{float(low):+.1f}, {float(high):+.1f}]"


def choice_dependence(option_f1: np.ndarray, picked: np.ndarray, n_resamples: int = 10_000) -> dict:
    """Whether WHICH option a policy copies depends on the query: its score minus that of a policy
    that copies option k as often as it does (p̂_k) but independently of the query (and answers
    as it does where it copies none),

        Δ = Σ_k mean(1[picks k] · F1_k) − p̂_k · mean(F1_k) = Σ_k cov(1[picks k], F1_k),

    0 in expectation for a policy that reads nothing, however skewed its positions. option_f1
    (n, K): each query's F1 of option k; picked (n, K): 1 where the answer copies option k. 95%
    percentile bootstrap CI over queries, p̂ re-estimated in each resample (scipy.stats.bootstrap,
    paired). Hand-written: no library scores a choice against its own position marginal."""
    from scipy.stats import bootstrap

    def dependence(f1, on, axis=-1):  # (K, [resamples,] n) -> ([resamples]): Σ_k of the covariance over queries
        return ((on * f1).mean(axis) - on.mean(axis) * f1.mean(axis)).sum(0)

    f1, on = option_f1.T.astype(float), picked.T.astype(float)
    d = float(dependence(f1, on))
    if (on == on[:, :1]).all() or (f1 == f1[:, :1]).all():  # one pick (or none) everywhere: Δ = 0 in every resample
        return {"Δ vs own positions": d, "CI own": ci_text(d, d)}
    res = bootstrap(
        (f1, on),
        dependence,
        paired=True,
        vectorized=True,
        axis=-1,
        confidence_level=0.95,
        n_resamples=n_resamples,
        method="percentile",
        random_state=np.random.default_rng(0),
    )
    return {"Δ vs own positions": d, "CI own": ci_text(res.confidence_interval.low, res.confidence_interval.high)}
