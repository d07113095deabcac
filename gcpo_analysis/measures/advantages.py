"""GRPO and GCPO advantages (paper Section 2.1 and Section 3.4).

A_i = (r_i - mean r) / (std r + eps), std the population standard deviation of the group
(sigma_R in the paper's Eq. 1). GCPO rescales every advantage of a group by one query-level
weight: A~_i = A_i * omega_geo(q) * omega_RD(q), omega_geo in {omega_CD, omega_BoT}.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import ArrayLike

from ..knob import check_value
from ..vocab import EPS  # noqa: F401  (re-exported: the name modulators and trainers import)
from .dispersion import (
    ALPHA_BASE,
    R_MAX,
    R_MIN,
    as_rewards,
    barycentric_transport,
    check_finite_rewards,
    cosine_dispersion,
    geometry_weight,
    rd_weight,
    reward_array,
    reward_dispersion,
)
from .params import MEASURE_KNOBS

# the formula takes eps = 0 (the exact standardisation; equal rewards still give 0), where the
# configs ask eps > 0; negative or non-finite eps is refused by both
_EPS = dataclasses.replace(MEASURE_KNOBS["eps"], gt=None, ge=0)


def grpo_advantages(rewards: ArrayLike, eps: float = EPS) -> np.ndarray:
    """GRPO advantages A_i = (r_i - mean r) / (std r + eps) (Section 2.1, Eq. 1).

    std is the population standard deviation (ddof = 0), as sigma_R of the group. A group whose
    rewards are all equal (including G = 1) has A = 0 exactly, never NaN.
    """
    eps = check_value("eps", eps, _EPS, float)
    r = reward_array(rewards)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rewards must be a non-empty 1-d array, got shape {r.shape}")
    check_finite_rewards(r)
    with np.errstate(over="ignore", invalid="ignore"):
        centred = r - r.mean()
        std = r.std()
    _check_overflow(centred, std)
    if std == 0.0 or np.all(np.abs(centred) <= 1e-12 * max(1.0, np.abs(r).max())):
        return np.zeros_like(r)
    return centred / (std + eps)


def _check_overflow(centred: np.ndarray, std: np.ndarray | np.floating) -> None:
    """Finite rewards whose mean or spread overflows float64 (|r| near 1e308) are refused: the
    advantages would be NaN, not a number."""
    if not (np.isfinite(centred).all() and np.isfinite(std).all()):
        raise ValueError("rewards too large: their mean or standard deviation overflows float64 (rescale the rewards)")


def grpo_advantages_batch(rewards: ArrayLike, eps: float = EPS) -> np.ndarray:
    """GRPO advantages for N groups of equal size: rewards (N, G) -> (N, G)."""
    eps = check_value("eps", eps, _EPS, float)
    r = reward_array(rewards)
    if r.ndim != 2:
        raise ValueError(f"rewards must have shape (N, G), got {r.shape}")
    check_finite_rewards(r)
    with np.errstate(over="ignore", invalid="ignore"):
        centred = r - r.mean(axis=1, keepdims=True)
        std = r.std(axis=1, keepdims=True)
    _check_overflow(centred, std)
    out = centred / (std + eps)
    out[np.broadcast_to(std == 0.0, out.shape)] = 0.0
    return out


def gcpo_weight(
    rewards: ArrayLike,
    embeddings: ArrayLike,
    clusters: ArrayLike | None = None,
    geometry: str = "bot",
    use_rd: bool = True,
    alpha_base: float = ALPHA_BASE,
    r_min: float = R_MIN,
    r_max: float = R_MAX,
) -> tuple[float, dict[str, float]]:
    """The query-level GCPO weight omega_geo(q) * omega_RD(q) and the measures behind it.

    geometry 'cd' uses Cosine Dispersion (no clusters needed); 'bot' needs cluster labels.
    Returns (weight, info) with info = {geometry: u, 'w_'+geometry: omega_geo, 'rd', 'w_rd'}.
    """
    if not isinstance(use_rd, (bool, np.bool_)):
        raise ValueError(f"use_rd must be True or False, got {use_rd!r}")
    r = as_rewards(rewards, r_min, r_max, batch=False)
    G = len(r)
    e = np.asarray(embeddings)
    if e.ndim != 2 or e.shape[0] != G:
        raise ValueError(f"embeddings have shape {e.shape} but there are {G} rewards: one embedding per rollout")
    if geometry == "cd":
        u = cosine_dispersion(e)
    elif geometry == "bot":
        if clusters is None:
            raise ValueError("geometry='bot' needs cluster labels (clusters=...)")
        u = barycentric_transport(e, clusters)
    else:
        raise ValueError(f"unknown geometry {geometry!r}; expected 'cd' or 'bot'")
    w_geo = float(geometry_weight(u, G, alpha_base))  # a scalar u gives a float
    info = {geometry: u, f"w_{geometry}": w_geo}
    weight = w_geo
    if use_rd:
        rd = reward_dispersion(r, r_min, r_max)
        info.update(rd=rd, w_rd=float(rd_weight(rd, G, alpha_base)))
        weight *= info["w_rd"]
    return weight, info


def gcpo_advantages(
    rewards: ArrayLike,
    embeddings: ArrayLike,
    clusters: ArrayLike | None = None,
    geometry: str = "bot",
    use_rd: bool = True,
    alpha_base: float = ALPHA_BASE,
    r_min: float = R_MIN,
    r_max: float = R_MAX,
    eps: float = EPS,
) -> np.ndarray:
    """GCPO advantages A~_i = A_i * omega_geo(q) * omega_RD(q) (Section 3.4).

    omega_geo = clip(1 - alpha_G u^2, 0, 1) with u = CD or BoT; omega_RD = 1 + alpha_G RD
    (omitted when use_rd=False); alpha_G = alpha_base / ln G.
    """
    weight, _ = gcpo_weight(rewards, embeddings, clusters, geometry, use_rd, alpha_base, r_min, r_max)
    return grpo_advantages(rewards, eps) * weight
