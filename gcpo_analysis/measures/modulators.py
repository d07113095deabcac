"""Advantage modulators: GRPO, GCPO and every baseline, as one registry (Tables 1, 2, 5).

Each baseline is reinterpreted as a plug-in modulation of the same GRPO update, as Appendix E
and F of the paper describe; where the baseline's own paper defines the formula we follow it
and cite it. The trainers call only ``modulate(name, group)`` and ``group_weight(name, group)``:
they have no formula of their own.

Two kinds (``Modulator.weight``): a *group-level* modulator scales every GRPO advantage of a
group by one weight, A~_i = A_i * omega(q), and has ``weight(group, **params) -> (omega, info)``;
its ``modulate`` is exactly ``grpo_advantages(rewards, eps) * omega`` (none, se, kle, care, cd,
bot, rd, cd_rd, bot_rd, q_hawkeye). eg_spo and r2vpo weigh each rollout by itself, and empo
replaces the reward: they have no group weight (``weight`` is None, ``no_weight`` says why) and
make their advantages themselves.

Each modulator is registered by ``@register_modulator`` on its weight (or advantages) function;
a new one is one file (docs/guides/extending.md), and the configs' choices, the TRL refusals and
``modulator_params``' accepted keys are read from ``MODULATORS``.

``info`` holds the measures and weights a modulator used, named as in the groups frame (``se``,
``w_se``, ``cd``, ``w_cd``, ``rd``, ``w_rd``, ...). The measures and their weights are the
functions of ``dispersion`` and ``entropy`` that the groups frame uses too (``registry``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..knob import check_value
from ..registry import Registry
from ..vocab import CLUSTERS, EMBEDDINGS
from .advantages import EPS, gcpo_weight, grpo_advantages
from .dispersion import ALPHA_BASE, R_MAX, R_MIN, alpha_g, as_rewards, check_alpha_base, rd_weight, reward_dispersion
from .entropy import entropy_weight, kernel_language_entropy, se_logweights, semantic_entropy
from .params import MODULATOR_PARAMS
from .weights_checked import checked_weight

Info = dict[str, float]
WeightFn = Callable[..., tuple[float, Info]]
AdvantageFn = Callable[..., tuple[np.ndarray, Info]]


@dataclass
class GroupFeatures:
    """One query's group of G rollouts as a measure or modulator sees it: the rewards and the
    per-rollout features (embeddings, clusters, entropies, log-probs)."""

    rewards: np.ndarray
    embeddings: np.ndarray | None = None  # (G, d), answer (QA) or completion (math) embeddings
    clusters: np.ndarray | None = None  # (G,) semantic cluster labels
    token_entropy: np.ndarray | None = None  # (G,) mean per-token entropy of each rollout
    logprobs: np.ndarray | None = None  # (G,) sum of token log-probabilities
    ratio_var: np.ndarray | None = None  # (G,) Var_t of the per-token policy ratio rho_{i,t}
    answers: list[str] | None = None
    n_tokens: np.ndarray | None = None  # (G,) completion lengths: SE weights use logprobs / n_tokens
    grad_norm2: float | None = None  # ‖g_q‖² of the group's own gradient (the update-alignment study's)

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
    """One modulator: what it reads (``needs``, the names of ``vocab``) and how it modulates.

    Group-level (``weight`` set): ``weight(group, alpha=, r_min=, r_max=, **params)`` gives
    (omega(q), info) and the advantages are ``grpo_advantages(rewards, eps) * omega``. The
    others (``weight`` None) give their advantages through ``per_rollout``; ``no_weight`` says
    why they have no group weight.
    """

    name: str
    needs: frozenset[str]
    source: str
    weight: WeightFn | None = None
    per_rollout: AdvantageFn | None = None
    no_weight: str = ""
    optional_needs: frozenset[str] = frozenset()  # in needs, but a caller may skip them

    def __call__(self, group: GroupFeatures, *, eps: float = EPS, **params: Any) -> tuple[np.ndarray, Info]:
        """(advantages (G,), info) of one group."""
        if self.weight is None:
            assert self.per_rollout is not None, f"modulator {self.name!r} has neither a weight nor advantages"
            return self.per_rollout(group, eps=eps, **params)
        omega, info = self.group_weight(group, **params)
        return grpo_advantages(group.rewards, eps) * omega, info

    def require_weight(self) -> WeightFn:
        """The weight function of a group-level modulator; a clear error for the others."""
        if self.weight is None:
            raise ValueError(
                f"modulator {self.name!r} has no group weight: {self.no_weight}; modulate() gives its advantages"
            )
        return self.weight

    def group_weight(self, group: GroupFeatures, **params: Any) -> tuple[float, Info]:
        """(omega(q), info) of a group-level modulator, omega checked (a finite number >= 0:
        ``weights_checked``, the one check every path shares); a clear error for the others."""
        omega, info = self.require_weight()(group, **params)
        return checked_weight(omega, f"modulator {self.name!r}", "this group"), info


MODULATORS: Registry[Modulator] = Registry("modulator")


def register_modulator(
    name: str,
    *,
    needs: Iterable[str] = (),
    source: str,
    per_rollout: bool = False,
    no_weight: str = "",
    optional_needs: Iterable[str] = (),
) -> Callable[[Callable], Callable]:
    """Decorator: register a modulator (verl's ``@register_adv_est`` habit). By default the
    decorated function is a group weight, ``weight(group, *, alpha, r_min, r_max, **params) ->
    (omega, info)``; with ``per_rollout=True`` it gives the advantages itself, ``fn(group, *, eps,
    **params) -> (advantages, info)``, and ``no_weight`` must say why it has no group weight (the
    TRL bridge refuses it with that reason). Everything that lists modulators (the configs'
    choices, the TRL refusals, ``modulator_params``' accepted keys) reads ``MODULATORS``. A name
    registered twice is refused (``MODULATORS.pop(name)`` first to replace one)."""
    if per_rollout and not no_weight:
        raise ValueError(f"per-rollout modulator {name!r}: say why it has no group weight (no_weight=...)")
    return MODULATORS.decorator(
        name,
        lambda fn: Modulator(
            name,
            frozenset(needs),
            source,
            weight=None if per_rollout else fn,
            per_rollout=fn if per_rollout else None,
            no_weight=no_weight,
            optional_needs=frozenset(optional_needs),
        ),
    )


# --------------------------------------------------------------------------- group weights
@register_modulator("none", source="GRPO (Shao et al. 2024)")
def grpo_weight(g: GroupFeatures, **_: Any) -> tuple[float, Info]:
    """Plain GRPO (Shao et al. 2024): omega = 1."""
    return 1.0, {}


@register_modulator("se", needs={CLUSTERS, "logprobs"}, optional_needs={"logprobs"}, source="Seed-GRPO")
def seed_grpo_weight(g: GroupFeatures, *, alpha: float = ALPHA_BASE, **_: Any) -> tuple[float, Info]:
    """Seed-GRPO (Chen et al. 2025, arXiv:2505.12346): omega = max(0, 1 - alpha * SE(q) / ln G)
    (``entropy.entropy_weight``, their linear f(x) = 1 - x). SE is likelihood-weighted when
    log-probabilities are present (length-normalised when n_tokens is given, see
    ``entropy.se_logweights``), else the empirical cluster fractions."""
    clusters = g.require("clusters", "se")
    se = semantic_entropy(clusters, se_logweights(g.logprobs, g.n_tokens))
    w = float(entropy_weight(se, len(g.rewards), alpha))
    return w, {"se": se, "w_se": w}


@register_modulator("kle", needs={EMBEDDINGS}, source="KLE (Nikitin et al. 2024)")
def kle_weight(g: GroupFeatures, *, alpha: float = ALPHA_BASE, **_: Any) -> tuple[float, Info]:
    """KLE weighting: Seed-GRPO's linear scaling with kernel language entropy (Nikitin et al.
    2024) in place of SE, omega = max(0, 1 - alpha * KLE / ln G); KLE of G responses is at most
    ln G (a unit-trace G x G kernel). G = 1: KLE = 0, omega = 1."""
    emb = g.require("embeddings", "kle")
    G = len(g.rewards)
    kle = kernel_language_entropy(embeddings=emb) if G > 1 else 0.0
    w = float(entropy_weight(kle, G, alpha))
    return w, {"kle": kle, "w_kle": w}


@register_modulator("care", needs={CLUSTERS}, source="GRPO-CARE")
def care_weight(g: GroupFeatures, *, alpha: float = ALPHA_BASE, **_: Any) -> tuple[float, Info]:
    """GRPO-CARE adaptation (Chen et al. 2025, arXiv:2506.16141; paper App. E): consistency is
    the pairwise agreement across rollouts, a(q) = sum_k n_k (n_k - 1) / (G (G - 1)), the chance
    that two distinct rollouts share a semantic cluster; omega = clip(1 - alpha_G (1 - a(q)), 0, 1).
    G = 1: a = 1, omega = 1. (CARE's original bonus uses a reference model's likelihood of the
    answer given the reasoning; the paper compares against its agreement-as-confidence reading,
    which this is.)"""
    clusters = np.asarray(g.require("clusters", "care"))
    G = len(clusters)
    if G == 1:
        return 1.0, {"care": 1.0, "w_care": 1.0}
    _labels, counts = np.unique(clusters, return_counts=True)
    agreement = float((counts * (counts - 1)).sum() / (G * (G - 1)))
    w = float(np.clip(1.0 - alpha_g(G, alpha) * (1.0 - agreement), 0.0, 1.0))
    return w, {"care": agreement, "w_care": w}


@register_modulator("q_hawkeye", source="Q-Hawkeye")
def q_hawkeye_weight(
    g: GroupFeatures, *, q_alpha: float = ALPHA_BASE, r_min: float = R_MIN, r_max: float = R_MAX, **_: Any
) -> tuple[float, Info]:
    """Q-Hawkeye adaptation (Xie et al. 2026; paper App. F): u(q) = Var(r_1..r_G), normalised by
    its maximum over [r_min, r_max]^G, Var_max(G) = floor(G/2) ceil(G/2) / G^2 (r_max - r_min)^2;
    omega = 1 - q_alpha * Var/Var_max (linear reweighting, q_alpha not group-normalised; it is
    ``q_hawkeye_alpha`` in the training configs)."""
    _param("q_alpha", q_alpha)  # the function refuses what the configs refuse (q_alpha 2 gave omega -1)
    r = as_rewards(g.rewards, r_min, r_max, batch=False)
    G = len(r)
    var_max = (G // 2) * (-(-G // 2)) / G**2 * (r_max - r_min) ** 2
    u = float(r.var() / var_max) if var_max > 0 else 0.0
    w = 1.0 - q_alpha * u
    return w, {"reward_var": u, "w_q_hawkeye": w}


@register_modulator("rd", source="GCPO, RD only")
def rd_only_weight(
    g: GroupFeatures, *, alpha: float = ALPHA_BASE, r_min: float = R_MIN, r_max: float = R_MAX, **_: Any
) -> tuple[float, Info]:
    """RD only: omega = omega_RD(q) = 1 + alpha_G RD (Section 3.3)."""
    rd = reward_dispersion(g.rewards, r_min, r_max)
    w = float(rd_weight(rd, len(g.rewards), alpha))
    return w, {"rd": rd, "w_rd": w}


def _gcpo(geometry: str, use_rd: bool) -> WeightFn:
    def weight(
        g: GroupFeatures, *, alpha: float = ALPHA_BASE, r_min: float = R_MIN, r_max: float = R_MAX, **_: Any
    ) -> tuple[float, Info]:
        emb = g.require("embeddings", geometry)
        clusters = g.require("clusters", geometry) if geometry == "bot" else None
        return gcpo_weight(g.rewards, emb, clusters, geometry, use_rd, alpha, r_min, r_max)

    weight.__name__ = f"{geometry}{'_rd' if use_rd else ''}_weight"
    weight.__doc__ = (
        f"GCPO with omega_{geometry.upper()}{' and omega_RD' if use_rd else ''} (Section 3.4): "
        f"omega = omega_{geometry}{' * omega_RD' if use_rd else ''} (``advantages.gcpo_weight``)."
    )
    return weight


# ------------------------------------------------------------------- group-level advantages
# The published names of the group-level modulators' advantages: A_i * omega(q), nothing else.
def seed_grpo_advantages(
    g: GroupFeatures, *, alpha: float = ALPHA_BASE, eps: float = EPS, **_: Any
) -> tuple[np.ndarray, Info]:
    """Seed-GRPO advantages A^_i = A_i * omega_SE(q) (``seed_grpo_weight``)."""
    return MODULATORS["se"](g, alpha=alpha, eps=eps)


def kle_advantages(
    g: GroupFeatures, *, alpha: float = ALPHA_BASE, eps: float = EPS, **_: Any
) -> tuple[np.ndarray, Info]:
    """KLE-weighted advantages A_i * omega_KLE(q) (``kle_weight``)."""
    return MODULATORS["kle"](g, alpha=alpha, eps=eps)


def care_advantages(
    g: GroupFeatures, *, alpha: float = ALPHA_BASE, eps: float = EPS, **_: Any
) -> tuple[np.ndarray, Info]:
    """GRPO-CARE advantages A_i * omega_CARE(q) (``care_weight``)."""
    return MODULATORS["care"](g, alpha=alpha, eps=eps)


def q_hawkeye_advantages(
    g: GroupFeatures,
    *,
    q_alpha: float = ALPHA_BASE,
    r_min: float = R_MIN,
    r_max: float = R_MAX,
    eps: float = EPS,
    **_: Any,
) -> tuple[np.ndarray, Info]:
    """Q-Hawkeye advantages A_i * (1 - q_alpha Var/Var_max) (``q_hawkeye_weight``)."""
    return MODULATORS["q_hawkeye"](g, q_alpha=q_alpha, r_min=r_min, r_max=r_max, eps=eps)


def rd_only_advantages(
    g: GroupFeatures,
    *,
    alpha: float = ALPHA_BASE,
    r_min: float = R_MIN,
    r_max: float = R_MAX,
    eps: float = EPS,
    **_: Any,
) -> tuple[np.ndarray, Info]:
    """RD only: A~_i = A_i * omega_RD(q), omega_RD = 1 + alpha_G RD (Section 3.3)."""
    return MODULATORS["rd"](g, alpha=alpha, r_min=r_min, r_max=r_max, eps=eps)


# ------------------------------------------------------------------- per-rollout and reward-replacing
@register_modulator(
    "empo",
    needs={CLUSTERS},
    source="EMPO",
    per_rollout=True,
    no_weight="it replaces the reward by the cluster frequency instead of weighting the advantage",
)
def empo_advantages(
    g: GroupFeatures, *, empo_low: float = 0.0, empo_high: float = 0.5, eps: float = EPS, **_: Any
) -> tuple[np.ndarray, Info]:
    """EMPO (Zhang et al. 2025, arXiv:2504.05812): the reward of a response is the frequency of
    its semantic cluster, r_i = |c(i)| / G (the task reward is ignored: EMPO is unsupervised);
    advantages are GRPO-normalised; a query is kept only if its semantic entropy lies in
    [empo_low, empo_high] * ln G (EMPO's entropy thresholding), else its weight is 0."""
    _param("empo_low", empo_low)
    _param("empo_high", empo_high)
    if empo_low > empo_high:
        raise ValueError(f"empo_low ({empo_low}) must be <= empo_high ({empo_high})")
    clusters = np.asarray(g.require("clusters", "empo"))
    G = len(clusters)
    _labels, labels, counts = np.unique(clusters, return_inverse=True, return_counts=True)
    freq = counts[labels] / G
    se = semantic_entropy(clusters)
    h = se / math.log(G) if G > 1 else 0.0
    keep = float(empo_low - 1e-12 <= h <= empo_high + 1e-12)
    return grpo_advantages(freq, eps) * keep, {"se": se, "w_empo": keep}


@register_modulator(
    "eg_spo",
    needs={"token_entropy"},
    source="EG-SPO",
    per_rollout=True,
    no_weight="it gates each rollout by its own token entropy (a per-rollout weight, not a group weight)",
)
def eg_spo_advantages(
    g: GroupFeatures, *, eg_alpha: float = 1.0, eps: float = EPS, **_: Any
) -> tuple[np.ndarray, Info]:
    """EG-SPO-style response-level entropy gate (Hu et al. 2026; paper App. F, our adaptation):
    each response's mean token entropy H_i gates its own advantage,
    gate_i = exp(-eg_alpha * H_i / H_bar) / mean_j exp(-eg_alpha * H_j / H_bar), H_bar the group
    mean: update magnitude moves from high- to low-entropy responses, signs are preserved, and
    the group's mean gate is 1. Equal entropies (or H_bar = 0) give gate 1."""
    _param("eg_alpha", eg_alpha)
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


@register_modulator(
    "r2vpo",
    needs={"ratio_var"},
    source="R2VPO",
    per_rollout=True,
    no_weight="it damps each rollout by the variance of its own policy ratio against the reference policy, "
    "which TRL has not computed when the advantages are made",
)
def r2vpo_advantages(
    g: GroupFeatures, *, r2vpo_lambda: float = 1.0, eps: float = EPS, **_: Any
) -> tuple[np.ndarray, Info]:
    """R2VPO-style variance damping (Luo et al. 2026; paper App. F): per response,
    w_i = 1 / (1 + lambda * Var_t(rho_{i,t})), rho_{i,t} the token-level policy ratio."""
    _param("r2vpo_lambda", r2vpo_lambda)
    v = np.asarray(g.require("ratio_var", "r2vpo"), dtype=np.float64)
    if not np.isfinite(v).all() or (v < 0).any():
        raise ValueError("ratio_var must be finite and non-negative")
    w = 1.0 / (1.0 + r2vpo_lambda * v)
    return grpo_advantages(g.rewards, eps) * w, {"ratio_var": float(v.mean()), "w_r2vpo": float(w.mean())}


# GCPO's four combinations (Section 3.4): one weight function each, made by _gcpo
for _name, _geometry, _use_rd, _source in (
    ("cd", "cd", False, "GCPO, CD"),
    ("bot", "bot", False, "GCPO, BoT"),
    ("cd_rd", "cd", True, "GCPO, CD + RD"),
    ("bot_rd", "bot", True, "GCPO, BoT + RD"),
):
    _needs = {EMBEDDINGS, CLUSTERS} if _geometry == "bot" else {EMBEDDINGS}
    register_modulator(_name, needs=_needs, source=_source)(_gcpo(_geometry, _use_rd))


def _checked(
    name: str, group: GroupFeatures, alpha_base: float, r_min: float, r_max: float, params: dict[str, Any]
) -> Modulator:
    modulator = MODULATORS.lookup(name)
    as_rewards(group.rewards, r_min, r_max, batch=False)
    check_alpha_base(alpha_base)
    for key in MODULATOR_PARAMS:  # each checked against its one declaration
        if key in params:
            _param(key, params[key])
    return modulator


def _param(key: str, value: Any) -> float:
    """A modulator's own parameter checked against its one declaration (``MODULATOR_PARAMS``):
    the functions refuse what the configs refuse, however they are called."""
    return check_value(key, value, MODULATOR_PARAMS[key][1], float)


def modulate(
    name: str,
    group: GroupFeatures,
    *,
    alpha_base: float = ALPHA_BASE,
    r_min: float = R_MIN,
    r_max: float = R_MAX,
    eps: float = EPS,
    **params: Any,
) -> tuple[np.ndarray, Info]:
    """Modulated advantages of one group by the named method; see MODULATORS for the names.
    For a group-level modulator exactly ``grpo_advantages(group.rewards, eps) * omega``, omega
    its ``group_weight``."""
    modulator = _checked(name, group, alpha_base, r_min, r_max, params)
    return modulator(group, alpha=alpha_base, r_min=r_min, r_max=r_max, eps=eps, **params)


def group_weight(
    name: str,
    group: GroupFeatures,
    *,
    alpha_base: float = ALPHA_BASE,
    r_min: float = R_MIN,
    r_max: float = R_MAX,
    **params: Any,
) -> tuple[float, Info]:
    """The weight omega(q) of one group by the named group-level modulator, and its measures
    (the same ``info`` as ``modulate``'s). eg_spo, r2vpo and empo have none: refused, saying why."""
    modulator = _checked(name, group, alpha_base, r_min, r_max, params)
    return modulator.group_weight(group, alpha=alpha_base, r_min=r_min, r_max=r_max, **params)


# the field's group weights (GRPO's std scaling, Dr. GRPO, inverse gradient norm and variance)
from .field_weights import register as _register_field_weights  # noqa: E402

_register_field_weights(register_modulator)
