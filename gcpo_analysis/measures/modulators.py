"""Advantage modulators: GRPO, GCPO and every baseline, as one registry (Tables 1, 2, 5).

Each baseline is reinterpreted as a plug-in modulation of the same GRPO update, as Appendix E
and F of the paper describe; where the baseline's own paper defines the formula we follow it
and cite it. The trainer calls only ``modulate(name, group)``: it has no formula of its own.

Every modulator returns (advantages (G,), info) where ``info`` holds the measures and weights it
used, named as in the groups frame (``se``, ``w_se``, ``cd``, ``w_cd``, ``rd``, ``w_rd``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..vocab import CLUSTERS, EMBEDDINGS
from .advantages import EPS, gcpo_weight, grpo_advantages
from .dispersion import ALPHA_BASE, R_MAX, R_MIN, alpha_g, as_rewards, check_alpha_base, rd_weight, reward_dispersion


@dataclass
class GroupFeatures:
    """One query's group of G rollouts as a measure or modulator sees it: the rewards and the
    per-rollout features (embeddings, clusters, entropies, log-probs). Old name ``GroupRollouts``
    (deprecated, removed in 0.3.0)."""

    rewards: np.ndarray
    embeddings: np.ndarray | None = None  # (G, d), answer (QA) or completion (math) embeddings
    clusters: np.ndarray | None = None  # (G,) semantic cluster labels
    token_entropy: np.ndarray | None = None  # (G,) mean per-token entropy of each rollout
    logprobs: np.ndarray | None = None  # (G,) sum of token log-probabilities
    ratio_var: np.ndarray | None = None  # (G,) Var_t of the per-token policy ratio rho_{i,t}
    answers: list[str] | None = None
    n_tokens: np.ndarray | None = None  # (G,) completion lengths: SE weights use logprobs / n_tokens

    def require(self, field: str, modulator: str) -> np.ndarray:
        value = getattr(self, field)
        if value is None:
            raise ValueError(f"modulator {modulator!r} needs {field!r}, which this group lacks")
        arr = np.asarray(value)
        if len(arr) != len(self.rewards):
            raise ValueError(f"{field!r} has {len(arr)} entries but the group has {len(self.rewards)} rollouts")
        return arr


@dataclass(frozen=True)
class Modulator:
    name: str
    needs: frozenset
    fn: Callable
    source: str

    def __call__(self, group: GroupFeatures, **params):
        return self.fn(group, **params)


def _entropy_scaled(A, u: float, u_max: float, alpha: float) -> np.ndarray:
    # Seed-GRPO's linear f(x) = 1 - x on x = alpha * u / u_max; clipped so the sign never flips.
    x = 0.0 if u_max <= 0 else alpha * u / u_max
    return A * max(0.0, 1.0 - x)


def se_logweights(logprobs, n_tokens=None):
    """Log-weights of the likelihood-weighted semantic entropy.

    With ``n_tokens`` the mean token log-probability logprob_i / n_i, as Kuhn et al.'s and
    Farquhar et al.'s released code do: the unnormalised sequence likelihood puts nearly all
    mass on one sampled rollout (exp of sums over ~20 tokens differ by orders of magnitude),
    which collapses SE towards 0 whatever the clusters. Without lengths, the sums are used.
    """
    if logprobs is None:
        return None
    lp = np.asarray(logprobs, dtype=np.float64)
    if n_tokens is None:
        return lp
    n = np.asarray(n_tokens, dtype=np.float64)
    if n.shape != lp.shape or (n <= 0).any():
        raise ValueError(f"n_tokens must be positive and match logprobs ({lp.shape}), got {n!r}")
    return lp / n


# --------------------------------------------------------------------------- modulators
def _none(g, *, eps=EPS, **_):
    return grpo_advantages(g.rewards, eps), {}


def seed_grpo_advantages(g, *, alpha=ALPHA_BASE, eps=EPS, **_):
    """Seed-GRPO (Chen et al. 2025, arXiv:2505.12346): A^_i = A_i * f(alpha * SE(q) / SE_max),
    f(x) = 1 - x (their linear variant), SE_max = ln G. SE is likelihood-weighted when
    log-probabilities are present (length-normalised when n_tokens is given, see
    ``se_logweights``), else the empirical cluster fractions."""
    from .entropy import semantic_entropy

    clusters = g.require("clusters", "se")
    se = semantic_entropy(clusters, se_logweights(g.logprobs, g.n_tokens))
    G = len(g.rewards)
    A = grpo_advantages(g.rewards, eps)
    w = max(0.0, 1.0 - alpha * se / math.log(G)) if G > 1 else 1.0
    return A * w, {"se": se, "w_se": w}


def kle_advantages(g, *, alpha=ALPHA_BASE, eps=EPS, **_):
    """KLE weighting: Seed-GRPO's linear scaling with kernel language entropy (Nikitin et al.
    2024) in place of SE; KLE of G responses is at most ln G (a unit-trace G x G kernel)."""
    from .entropy import kernel_language_entropy

    emb = g.require("embeddings", "kle")
    G = len(g.rewards)
    kle = kernel_language_entropy(embeddings=emb) if G > 1 else 0.0
    w = max(0.0, 1.0 - alpha * kle / math.log(G)) if G > 1 else 1.0
    return grpo_advantages(g.rewards, eps) * w, {"kle": kle, "w_kle": w}


def empo_advantages(g, *, empo_low=0.0, empo_high=0.5, eps=EPS, **_):
    """EMPO (Zhang et al. 2025, arXiv:2504.05812): the reward of a response is the frequency of
    its semantic cluster, r_i = |c(i)| / G (the task reward is ignored: EMPO is unsupervised);
    advantages are GRPO-normalised; a query is kept only if its semantic entropy lies in
    [empo_low, empo_high] * ln G (EMPO's entropy thresholding), else its weight is 0."""
    from .entropy import semantic_entropy

    clusters = np.asarray(g.require("clusters", "empo"))
    G = len(clusters)
    _, labels, counts = np.unique(clusters, return_inverse=True, return_counts=True)
    freq = counts[labels] / G
    se = semantic_entropy(clusters)
    h = se / math.log(G) if G > 1 else 0.0
    keep = float(empo_low - 1e-12 <= h <= empo_high + 1e-12)
    return grpo_advantages(freq, eps) * keep, {"se": se, "w_empo": keep}


def care_advantages(g, *, alpha=ALPHA_BASE, eps=EPS, **_):
    """GRPO-CARE adaptation (Chen et al. 2025, arXiv:2506.16141; paper App. E): consistency is
    the pairwise agreement across rollouts, a(q) = sum_k n_k (n_k - 1) / (G (G - 1)), the chance
    that two distinct rollouts share a semantic cluster; w = 1 - alpha_G (1 - a(q)).
    (CARE's original bonus uses a reference model's likelihood of the answer given the
    reasoning; the paper compares against its agreement-as-confidence reading, which this is.)"""
    clusters = np.asarray(g.require("clusters", "care"))
    G = len(clusters)
    if G == 1:
        return grpo_advantages(g.rewards, eps), {"care": 1.0, "w_care": 1.0}
    _, counts = np.unique(clusters, return_counts=True)
    agreement = float((counts * (counts - 1)).sum() / (G * (G - 1)))
    w = float(np.clip(1.0 - alpha_g(G, alpha) * (1.0 - agreement), 0.0, 1.0))
    return grpo_advantages(g.rewards, eps) * w, {"care": agreement, "w_care": w}


def q_hawkeye_advantages(g, *, q_alpha=ALPHA_BASE, r_min=R_MIN, r_max=R_MAX, eps=EPS, **_):
    """Q-Hawkeye adaptation (Xie et al. 2026; paper App. F): u(q) = Var(r_1..r_G), normalised by
    its maximum over [r_min, r_max]^G, Var_max(G) = floor(G/2) ceil(G/2) / G^2 (r_max - r_min)^2;
    w(q) = 1 - alpha * Var/Var_max (linear reweighting, alpha not group-normalised)."""
    r = as_rewards(g.rewards, r_min, r_max, batch=False)
    G = len(r)
    var_max = (G // 2) * (-(-G // 2)) / G**2 * (r_max - r_min) ** 2
    u = float(r.var() / var_max) if var_max > 0 else 0.0
    w = 1.0 - q_alpha * u
    return grpo_advantages(r, eps) * w, {"reward_var": u, "w_q_hawkeye": w}


def eg_spo_advantages(g, *, eg_alpha=1.0, eps=EPS, **_):
    """EG-SPO-style response-level entropy gate (Hu et al. 2026; paper App. F, our adaptation):
    each response's mean token entropy H_i gates its own advantage,
    gate_i = exp(-eg_alpha * H_i / H_bar) / mean_j exp(-eg_alpha * H_j / H_bar), H_bar the group
    mean: update magnitude moves from high- to low-entropy responses, signs are preserved, and
    the group's mean gate is 1. Equal entropies (or H_bar = 0) give gate 1."""
    H = np.asarray(g.require("token_entropy", "eg_spo"), dtype=np.float64)
    if not np.isfinite(H).all() or (H < 0).any():
        raise ValueError("token_entropy must be finite and non-negative")
    A = grpo_advantages(g.rewards, eps)
    hbar = H.mean()
    if hbar <= 0:
        return A, {"token_entropy": 0.0, "w_eg_spo": 1.0}
    z = np.exp(-eg_alpha * (H - hbar) / hbar)  # shifted by hbar for numerical range only
    gate = z / z.mean()
    return A * gate, {"token_entropy": float(hbar), "w_eg_spo": float(gate.min())}


def r2vpo_advantages(g, *, r2vpo_lambda=1.0, eps=EPS, **_):
    """R2VPO-style variance damping (Luo et al. 2026; paper App. F): per response,
    w_i = 1 / (1 + lambda * Var_t(rho_{i,t})), rho_{i,t} the token-level policy ratio."""
    v = np.asarray(g.require("ratio_var", "r2vpo"), dtype=np.float64)
    if not np.isfinite(v).all() or (v < 0).any():
        raise ValueError("ratio_var must be finite and non-negative")
    w = 1.0 / (1.0 + r2vpo_lambda * v)
    return grpo_advantages(g.rewards, eps) * w, {"ratio_var": float(v.mean()), "w_r2vpo": float(w.mean())}


def rd_only_advantages(g, *, alpha=ALPHA_BASE, r_min=R_MIN, r_max=R_MAX, eps=EPS, **_):
    """RD only: A~_i = A_i * omega_RD(q), omega_RD = 1 + alpha_G RD (Section 3.3)."""
    G = len(g.rewards)
    rd = reward_dispersion(g.rewards, r_min, r_max)
    w = rd_weight(rd, G, alpha)
    return grpo_advantages(g.rewards, eps) * w, {"rd": rd, "w_rd": w}


def _gcpo(geometry: str, use_rd: bool):
    def fn(g, *, alpha=ALPHA_BASE, r_min=R_MIN, r_max=R_MAX, eps=EPS, **_):
        emb = g.require("embeddings", geometry)
        clusters = g.require("clusters", geometry) if geometry == "bot" else None
        w, info = gcpo_weight(g.rewards, emb, clusters, geometry, use_rd, alpha, r_min, r_max)
        return grpo_advantages(g.rewards, eps) * w, info

    fn.__doc__ = (
        f"GCPO with omega_{geometry.upper()}{' and omega_RD' if use_rd else ''} (Section 3.4): "
        f"A~_i = A_i * omega_{geometry}{' * omega_RD' if use_rd else ''}."
    )
    return fn


_E, _C = EMBEDDINGS, CLUSTERS
MODULATORS: dict[str, Modulator] = {
    m.name: m
    for m in [
        Modulator("none", frozenset(), _none, "GRPO (Shao et al. 2024)"),
        Modulator("se", frozenset({_C, "logprobs"}), seed_grpo_advantages, "Seed-GRPO"),
        Modulator("kle", frozenset({_E}), kle_advantages, "KLE (Nikitin et al. 2024)"),
        Modulator("empo", frozenset({_C}), empo_advantages, "EMPO"),
        Modulator("care", frozenset({_C}), care_advantages, "GRPO-CARE"),
        Modulator("cd", frozenset({_E}), _gcpo("cd", False), "GCPO, CD"),
        Modulator("bot", frozenset({_E, _C}), _gcpo("bot", False), "GCPO, BoT"),
        Modulator("rd", frozenset(), rd_only_advantages, "GCPO, RD only"),
        Modulator("cd_rd", frozenset({_E}), _gcpo("cd", True), "GCPO, CD + RD"),
        Modulator("bot_rd", frozenset({_E, _C}), _gcpo("bot", True), "GCPO, BoT + RD"),
        Modulator("q_hawkeye", frozenset(), q_hawkeye_advantages, "Q-Hawkeye"),
        Modulator("eg_spo", frozenset({"token_entropy"}), eg_spo_advantages, "EG-SPO"),
        Modulator("r2vpo", frozenset({"ratio_var"}), r2vpo_advantages, "R2VPO"),
    ]
}
# logprobs are optional for Seed-GRPO (discrete SE without them); a caller may skip them.
OPTIONAL_NEEDS = {"se": frozenset({"logprobs"})}


def modulate(
    name: str,
    group: GroupFeatures,
    *,
    alpha_base: float = ALPHA_BASE,
    r_min: float = R_MIN,
    r_max: float = R_MAX,
    eps: float = EPS,
    **params,
) -> tuple[np.ndarray, dict]:
    """Modulated advantages of one group by the named method; see MODULATORS for the names."""
    if name not in MODULATORS:
        raise ValueError(f"unknown modulator {name!r}; choose one of {sorted(MODULATORS)}")
    as_rewards(group.rewards, r_min, r_max, batch=False)
    check_alpha_base(alpha_base)
    for key in ("q_alpha", "eg_alpha"):
        if key in params:
            check_alpha_base(params[key])
    return MODULATORS[name](group, alpha=alpha_base, r_min=r_min, r_max=r_max, eps=eps, **params)


def group_weight_from(advantages, rewards, eps: float = EPS) -> float:
    """The group weight omega(q) of a group-level modulator, read off its output: the scalar
    with ``advantages = omega * grpo_advantages(rewards, eps)`` (least squares; 1 when every
    GRPO advantage is 0, equal rewards, where there is nothing to weight). Raises when the
    advantages are not one multiple of the GRPO ones (a per-rollout modulator)."""
    adv = np.asarray(advantages, dtype=np.float64)
    base = grpo_advantages(rewards, eps)
    denom = float(base @ base)
    if denom == 0.0:
        return 1.0
    w = float(adv @ base / denom)
    if not np.allclose(adv, w * base, rtol=1e-9, atol=1e-12):
        raise ValueError(
            "these advantages are not one weight times the GRPO advantages: the modulator weights rollouts individually"
        )
    return w


def __getattr__(name: str) -> type:
    """``GroupRollouts``, the old name of ``GroupFeatures``: warns (removed in gcpo 0.3.0)."""
    if name == "GroupRollouts":
        import warnings

        warnings.warn(
            "GroupRollouts is renamed GroupFeatures (what it holds: one group's rewards and features); "
            "the old name is removed in gcpo 0.3.0",
            FutureWarning,
            stacklevel=2,
        )
        return GroupFeatures
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
