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

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from gcpo_analysis.knobs import MeasurementTools, check_knobs, shared
from gcpo_analysis.measures.params import PARAM_KNOBS
from gcpo_analysis.measures.shuffled import split_arm


@dataclass
class GroupWeightSettings(MeasurementTools):
    """The knobs a group weight reads (``Modulator.weight``, the modulators TRL runs), each field
    declared here once: ``GCPOConfig`` inherits them beside TRL's ``GRPOConfig``, and
    ``ModulationSettings`` adds the rest. The measurement tools (embedder, judge, nli_threshold)
    come from ``gcpo_analysis.knobs.MeasurementTools``. No ``__post_init__``: the inheriting
    config validates (``check_knobs``)."""

    modulator: str = shared("modulator")
    alpha_base: float = shared("alpha_base")
    r_min: float | None = shared(
        "r_min",
        None,
        help="Lower end of the reward range RD and Q-Hawkeye normalise by; rewards outside [r_min, r_max] are "
        "refused. Stating either end fixes the range (the other keeps its default, 0 or 2).",
        none="not stated: gcpo's own loop reads the paper's 0; under TRL (GCPOConfig) reward_range says where "
        "the range comes from",
    )
    r_max: float | None = shared(
        "r_max",
        None,
        help="Upper end of the reward range (> r_min; 1 for 0/1 rewards, the paper's are on [0, 2]).",
        none="not stated: gcpo's own loop reads the paper's 2; under TRL (GCPOConfig) reward_range says where "
        "the range comes from",
    )
    q_hawkeye_alpha: float = shared("q_hawkeye_alpha")
    modulator_params: dict | None = shared("modulator_params")
    use_full_completion: bool | None = shared(
        "use_full_completion",
        none="auto: the full completion for the math datasets (gcpo_analysis.vocab.full_completion); "
        "under TRL, whose dataset has no name, the full completion (vocab.TRL_USE_FULL_COMPLETION)",
    )


@dataclass
class ModulationSettings(GroupWeightSettings):
    """Everything ``GroupModulator`` reads: the modulator, its measurement tools and its knobs, the
    one home of the modulation fields. ``TrainConfig`` inherits it (its YAML keys and flags are
    these field names); each field's range and help is declared once (``gcpo_analysis.knobs.SHARED``,
    the parameters in ``gcpo_analysis.measures.params``) and checked by ``check_knobs``."""

    eps: float = shared("eps")
    eg_spo_alpha: float = shared("eg_spo_alpha")
    r2vpo_lambda: float = shared("r2vpo_lambda")
    empo_low: float = shared("empo_low")
    empo_high: float = shared("empo_high")

    def __post_init__(self):
        stated_reward_range(self)
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


def stated_reward_range(settings: Any) -> None:
    """The own loop's reward range: an end left unstated (None) takes the paper's default (0 or 2),
    so a run's recorded config holds numbers, as before r_min/r_max could be null (TRL's
    ``GCPOConfig`` resolves them per trainer instead: ``gcpo_train.trl.reward_range``)."""
    from gcpo_analysis.vocab import R_MAX, R_MIN

    if settings.r_min is None:
        settings.r_min = R_MIN
    if settings.r_max is None:
        settings.r_max = R_MAX


def modulator_params(config: Any) -> dict:
    """Keyword arguments that ``modulate`` forwards to the modulator (names as modulators.py): each
    declared parameter from its settings field (``PARAM_KNOBS``: q_alpha <- q_hawkeye_alpha), then
    ``modulator_params`` verbatim over them."""
    params = {kwarg: getattr(config, name) for kwarg, name in PARAM_KNOBS.items()}
    params.update(config.modulator_params or {})
    return params


def needs_of(name: str) -> frozenset:
    """What the named modulator reads (``Modulator.needs``); refuses unknown names with choices."""
    from gcpo_analysis.measures.field_weights import trainer_refusal
    from gcpo_analysis.measures.modulators import MODULATORS
    from gcpo_analysis.measures.shuffled import split_arm

    modulator = MODULATORS.lookup(split_arm(name)[0])
    refusal = trainer_refusal(modulator.name, modulator.needs)
    if refusal:  # a feature the trainer does not compute: refused before any step
        raise ValueError(f"{refusal}; choose another modulator")
    return modulator.needs


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
        names: list[str] | None = None,
    ):
        """Modulated advantages and info of each group.

        rewards/texts/answers: one entry per group (length G each); token_entropy, logprobs,
        ratio_var, n_tokens: optional per-group arrays, used only when the modulator needs them.
        A '<modulator>:shuffled' arm permutes the step's ω across its groups with ``shuffle_seed``
        (``gcpo_analysis.measures.shuffled``). ``names`` (one per group, e.g. "query 'q3' at step
        2") lead a group's error, which otherwise names only its rollout. Returns (list of (G,)
        advantages, list of info dicts, stats dict).
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
                *self._shuffled(groups, params, shuffle_seed, names),
                {f"cluster_{k}": v for k, v in cluster_stats.items()},
            )
        advantages, infos = [], []
        for k, group in enumerate(groups):
            with _named_group(names, k):
                adv, info = modulate(
                    cfg.modulator,
                    group,
                    alpha_base=cfg.alpha_base,
                    r_min=cfg.r_min,
                    r_max=cfg.r_max,
                    eps=cfg.eps,
                    **params,
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

    def _shuffled(self, groups, params, seed, names=None):
        """Ã_k = ω_{π(k)} · A_k: the step's group weights permuted across its groups with unequal
        rewards (``shuffle_weights``); info keeps each group's own ω as ``omega_own``."""
        from gcpo_analysis.measures.advantages import grpo_advantages
        from gcpo_analysis.measures.modulators import group_weight
        from gcpo_analysis.measures.shuffled import control_of, shuffle_weights

        if seed is None:
            raise ValueError(f"modulator {self.config.modulator!r} needs the step's shuffle_seed")
        cfg, name = self.config, split_arm(self.config.modulator)[0]
        own, infos, adv = [], [], []
        for k, group in enumerate(groups):
            with _named_group(names, k):
                w, info = group_weight(
                    name, group, alpha_base=cfg.alpha_base, r_min=cfg.r_min, r_max=cfg.r_max, **params
                )
            own.append(float(w))
            infos.append(self._info({**info, "omega_own": float(w)}, group))
            adv.append(np.asarray(grpo_advantages(group.rewards, cfg.eps), dtype=np.float64))
        eligible = [bool(np.any(a != 0)) for a in adv]
        omega = shuffle_weights(own, eligible, seed, derange=control_of(cfg.modulator) == "deranged")
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
        names = [f"group {k} of the batch" for k in range(len(groups))]
        for k, group in enumerate(groups):
            with _named_group(names, k):  # group_weight checks the weight (weights_checked)
                w, info = group_weight(
                    cfg.modulator, group, alpha_base=cfg.alpha_base, r_min=cfg.r_min, r_max=cfg.r_max, **params
                )
            weights.append(w)
            infos.append(self._info(info, group))
        return np.array(weights, dtype=np.float64), infos, {f"cluster_{k}": v for k, v in cluster_stats.items()}


@contextlib.contextmanager
def _named_group(names: list[str] | None, k: int):
    """A ValueError raised for group k, led by the group's name (its query and step) when given."""
    try:
        yield
    except ValueError as err:
        if names is None:
            raise
        raise ValueError(f"{names[k]}: {err}") from err
