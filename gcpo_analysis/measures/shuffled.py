"""The shuffled control of a group-level modulator (issue 35): ``<modulator>:shuffled`` keeps each
step's weights ω but permutes them across that step's groups, so the arm has the same
distribution of ω, step by step, and no link between a group and its own ω. If ``bot_rd`` beats
GRPO but not ``bot_rd:shuffled``, what helps is the reweighting's size, not the measure's
information about the group.

Only groups with unequal rewards take part (the others have A = 0: an ω on them changes
nothing, and moving one there would drop it from the step). Ã_k = ω_{π(k)} · A_k, with π a
permutation of the step's eligible groups drawn from ``numpy.random.default_rng(seed)``; the
trainer seeds it from (run seed, step), so a resumed run draws the same permutations.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHUFFLED = ":shuffled"


def split_arm(name: str) -> tuple[str, bool]:
    """(the modulator, whether its weights are shuffled) of an arm name such as 'bot_rd:shuffled'."""
    if name.endswith(SHUFFLED):
        return name[: -len(SHUFFLED)], True
    return name, False


def check_arm_name(name: Any) -> str:
    """``name`` if it is a modulator name (an identifier, ``registry.check_name``) or one with the
    ``:shuffled`` suffix, else the ValueError naming it; whether the modulator exists is the config's
    check. An arm names a folder, so a path is refused as a path."""
    from gcpo_analysis.registry import check_name

    if isinstance(name, str):
        check_name("modulator", split_arm(name)[0])
        return name
    return check_name("modulator", name)


def arm_folder_name(name: str) -> str:
    """The folder name of an arm: ``bot_rd:shuffled`` -> ``bot_rd-shuffled``. A ':' is not allowed
    in a Windows path (git refuses to check such a file out), and an identifier has no '-', so the
    name maps back one to one (``arm_of_folder``)."""
    modulator, shuffled = split_arm(check_arm_name(name))
    return f"{modulator}-shuffled" if shuffled else modulator


def arm_of_folder(folder_name: str) -> str:
    """The arm whose folder is named ``folder_name`` (``arm_folder_name``'s inverse)."""
    return folder_name[: -len("-shuffled")] + SHUFFLED if folder_name.endswith("-shuffled") else folder_name


def shuffled_names(modulators: Any) -> list[str]:
    """'<name>:shuffled' for every group-level modulator of a registry (``MODULATORS``) but none."""
    return [f"{name}{SHUFFLED}" for name, m in modulators.items() if m.weight is not None and name != "none"]


def shuffle_weights(weights: Any, eligible: Any, seed: int) -> np.ndarray:
    """``weights`` with the entries where ``eligible`` is True permuted among themselves
    (``default_rng(seed).permutation``); the others unchanged."""
    w = np.asarray(weights, dtype=np.float64).copy()
    if w.ndim != 1 or len(eligible) != w.size:
        raise ValueError(f"weights and eligible must be 1-d of one length, got {w.shape} and {len(eligible)}")
    idx = np.flatnonzero(np.asarray(eligible, dtype=bool))
    w[idx] = w[np.random.default_rng(seed).permutation(idx)]
    return w
