"""Uncertainty measures, weights and advantage modulators of GCPO and its baselines.

Everything here works on numpy arrays; torch, transformers and sentence-transformers are
imported only by the embedder and the NLI judge, when used. Names resolve lazily so that
``import gcpo_analysis.measures`` stays cheap.

Geometry and calibration (Section 3): alpha_g, geometry_weight, rd_weight,
cosine_dispersion, barycentric_transport, reward_dispersion, rd_max.
Entropies (Section 2): semantic_entropy, predictive_entropy, mean_token_entropy,
kernel_language_entropy; se_logweights, entropy_weight (Seed-GRPO's weight of SE, SE-LW, KLE).
Advantages: grpo_advantages, gcpo_advantages; every baseline in ``modulators``, with
group_weight (omega(q) of a group-level modulator) beside modulate.
The measures registry (what each measure needs, its values and weight): MEASURE_REGISTRY, Measure,
register_measure (a new measure is one file: docs/guides/extending.md); modulators likewise:
MODULATORS, register_modulator. Nothing else lists them.
Clustering and judges (Appendix E): greedy_nli_clusters, batched_greedy_clusters, NLIJudge,
EmbeddingJudge, LexicalJudge, MathJudge, make_judge; Embedder.
The measurement batch of many groups (one builder for the groups frame and the trainers):
prepare_groups.
Frames: score_groups(rollouts) -> groups frame.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "dispersion": [
        "ALPHA_BASE",
        "alpha_g",
        "geometry_weight",
        "rd_weight",
        "cosine_dispersion",
        "cosine_dispersion_batch",
        "barycentric_transport",
        "barycentric_transport_batch",
        "reward_dispersion",
        "reward_dispersion_batch",
        "rd_max",
    ],
    "entropy": [
        "semantic_entropy",
        "predictive_entropy",
        "mean_token_entropy",
        "kernel_language_entropy",
        "token_entropy_from_logits",
        "se_logweights",
        "entropy_weight",
    ],
    "advantages": ["grpo_advantages", "grpo_advantages_batch", "gcpo_advantages", "gcpo_weight"],
    "modulators": [
        "GroupFeatures",
        "MODULATORS",
        "Modulator",
        "register_modulator",
        "modulate",
        "group_weight",
        "seed_grpo_weight",
        "kle_weight",
        "care_weight",
        "q_hawkeye_weight",
        "rd_only_weight",
        "seed_grpo_advantages",
        "empo_advantages",
        "kle_advantages",
        "care_advantages",
        "q_hawkeye_advantages",
        "eg_spo_advantages",
        "r2vpo_advantages",
        "rd_only_advantages",
    ],
    "clustering": ["greedy_nli_clusters", "batched_greedy_clusters", "all_pairs_clusters"],
    "judges": ["NLIJudge", "EmbeddingJudge", "LexicalJudge", "MathJudge", "make_judge"],
    "embed": ["Embedder", "make_embedder", "embed_groups"],
    "prepare": ["prepare_groups", "measurement_tools", "judge_shares_embedder"],
    "registry": ["Measure", "MEASURE_REGISTRY", "register_measure", "default_measures"],
    "score": ["score_groups", "MEASURES", "parse_measures"],
}
_NAME_TO_MODULE = {name: mod for mod, names in _WHERE.items() for name in names}
__all__ = sorted(_NAME_TO_MODULE)


def __getattr__(name: str) -> object:
    module = _NAME_TO_MODULE.get(name)
    if module is None:
        raise AttributeError(f"module 'gcpo_analysis.measures' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
