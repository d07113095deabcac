"""Modulate a step's groups: prepare what the modulator needs for every group, call ``modulate``.

The trainer has no formula of its own (docs/conventions.md): weights and advantages come from
``gcpo_analysis.measures.modulators.modulate``, and its inputs from
``gcpo_analysis.measures.prepare.prepare_groups``, the batch builder the groups frame uses too —
one embedding call for all texts of the step, one batched greedy clustering over all groups,
nothing a modulator does not ask for (``Modulator.needs``).

Text that is embedded/clustered: the extracted answer for QA, the full completion for math
(``use_full_completion``, Appendix E).
"""

from __future__ import annotations

import numpy as np


def modulator_params(config) -> dict:
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

    if name not in MODULATORS:
        raise ValueError(f"unknown modulator {name!r}; choices: {', '.join(sorted(MODULATORS))}")
    return MODULATORS[name].needs


class GroupModulator:
    """Modulated advantages of a step's groups, for gcpo_train's loop and its TRL adapter.

    Holds the embedder and judge across steps: ``embedder``/``judge`` may be passed in (tests,
    benchmarks; an embedder needs only ``encode(texts)``); otherwise they are built from the
    config on first use, so plain GRPO never loads an embedding model.
    """

    def __init__(self, config, embedder=None, judge=None):
        self.config = config
        self.needs = needs_of(config.modulator)
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
    ):
        """Modulated advantages and info of each group.

        rewards/texts/answers: one entry per group (length G each); token_entropy, logprobs,
        ratio_var, n_tokens: optional per-group arrays, used only when the modulator needs them.
        Returns (list of (G,) advantages, list of info dicts, stats dict).
        """
        from gcpo_analysis.measures.modulators import modulate
        from gcpo_analysis.measures.prepare import prepare_groups

        cfg = self.config
        embedder, judge = self.tools()
        # the loop's advantages are float64 end to end (the groups frame keeps float32 embeddings)
        groups, cluster_stats = prepare_groups(
            texts,
            rewards,
            self.needs,
            embedder=embedder,
            judge=judge,
            nli_threshold=cfg.nli_threshold,
            embedding_dtype=np.float64,
            answers=answers,
            token_entropy=token_entropy,
            logprobs=logprobs,
            ratio_var=ratio_var,
            n_tokens=n_tokens,
        )
        params = modulator_params(cfg)
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
            if group.clusters is not None:
                info = {**info, "n_clusters": float(len(np.unique(group.clusters)))}
            advantages.append(adv)
            infos.append({key: float(v) for key, v in info.items()})
        return advantages, infos, {f"cluster_{k}": v for k, v in cluster_stats.items()}
