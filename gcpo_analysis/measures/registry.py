"""The measures registry: every measure of the groups frame, what it needs, and its weight.

Modelled on lm-polygraph's estimator protocol (an estimator declares the statistics it depends
on and computes its value from them): a ``Measure`` declares what it reads, and ``values`` turns
the ``GroupFeatures`` of several groups of one size G into one number per group.

What a measure can need: the features ``prepare.prepare_groups`` computes (``needs``: the
embeddings mu_i, the semantic clusters; the names of ``vocab``, as ``Modulator.needs`` names
them), a column of the rollouts frame (``columns``: token_entropy, logprob; ``optional_columns``:
n_tokens), the rewards (``rewards``). ``score.score_groups`` builds what the requested measures
need once and calls each measure on the groups of each size: the geometry and reward measures
(cd, bot, rd) are vectorised over those groups, the entropies run group by group.

Each formula lives once, in ``dispersion`` and ``entropy``; the modulators call the same
functions (``modulators.seed_grpo_weight``, ``kle_weight``, ``advantages.gcpo_weight``), and the
weights here are the modulators' omega(q): ``w_cd``/``w_bot`` = clip(1 - alpha_G u^2, 0, 1)
(Sections 3.1-3.2), ``w_rd`` = 1 + alpha_G RD (Section 3.3), ``w_se``/``w_se_lw``/``w_kle`` =
max(0, 1 - alpha_base u / ln G) (Seed-GRPO's linear scaling).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..vocab import CLUSTERS, EMBEDDINGS
from .dispersion import (
    barycentric_transport_batch,
    cosine_dispersion_batch,
    geometry_weight,
    rd_weight,
    reward_dispersion_batch,
)
from .entropy import entropy_weight, kernel_language_entropy, predictive_entropy, se_logweights, semantic_entropy

if TYPE_CHECKING:
    from .modulators import GroupFeatures

Groups = Sequence["GroupFeatures"]
# values(groups of one size G, r_min, r_max) -> (N,); weight(values, G, alpha_base) -> (N,)
ValuesFn = Callable[[Groups, float, float], np.ndarray]
WeightFn = Callable[[np.ndarray, int, float], "float | np.ndarray"]
# rollouts column -> the GroupFeatures field that carries it
FEATURE_OF_COLUMN = {"token_entropy": "token_entropy", "logprob": "logprobs", "n_tokens": "n_tokens"}


@dataclass(frozen=True)
class Measure:
    """One measure of the groups frame (a column named ``name``) and its weight column."""

    name: str
    values: ValuesFn
    needs: frozenset[str] = frozenset()  # computed by prepare_groups: EMBEDDINGS, CLUSTERS
    columns: tuple[str, ...] = ()  # rollouts columns it reads (refused when missing)
    optional_columns: tuple[str, ...] = ()  # read when present
    rewards: bool = False  # reads the rewards (and their declared range)
    weight_column: str | None = None
    weight: WeightFn | None = None
    source: str = ""


def _field(groups: Groups, name: str) -> list[np.ndarray]:
    """One feature of every group, refusing a group that lacks it."""
    out = []
    for g in groups:
        value = getattr(g, name)
        if value is None:
            raise ValueError(f"a group lacks {name!r}, which the measure needs")
        out.append(np.asarray(value))
    return out


# ------------------------------------------------------------------ batch functions
def token_entropy_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Mean over the G rollouts of each rollout's mean per-token entropy (the rollouts column),
    in the column's own dtype (a trainer frame's float32 stays float32, as pandas' mean keeps it).
    Unlike ``entropy.mean_token_entropy`` a group of one keeps its rollout's value (the groups
    frame has always done so)."""
    return np.array([np.mean(h) for h in _field(groups, "token_entropy")])


def pe_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Predictive entropy -(1/G) sum_i log p(y_i | x) (Sec. 2.2; ``entropy.predictive_entropy``)."""
    return np.array([predictive_entropy(lp) for lp in _field(groups, "logprobs")])


def se_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Discrete semantic entropy, C_k = |k| / G (the empirical cluster mass BoT's Pi_k uses)."""
    return np.array([semantic_entropy(c) for c in _field(groups, "clusters")])


def se_lw_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Likelihood-weighted SE, C_k = sum_{i in k} p_i / sum_i p_i, p_i from the mean token
    log-probability when n_tokens is known (``entropy.se_logweights``)."""
    clusters = _field(groups, "clusters")
    return np.array([semantic_entropy(c, se_logweights(g.logprobs, g.n_tokens)) for c, g in zip(clusters, groups)])


def kle_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Kernel language entropy of the embeddings (Nikitin et al. 2024); 0 for G = 1."""
    return np.array(
        [kernel_language_entropy(embeddings=e) if len(e) > 1 else 0.0 for e in _field(groups, "embeddings")]
    )


def cd_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Cosine Dispersion of N groups of one size at once (Section 3.1)."""
    return cosine_dispersion_batch(np.stack(_field(groups, "embeddings")))


def bot_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Barycentric Transport of N groups of one size at once (Section 3.2)."""
    return barycentric_transport_batch(np.stack(_field(groups, "embeddings")), np.stack(_field(groups, "clusters")))


def rd_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Reward Dispersion of N groups of one size at once, rewards in [r_min, r_max] (Section 3.3)."""
    return reward_dispersion_batch(np.stack([g.rewards for g in groups]), r_min, r_max)


_E, _C = EMBEDDINGS, CLUSTERS
# In the order of the measures everywhere (``score.MEASURES``, ``--measures all``).
MEASURE_REGISTRY: dict[str, Measure] = {
    m.name: m
    for m in [
        Measure("token_entropy", token_entropy_values, columns=("token_entropy",), source="mean token entropy"),
        Measure("pe", pe_values, columns=("logprob",), source="predictive entropy (Malinin & Gales 2021)"),
        Measure(
            "se",
            se_values,
            needs=frozenset({_C}),
            weight_column="w_se",
            weight=entropy_weight,
            source="semantic entropy, discrete (Farquhar et al. 2024); weight: Seed-GRPO",
        ),
        Measure(
            "se_lw",
            se_lw_values,
            needs=frozenset({_C}),
            columns=("logprob",),
            optional_columns=("n_tokens",),
            weight_column="w_se_lw",
            weight=entropy_weight,
            source="semantic entropy, likelihood-weighted (Kuhn et al. 2023); weight: Seed-GRPO",
        ),
        Measure(
            "kle",
            kle_values,
            needs=frozenset({_E}),
            weight_column="w_kle",
            weight=entropy_weight,
            source="kernel language entropy (Nikitin et al. 2024); weight: Seed-GRPO's scaling",
        ),
        Measure("cd", cd_values, needs=frozenset({_E}), weight_column="w_cd", weight=geometry_weight, source="GCPO"),
        Measure(
            "bot", bot_values, needs=frozenset({_E, _C}), weight_column="w_bot", weight=geometry_weight, source="GCPO"
        ),
        Measure("rd", rd_values, rewards=True, weight_column="w_rd", weight=rd_weight, source="GCPO"),
    ]
}


def rollouts_columns(measures: Iterable[str]) -> set[str]:
    """The rollouts columns the named measures read (``Measure.columns``): what
    ``frames.check_logprob_convention`` must look at before they are computed."""
    return {c for m in measures if m in MEASURE_REGISTRY for c in MEASURE_REGISTRY[m].columns}
