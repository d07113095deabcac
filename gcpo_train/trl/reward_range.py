"""The reward range [r_min, r_max] that RD and Q-Hawkeye normalise by, under TRL (``GCPOConfig``).

RD = clip(RD_raw / RD_max, 0, 1), RD_max(G) = (2/G) floor(G/2) ceil(G/2) (r_max - r_min)
(paper Section 3.3, Appendix E); Q-Hawkeye's Var_max reads the same range. TRL users' rewards
often have no known range (a reward model scores any real number, a length reward grows with
the text), so ``GCPOTrainer`` takes the range from the first of:

1. ``r_min``/``r_max`` stated in the config (either one; the other keeps its paper default 0 or 2):
   a fixed range, and a reward outside it is refused (as ``gcpo_train``'s own loop does);
2. ``reward_range="running"``: the running range, the min and max of every reward of the run so
   far, this step's included (``RunningRange``), logged as ``gcpo/r_min`` and ``gcpo/r_max``;
3. the reward functions' declared bounds: each function carries ``reward_bounds = (low, high)``
   and TRL's reward is sum_j w_j r_j (``reward_weights``), so the range is
   [sum_j min(w_j low_j, w_j high_j), sum_j max(w_j low_j, w_j high_j)] (``declared_range``).

A modulator that reads the range (``RANGE_MODULATORS``) with none of the three is refused when the
trainer is built, naming the options; the other modulators never read it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# the registered modulators whose weight reads [r_min, r_max] (RD's RD_max, Q-Hawkeye's Var_max)
RANGE_MODULATORS = frozenset({"rd", "cd_rd", "bot_rd", "q_hawkeye"})

REWARD_RANGES = ("declared", "running")


def reward_bounds(func) -> tuple[float, float] | None:
    """A reward function's declared ``reward_bounds = (low, high)``, checked; None when it
    declares none (a reward model, a model id, a plain function)."""
    bounds = getattr(func, "reward_bounds", None)
    if bounds is None:
        return None
    name = getattr(func, "__name__", type(func).__name__)
    try:
        low, high = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"reward function {name!r}: reward_bounds must be (low, high), got {bounds!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise ValueError(f"reward function {name!r}: reward_bounds must be finite with high > low, got {bounds!r}")
    return low, high


def declared_range(reward_funcs: Sequence, weights: Sequence[float] | None) -> tuple[float, float] | None:
    """[r_min, r_max] of TRL's weighted reward sum_j w_j r_j when every reward function declares
    ``reward_bounds``; None when one does not (its name is in ``undeclared``)."""
    weights = [1.0] * len(reward_funcs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(reward_funcs):
        return None  # range_source refuses this mismatch first, with TRL's message
    bounds = [reward_bounds(f) for f in reward_funcs]
    if any(b is None for b in bounds):
        return None
    low = sum(min(w * lo, w * hi) for w, (lo, hi) in zip(weights, bounds))  # type: ignore[misc]
    high = sum(max(w * lo, w * hi) for w, (lo, hi) in zip(weights, bounds))  # type: ignore[misc]
    if not high > low:  # every weight 0: nothing to normalise by
        return None
    return float(low), float(high)


def undeclared(reward_funcs: Sequence) -> list[str]:
    """The names of the reward functions that declare no ``reward_bounds``."""
    out = []
    for f in reward_funcs:
        if reward_bounds(f) is None:
            out.append(f if isinstance(f, str) else getattr(f, "__name__", type(f).__name__))
    return out


class RunningRange:
    """The min and max of every finite reward seen so far (the gathered batch of each step).
    Until two different rewards have been seen the range has width 1 around them; RD and the
    reward variance are then 0 whatever the width."""

    def __init__(self) -> None:
        self.low = math.inf
        self.high = -math.inf

    def update(self, rewards) -> tuple[float, float]:
        r = np.asarray(rewards, dtype=np.float64)
        r = r[np.isfinite(r)]
        if r.size:
            self.low = min(self.low, float(r.min()))
            self.high = max(self.high, float(r.max()))
        return self.current()

    def current(self) -> tuple[float, float]:
        if not math.isfinite(self.low):
            return 0.0, 1.0
        return (self.low, self.high) if self.high > self.low else (self.low, self.low + 1.0)


def range_source(r_min, r_max, reward_range: str, modulator: str, reward_funcs: Sequence, weights) -> tuple:
    """("fixed" | "running" | "declared" | "unused", (r_min, r_max) or None) for a trainer, or a
    ValueError naming the options when a range-reading modulator has none (see the module)."""
    from gcpo_analysis.vocab import R_MAX, R_MIN

    if weights is not None and len(weights) != len(reward_funcs):  # TRL's own refusal, before any range advice
        raise ValueError(
            f"Number of reward weights ({len(weights)}) must match number of reward functions ({len(reward_funcs)})"
        )
    if r_min is not None or r_max is not None:
        return "fixed", (R_MIN if r_min is None else float(r_min), R_MAX if r_max is None else float(r_max))
    if reward_range == "running":
        return "running", None
    if modulator not in RANGE_MODULATORS:
        return "unused", None
    found = declared_range(reward_funcs, weights)
    if found is not None:
        return "declared", found
    raise ValueError(
        f"modulator {modulator!r} normalises by the reward range (RD_max, Var_max), and the reward functions "
        f"{', '.join(map(repr, undeclared(reward_funcs))) or '(all weights 0)'} declare no bounds: set "
        "reward_range='running' (the min and max of the run's rewards so far, logged as gcpo/r_min and "
        "gcpo/r_max), or r_min and r_max, or give each reward function reward_bounds = (low, high)"
    )
