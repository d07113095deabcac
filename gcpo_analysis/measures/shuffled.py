"""The permuted controls of a group-level modulator, and the arm names of a comparison.

``<modulator>:shuffled`` keeps each step's weights ω but permutes them across that step's groups,
so the arm has the same distribution of ω, step by step, and no link between a group and its own
ω. If ``bot_rd`` beats GRPO but not ``bot_rd:shuffled``, what helps is the reweighting's size, not
the measure's information about the group.

A plain permutation of k groups leaves each group its own ω with probability 1/k (about 31% of
the eligible groups of a step of 4 groups keep theirs), which weakens the control.
``<modulator>:deranged`` draws a *derangement* instead: a permutation with no fixed point,
uniform over all derangements (uniform permutations drawn until one has no fixed point; the
expected number of draws is about e). Where at least two groups are eligible, no group keeps
its own ω.

Only groups with unequal rewards take part (the others have A = 0: an ω on them changes
nothing, and moving one there would drop it from the step). Ã_k = ω_{π(k)} · A_k, with π drawn
from ``numpy.random.default_rng(seed)``; the trainer seeds it from (run seed, step), so a resumed
run draws the same permutations.

A comparison's arm may also carry a dose, ``<arm>:alpha<x>`` (``bot_rd:alpha5``): the arm trains
with ``alpha_base = x`` and everything else of the comparison's config. The dose lives in the arm's
name and in its runs' configs, not in the modulator (``parse_arm``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

SHUFFLED = ":shuffled"
DERANGED = ":deranged"
CONTROLS = (SHUFFLED, DERANGED)
_DOSE = re.compile(r":alpha(\d+(?:\.\d+)?)$")


def split_arm(name: str) -> tuple[str, bool]:
    """(the modulator, whether its weights are permuted) of a modulator name such as
    'bot_rd:shuffled' or 'bot_rd:deranged' (``control_of`` tells which permutation)."""
    for suffix in CONTROLS:
        if name.endswith(suffix):
            return name[: -len(suffix)], True
    return name, False


def control_of(name: str) -> str:
    """'shuffled', 'deranged' or '' (no permuted control) for a modulator name."""
    return next((suffix[1:] for suffix in CONTROLS if name.endswith(suffix)), "")


def parse_arm(name: str) -> tuple[str, float | None]:
    """(the modulator name a run of the arm trains with, its dose alpha_base or None) of an arm
    name: 'bot_rd:alpha5' -> ('bot_rd', 5.0), 'bot_rd:shuffled' -> ('bot_rd:shuffled', None).
    A dose is written as ``format(x, 'g')`` writes it (``alpha5``, ``alpha2.5``), so that one dose
    has one name and one folder; ``alpha05`` or ``alpha5.0`` are refused, naming the spelling. A
    dose that ``format(x, 'g')`` writes with an exponent (below 1e-4, or 1e6 and above) has no
    spelling here and is refused, as is any other ``:alpha`` that is not a last plain decimal."""
    if not isinstance(name, str):
        raise TypeError(f"an arm name is a text such as 'bot_rd:alpha5', got {name!r}")
    match = _DOSE.search(name)
    if match is None:
        if ":alpha" in name:  # else refused as "not an identifier", which says nothing of the dose
            raise ValueError(
                f"arm {name!r}: a dose is written last, as :alpha<x> with x a plain decimal (bot_rd:alpha5, "
                "bot_rd:shuffled:alpha2.5)"
            )
        return name, None
    text = match.group(1)
    alpha = float(text)
    if not np.isfinite(alpha) or "e" in format(alpha, "g"):  # alpha1e+06 would be the spelling, which no arm parses
        raise ValueError(f"arm {name!r}: a dose is written in plain decimals, from 0.0001 to below 1e6; got {alpha:g}")
    if format(alpha, "g") != text:
        raise ValueError(f"arm {name!r}: write its dose as alpha{format(alpha, 'g')}, one spelling per dose")
    modulator = name[: match.start()]
    if split_arm(modulator)[0] == "none":
        raise ValueError(f"arm {name!r}: plain GRPO ('none') has no weight, so a dose alpha_base changes nothing")
    return modulator, alpha


def check_arm_name(name: Any) -> str:
    """``name`` if it is a modulator name (an identifier, ``registry.check_name``), optionally with
    a ``:shuffled`` or ``:deranged`` suffix (not of ``none``, whose ω is 1 in every group) and then
    an ``:alpha<x>`` dose, else the ValueError naming it; whether the modulator exists is the
    config's check. An arm names a folder, so a path is refused as a path."""
    from gcpo_analysis.registry import check_name

    if isinstance(name, str):
        modulator, permuted = split_arm(parse_arm(name)[0])
        check_name("modulator", modulator)
        if permuted and modulator == "none":  # as none:alpha5: an arm that trains plain GRPO under another name
            raise ValueError(f"arm {name!r}: plain GRPO ('none') weighs every group 1, so a permuted control is GRPO")
        return name
    return check_name("modulator", name)


def arm_folder_name(name: str) -> str:
    """The folder name of an arm: every ':' becomes '-' (``bot_rd:shuffled`` -> ``bot_rd-shuffled``,
    ``bot_rd:alpha5`` -> ``bot_rd-alpha5``). A ':' is not allowed in a Windows path (git refuses to
    check such a file out), and an identifier has no '-', so the name maps back one to one
    (``arm_of_folder``)."""
    return check_arm_name(name).replace(":", "-")


def arm_of_folder(folder_name: str) -> str:
    """The arm whose folder is named ``folder_name`` (``arm_folder_name``'s inverse)."""
    return folder_name.replace("-", ":")


def shuffled_names(modulators: Any) -> list[str]:
    """'<name>:shuffled' for every group-level modulator of a registry (``MODULATORS``) but none."""
    return [f"{name}{SHUFFLED}" for name, m in modulators.items() if m.weight is not None and name != "none"]


def deranged_names(modulators: Any) -> list[str]:
    """'<name>:deranged' for every group-level modulator of a registry but none."""
    return [name[: -len(SHUFFLED)] + DERANGED for name in shuffled_names(modulators)]


def derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly drawn permutation of range(n) with no fixed point (n >= 2): uniform permutations
    drawn until one has none, which is uniform over the derangements. n < 2 has none to draw:
    the identity is returned (a single group has no other group to take a weight from)."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"a derangement's size is an integer >= 0, got {n!r}")
    if n < 2:
        return np.arange(n)
    while True:
        perm = rng.permutation(n)
        if np.all(perm != np.arange(n)):
            return perm


def shuffle_weights(weights: Any, eligible: Any, seed: int, derange: bool = False) -> np.ndarray:
    """``weights`` with the entries where ``eligible`` is True permuted among themselves
    (``default_rng(seed).permutation``, or a ``derangement`` with ``derange``); the others unchanged."""
    w = np.asarray(weights, dtype=np.float64).copy()
    if w.ndim != 1 or len(eligible) != w.size:
        raise ValueError(f"weights and eligible must be 1-d of one length, got {w.shape} and {len(eligible)}")
    mask = np.asarray(eligible)
    if mask.dtype != bool:  # indices [0, 2] read as a mask would permute other groups than meant
        raise ValueError(f"eligible must be one True/False per group, got {mask.dtype} values {mask.tolist()[:5]}")
    idx = np.flatnonzero(mask)
    rng = np.random.default_rng(seed)
    w[idx] = w[idx[derangement(idx.size, rng)]] if derange else w[rng.permutation(idx)]
    return w
