"""Group weights the field uses, as modulators: GRPO's std scaling, Dr. GRPO's removal of it, and
inverse gradient-size and inverse-variance weighting (registered beside the paper's in
``modulators.MODULATORS``; the update-alignment study scores them like the others).

The convention they are read against: gcpo's advantages are GRPO's, A_i = (r_i − r̄)/(σ_r + eps)
(``advantages.grpo_advantages``; σ_r the population std of the group's rewards), and a group-level
modulator multiplies them by ω(q). So

* ``reward_std``: ω = (σ_r + eps)/σ_max turns A_i into (r_i − r̄)/σ_max: **Dr. GRPO**'s unscaled
  advantage (Liu et al. 2025, arXiv:2503.20783), up to the constant σ_max = (r_max − r_min)/2, the
  largest std rewards on [r_min, r_max] can have. ``none`` against ``reward_std`` is GRPO against
  Dr. GRPO: the effect of GRPO's std scaling;
* ``inv_reward_std``: ω = σ_max/(σ_r + eps), GRPO's 1/σ scaling as a weight, applied once more on
  top of gcpo's standardised advantages (the same direction, continued: ``inv_reward_std`` is to
  ``none`` what ``none`` is to ``reward_std``);
* ``inv_grad_norm``: ω = 1/‖g_q‖, every group's gradient normalised (the group's ĝ_q enters the
  update as a unit vector);
* ``inv_variance``: ω = V(q)^−γ with γ = 1, V(q) = ‖g_q‖², the plug-in variance of the group's
  gradient (E‖g_q‖² = ‖E g_q‖² + tr Var g_q, and the signal is small beside the noise: the
  study's groups have cosines of about 0.1 with the mean). γ = 1/2 is ``inv_grad_norm``.

A group whose rewards are all equal has A = 0 and no gradient: its ω is set to 1 (it moves
nothing). ‖g_q‖ is the norm of the group's own gradient, which the update-alignment study has
(the Gram's diagonal, ``grad_norm2`` in its groups frame) and the trainer does not: the loop
backpropagates the batch's loss once, so ‖g_q‖ would cost one more backward pass per group (G
rollouts' forward and backward again, about doubling a step). The trainer refuses these two
modulators, naming the missing feature (``trainer_refusal``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..vocab import EPS
from .dispersion import R_MAX, R_MIN, as_rewards

GRAD_NORM2 = "grad_norm2"
# features the trainer cannot supply, with what they would cost (``trainer_refusal``)
TRAINER_MISSING = {
    GRAD_NORM2: "the squared norm of each group's own gradient, ‖g_q‖², which the trainer does not compute "
    "(its loop backpropagates the batch's loss once; each group's gradient would cost one more backward "
    "pass per group, about doubling a step); the update-alignment study (gcpo align) supplies it",
}


def sigma_max(r_min: float = R_MIN, r_max: float = R_MAX) -> float:
    """The largest population std of rewards on [r_min, r_max]: (r_max − r_min)/2."""
    lo, hi = float(r_min), float(r_max)
    if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):  # else ω came out inf or negative
        raise ValueError(f"reward range must have finite r_max > r_min, got [{r_min}, {r_max}]")
    return (hi - lo) / 2.0


def _spreads(spread: ArrayLike) -> np.ndarray:
    """σ_r as floats, each finite and >= 0 (a NaN or a negative std was weighted 1 as if its rewards were equal)."""
    s = np.asarray(spread, float)
    bad = ~np.isfinite(s) | (s < 0)
    if bad.any():
        raise ValueError(f"reward_spread must be finite and >= 0 (a std), got {s[bad]}")
    return s


def reward_std_weight(spread: ArrayLike, eps: float = EPS, r_min: float = R_MIN, r_max: float = R_MAX) -> np.ndarray:
    """ω = (σ_r + eps)/σ_max (Dr. GRPO's unscaled advantages on gcpo's GRPO ones); 1 where σ_r = 0."""
    s = _spreads(spread)
    return np.where(s > 0, (s + eps) / sigma_max(r_min, r_max), 1.0)


def inv_reward_std_weight(
    spread: ArrayLike, eps: float = EPS, r_min: float = R_MIN, r_max: float = R_MAX
) -> np.ndarray:
    """ω = σ_max/(σ_r + eps) (GRPO's std scaling as a weight); 1 where σ_r = 0."""
    s = _spreads(spread)
    return np.where(s > 0, sigma_max(r_min, r_max) / (s + eps), 1.0)


def inv_variance_weight(grad_norm2: ArrayLike, gamma: float = 1.0) -> np.ndarray:
    """ω = V^−γ with V = ‖g_q‖²; 1 where V = 0 (a group with no gradient). γ = 1/2: 1/‖g_q‖."""
    v = np.asarray(grad_norm2, float)
    if (v < 0).any() or not np.isfinite(v).all():
        raise ValueError(f"{GRAD_NORM2} must be finite and >= 0 (a squared norm), got {v[(v < 0) | ~np.isfinite(v)]}")
    if isinstance(gamma, (bool, str)) or not (np.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    with np.errstate(over="ignore"):
        w = np.where(v > 0, np.power(np.where(v > 0, v, 1.0), -float(gamma)), 1.0)
    if not np.isfinite(w).all():  # a subnormal V (1e-320) overflowed to ω = inf
        raise ValueError(f"ω = {GRAD_NORM2}^-{gamma:g} overflows for {GRAD_NORM2} = {v[~np.isfinite(w)]}")
    return w


def frame_weights(spread: ArrayLike, grad_norm2: ArrayLike, r_min: float, r_max: float) -> dict[str, np.ndarray]:
    """Every field weighting of a frame's groups (the study's adapter: ``reward_spread`` and
    ``grad_norm2`` columns), named as the modulators; the two of one length."""
    if np.shape(spread) != np.shape(grad_norm2):  # else the weightings described different groups
        raise ValueError(
            f"reward_spread and {GRAD_NORM2} must have one shape, got {np.shape(spread)} and {np.shape(grad_norm2)}"
        )
    return {
        "reward_std": reward_std_weight(spread, EPS, r_min, r_max),
        "inv_reward_std": inv_reward_std_weight(spread, EPS, r_min, r_max),
        "inv_grad_norm": inv_variance_weight(grad_norm2, 0.5),
        "inv_variance": inv_variance_weight(grad_norm2, 1.0),
    }


def _grad_norm2(g: Any, name: str, r_min: float, r_max: float) -> float:
    """‖g_q‖² of the group; 0 where its rewards are all equal (A = 0: no gradient, ω = 1). The
    rewards are checked as the other modulators check them (``as_rewards``: none, a NaN or one
    outside [r_min, r_max] is refused); ‖g_q‖² must be a number, never a bool or a text."""
    if np.ptp(as_rewards(g.rewards, r_min, r_max, batch=False)) == 0:
        return 0.0
    value = getattr(g, GRAD_NORM2, None)
    if value is None:
        raise ValueError(f"modulator {name!r} needs {GRAD_NORM2!r}: {TRAINER_MISSING[GRAD_NORM2]}")
    if isinstance(value, (bool, np.bool_, str, bytes)):  # float() made True a 1 and "4" a 4
        raise ValueError(f"modulator {name!r}: {GRAD_NORM2} must be a number, got {value!r}")
    return float(value)


def trainer_refusal(name: str, needs: frozenset[str]) -> str | None:
    """Why the trainer cannot run the modulator ``name`` (a feature it needs that the trainer does
    not compute), or None."""
    missing = sorted(needs & set(TRAINER_MISSING))
    if not missing:
        return None
    return f"modulator {name!r} needs {', '.join(missing)}: " + "; ".join(TRAINER_MISSING[m] for m in missing)


def dr_grpo_weight(g: Any, *, r_min: float = R_MIN, r_max: float = R_MAX, **_: Any) -> tuple[float, dict]:
    """Dr. GRPO's advantages r_i − r̄ (over σ_max) from gcpo's GRPO ones: ω = (σ_r + eps)/σ_max."""
    r = as_rewards(g.rewards, r_min, r_max, batch=False)
    w = float(reward_std_weight(r.std(), EPS, r_min, r_max))
    return w, {"reward_std": float(r.std()), "w_reward_std": w}


def inv_reward_std(g: Any, *, r_min: float = R_MIN, r_max: float = R_MAX, **_: Any) -> tuple[float, dict]:
    """GRPO's 1/σ scaling as a group weight, on top of gcpo's GRPO advantages: ω = σ_max/(σ_r + eps)."""
    r = as_rewards(g.rewards, r_min, r_max, batch=False)
    w = float(inv_reward_std_weight(r.std(), EPS, r_min, r_max))
    return w, {"reward_std": float(r.std()), "w_inv_reward_std": w}


def inv_grad_norm(g: Any, *, r_min: float = R_MIN, r_max: float = R_MAX, **_: Any) -> tuple[float, dict]:
    """Each group's gradient normalised: ω = 1/‖g_q‖ (1 for a group with no gradient)."""
    v = _grad_norm2(g, "inv_grad_norm", r_min, r_max)
    w = float(inv_variance_weight(v, 0.5))
    return w, {GRAD_NORM2: v, "w_inv_grad_norm": w}


def inv_variance(g: Any, *, r_min: float = R_MIN, r_max: float = R_MAX, **_: Any) -> tuple[float, dict]:
    """Inverse-variance weighting ω = 1/V(q), V(q) = ‖g_q‖² (module docstring; 1 with no gradient)."""
    v = _grad_norm2(g, "inv_variance", r_min, r_max)
    w = float(inv_variance_weight(v, 1.0))
    return w, {GRAD_NORM2: v, "w_inv_variance": w}


def register(register_modulator: Any) -> None:
    """Register the field's weightings with ``modulators.register_modulator`` (called there, so
    that this module does not import the registry that imports it)."""
    register_modulator("reward_std", source="Dr. GRPO (Liu et al. 2025)")(dr_grpo_weight)
    register_modulator("inv_reward_std", source="GRPO's std scaling (Shao et al. 2024) as a weight")(inv_reward_std)
    register_modulator("inv_grad_norm", needs={GRAD_NORM2}, source="per-group gradient normalisation")(inv_grad_norm)
    register_modulator("inv_variance", needs={GRAD_NORM2}, source="inverse-variance weighting")(inv_variance)
