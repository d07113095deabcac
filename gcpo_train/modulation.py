"""Modulate a step's groups: prepare what the modulator needs for every group, call ``modulate``.

The trainer has no formula of its own (docs/conventions.md): weights and advantages come from
``gcpo_analysis.measures.modulators`` (``modulate``, ``group_weight``), and their inputs from
``gcpo_analysis.measures.prepare.prepare_groups``, the batch builder the groups frame uses too —
one embedding call for all texts of the step, one batched greedy clustering over all groups,
nothing a modulator does not ask for (``Modulator.needs``).

What ``GroupModulator`` reads is one ``ModulationSettings``; both training configs make it
(``TrainConfig.modulation_settings``, ``GCPOConfig.modulation_settings``).

Text that is embedded/clustered: the extracted answer for QA, the full completion for math
(``use_full_completion``, Appendix E).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from gcpo_analysis.knobs import check_knobs, shared
from gcpo_analysis.measures.shuffled import split_arm


@dataclass(frozen=True)
class ModulationSettings:
    """Everything ``GroupModulator`` reads: the modulator, its measurement tools and its knobs,
    each declared once in ``gcpo_analysis.knobs.SHARED`` and checked by ``check_knobs``."""

    modulator: str = shared("modulator")
    embedder: str | None = shared("embedder")
    judge: str = shared("judge")
    nli_threshold: float = shared("nli_threshold")
    alpha_base: float = shared("alpha_base")
    r_min: float = shared("r_min")
    r_max: float = shared("r_max")
    eps: float = shared("eps")
    q_hawkeye_alpha: float = shared("q_hawkeye_alpha")
    eg_spo_alpha: float = shared("eg_spo_alpha")
    r2vpo_lambda: float = shared("r2vpo_lambda")
    empo_low: float = shared("empo_low")
    empo_high: float = shared("empo_high")
    modulator_params: dict | None = shared("modulator_params")

    def __post_init__(self):
        check_knobs(self)

    @classmethod
    def from_config(cls, config: Any, missing_ok: bool = False) -> ModulationSettings:
        """The settings read by name from a config that has every field (a TrainConfig, or any
        object with these attributes); a missing one is an error, never a silent default, unless
        ``missing_ok`` (GCPOConfig: eps and the per-rollout modulators' knobs, which TRL refuses,
        keep their declared defaults)."""
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if not hasattr(config, n)]
        if missing and not missing_ok:
            raise ValueError(f"{type(config).__name__} lacks the modulation settings {missing}")
        return cls(**{n: getattr(config, n) for n in names if n not in missing})


def modulator_params(config: Any) -> dict:
    """Keyword arguments that ``modulate`` forwards to the modulator (names as modulators.py)."""
    params = dict(
        q_alpha=config.q_hawkeye_alpha,
        eg_alpha=config.eg_spo_alpha,
        r2vpo_lambda=config.r2vpo_lambda,
        empo_low=config.empo_low,
        empo_high=config.empo_high,
    )
    params.update(config.modulator_params or {})
    return params


def needs_of(name: str) -> frozenset:
    """What the named modulator reads (``Modulator.needs``); refuses unknown names with choices."""
    from gcpo_analysis.measures.modulators import MODULATORS
    from gcpo_analysis.measures.shuffled import split_arm

    return MODULATORS.lookup(split_arm(name)[0]).needs


class GroupModulator:
    """Modulated advantages (our loop) or group weights (the TRL adapter) of a step's groups.

    Reads a ``ModulationSettings`` (a config with the same fields, such as a TrainConfig, is read
    through ``ModulationSettings.from_config``). Holds the embedder and judge across steps:
    ``embedder``/``judge`` may be passed in (tests, benchmarks; an embedder needs only
    ``encode(texts)``); otherwise they are built from the settings on first use, so plain GRPO
    never loads an embedding model.
    """

    def __init__(self, settings: Any, embedder: Any = None, judge: Any = None):
        if not isinstance(settings, ModulationSettings):
            settings = ModulationSettings.from_config(settings)
        self.config = settings
        self.needs = needs_of(settings.modulator)
        self.embedder = embedder
        self.judge = judge
        self._tools = None  # (embedder, judge) as measurement_tools built them

    def tools(self):
        """(embedder, judge) the modulator needs, built once (None for what it does not need)."""
        if self._tools is None:
            from gcpo_analysis.measures.prepare import measurement_tools

            cfg = self.config
            self._tools = measurement_tools(
                self.needs,
                cfg.embedder if self.embedder is None else self.embedder,
                cfg.judge if self.judge is None else self.judge,
            )
        return self._tools

    def describe(self) -> dict:
        out = {"modulator": self.config.modulator, "needs": sorted(self.needs)}
        embedder, judge = self._tools or (self.embedder, self.judge)
        for key, tool in (("embedder", embedder), ("judge", judge)):
            if tool is not None and hasattr(tool, "describe"):
                out[key] = tool.describe()
        return out

    def _prepare(self, rewards, texts, answers, **features):
        from gcpo_analysis.measures.prepare import prepare_groups

        embedder, judge = self.tools()
        # the loop's advantages are float64 end to end (the groups frame keeps float32 embeddings)
        return prepare_groups(
            texts,
            rewards,
            self.needs,
            embedder=embedder,
            judge=judge,
            nli_threshold=self.config.nli_threshold,
            embedding_dtype=np.float64,
            answers=answers,
            **features,
        )

    @staticmethod
    def _info(info: dict, group) -> dict:
        if group.clusters is not None:
            info = {**info, "n_clusters": float(len(np.unique(group.clusters)))}
        return {key: float(v) for key, v in info.items()}

    def modulate_groups(
        self,
        rewards: list[np.ndarray],
        texts: list[list[str]],
        answers: list[list[str]],
        *,
        token_entropy=None,
        logprobs=None,
        ratio_var=None,
        n_tokens=None,
        shuffle_seed: int | None = None,
    ):
        """Modulated advantages and info of each group.

        rewards/texts/answers: one entry per group (length G each); token_entropy, logprobs,
        ratio_var, n_tokens: optional per-group arrays, used only when the modulator needs them.
        A '<modulator>:shuffled' arm permutes the step's ω across its groups with ``shuffle_seed``
        (``gcpo_analysis.measures.shuffled``). Returns (list of (G,) advantages, list of info dicts, stats dict).
        """
        from gcpo_analysis.measures.modulators import modulate

        cfg = self.config
        groups, cluster_stats = self._prepare(
            rewards,
            texts,
            answers,
            token_entropy=token_entropy,
            logprobs=logprobs,
            ratio_var=ratio_var,
            n_tokens=n_tokens,
        )
        params = modulator_params(cfg)
        if split_arm(cfg.modulator)[1]:
            return (
                *self._shuffled(groups, params, shuffle_seed),
                {f"cluster_{k}": v for k, v in cluster_stats.items()},
            )
        advantages, infos = [], []
        for k, group in enumerate(groups):
            adv, info = modulate(
                cfg.modulator, group, alpha_base=cfg.alpha_base, r_min=cfg.r_min, r_max=cfg.r_max, eps=cfg.eps, **params
            )
            adv = np.asarray(adv, dtype=np.float64)
            if adv.shape != group.rewards.shape or not np.isfinite(adv).all():
                raise ValueError(
                    f"modulator {cfg.modulator!r} returned advantages of shape "
                    f"{adv.shape} (finite: {np.isfinite(adv).all()}) for group {k}"
                )
            advantages.append(adv)
            infos.append(self._info(info, group))
        return advantages, infos, {f"cluster_{k}": v for k, v in cluster_stats.items()}

    def _shuffled(self, groups, params, seed):
        """Ã_k = ω_{π(k)} · A_k: the step's group weights permuted across its groups with unequal
        rewards (``shuffle_weights``); info keeps each group's own ω as ``omega_own``."""
        from gcpo_analysis.measures.advantages import grpo_advantages
        from gcpo_analysis.measures.modulators import group_weight
        from gcpo_analysis.measures.shuffled import shuffle_weights

        if seed is None:
            raise ValueError(f"modulator {self.config.modulator!r} needs the step's shuffle_seed")
        cfg, name = self.config, split_arm(self.config.modulator)[0]
        own, infos, adv = [], [], []
        for group in groups:
            w, info = group_weight(name, group, alpha_base=cfg.alpha_base, r_min=cfg.r_min, r_max=cfg.r_max, **params)
            own.append(float(w))
            infos.append(self._info({**info, "omega_own": float(w)}, group))
            adv.append(np.asarray(grpo_advantages(group.rewards, cfg.eps), dtype=np.float64))
        omega = shuffle_weights(own, [bool(np.any(a != 0)) for a in adv], seed)
        return [a * w for a, w in zip(adv, omega, strict=True)], infos

    def weigh_groups(
        self, rewards: list[np.ndarray], texts: list[list[str]], answers: list[list[str]]
    ) -> tuple[np.ndarray, list[dict], dict]:
        """The weight omega(q) and info of each group, for a group-level modulator (the TRL path:
        TRL makes the advantages, we scale them). Refuses eg_spo, r2vpo and empo, which have no
        group weight. Returns ((n,) weights, list of info dicts, stats dict)."""
        from gcpo_analysis.measures.modulators import MODULATORS, group_weight

        cfg = self.config
        MODULATORS[cfg.modulator].require_weight()  # refuse eg_spo, r2vpo, empo before any model is built
        groups, cluster_stats = self._prepare(rewards, texts, answers)
        params = modulator_params(cfg)
        weights, infos = [], []
        for k, group in enumerate(groups):
            w, info = group_weight(
                cfg.modulator, group, alpha_base=cfg.alpha_base, r_min=cfg.r_min, r_max=cfg.r_max, **params
            )
            if not np.isfinite(w):
                raise ValueError(f"modulator {cfg.modulator!r} gave the weight {w!r} for group {k}")
            weights.append(float(w))
            infos.append(self._info(info, group))
        return np.array(weights, dtype=np.float64), infos, {f"cluster_{k}": v for k, v in cluster_stats.items()}
