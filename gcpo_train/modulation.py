"""Gather what a modulator needs for every group of a step and call ``modulate`` on each.

The trainer has no formula of its own (docs/conventions.md): weights and advantages come from
``gcpo_analysis.measures.modulators.modulate``. This module only batches the inputs — one
embedding call for all texts of the step, one batched greedy clustering over all groups — and
computes nothing a modulator does not ask for (``Modulator.needs``).

Text that is embedded/clustered: the extracted answer for QA, the full completion for math
(``use_full_completion``, Appendix E).
"""
from __future__ import annotations

import numpy as np


def modulator_params(config) -> dict:
    """Keyword arguments that ``modulate`` forwards to the modulator (names as modulators.py)."""
    params = dict(q_alpha=config.q_hawkeye_alpha, eg_alpha=config.eg_spo_alpha,
                  r2vpo_lambda=config.r2vpo_lambda, empo_low=config.empo_low,
                  empo_high=config.empo_high)
    params.update(config.modulator_params or {})
    return params


def needs_of(name: str) -> frozenset:
    """What the named modulator reads (``Modulator.needs``); refuses unknown names with choices."""
    from gcpo_analysis.measures.modulators import MODULATORS

    if name not in MODULATORS:
        raise ValueError(f"unknown modulator {name!r}; choices: {', '.join(sorted(MODULATORS))}")
    return MODULATORS[name].needs


class Measurer:
    """Holds the (lazily built) embedder and judge and modulates a step's groups.

    ``embedder``/``judge`` may be passed in (tests, benchmarks); otherwise they are built from
    the config on first use, so plain GRPO never loads an embedding model.
    """

    def __init__(self, config, embedder=None, judge=None):
        self.config = config
        self.needs = needs_of(config.modulator)
        self._embedder = embedder
        self._judge = judge

    @property
    def embedder(self):
        if self._embedder is None:
            from gcpo_analysis.measures.embed import Embedder

            self._embedder = Embedder(self.config.embedder)
        return self._embedder

    @property
    def judge(self):
        if self._judge is None:
            from gcpo_analysis.measures.judges import make_judge

            kwargs = {"embedder": self.embedder} if self.config.judge == "embedding" else {}
            self._judge = make_judge(self.config.judge, **kwargs)
        return self._judge

    def describe(self) -> dict:
        out = {"modulator": self.config.modulator, "needs": sorted(self.needs)}
        if self._embedder is not None and hasattr(self._embedder, "describe"):
            out["embedder"] = self._embedder.describe()
        if self._judge is not None and hasattr(self._judge, "describe"):
            out["judge"] = self._judge.describe()
        return out

    def modulate_groups(self, rewards: list[np.ndarray], texts: list[list[str]],
                        answers: list[list[str]], *, token_entropy=None, logprobs=None,
                        ratio_var=None, n_tokens=None):
        """Modulated advantages and info of each group.

        rewards/texts/answers: one entry per group (length G each); token_entropy, logprobs,
        ratio_var: optional per-group arrays, passed only when the modulator needs them.
        Returns (list of (G,) advantages, list of info dicts, stats dict).
        """
        from gcpo_analysis.measures.modulators import GroupRollouts, modulate

        cfg = self.config
        n = len(rewards)
        emb = [None] * n
        clusters = [None] * n
        stats: dict = {}
        if "embeddings" in self.needs:
            flat = [t for group in texts for t in group]
            E = np.asarray(self.embedder.encode(flat), dtype=np.float64)
            offsets = np.cumsum([0] + [len(g) for g in texts])
            emb = [E[offsets[k]:offsets[k + 1]] for k in range(n)]
        if "clusters" in self.needs:
            from gcpo_analysis.measures.clustering import batched_greedy_clusters

            clusters, cstats = batched_greedy_clusters(texts, self.judge, threshold=cfg.nli_threshold)
            stats.update({f"cluster_{k}": v for k, v in cstats.items()})

        def pick(values, field):
            return None if values is None or field not in self.needs else values

        te, lp, rv = pick(token_entropy, "token_entropy"), pick(logprobs, "logprobs"), pick(ratio_var, "ratio_var")
        params = modulator_params(cfg)
        advantages, infos = [], []
        for k in range(n):
            group = GroupRollouts(
                rewards=np.asarray(rewards[k], dtype=np.float64), embeddings=emb[k],
                clusters=clusters[k],
                token_entropy=None if te is None else np.asarray(te[k], dtype=np.float64),
                logprobs=None if lp is None else np.asarray(lp[k], dtype=np.float64),
                ratio_var=None if rv is None else np.asarray(rv[k], dtype=np.float64),
                answers=list(answers[k]),
                n_tokens=None if lp is None or n_tokens is None else np.asarray(n_tokens[k], dtype=np.float64),
            )
            adv, info = modulate(cfg.modulator, group, alpha_base=cfg.alpha_base, r_min=cfg.r_min,
                                 r_max=cfg.r_max, eps=cfg.eps, **params)
            adv = np.asarray(adv, dtype=np.float64)
            if adv.shape != group.rewards.shape or not np.isfinite(adv).all():
                raise ValueError(f"modulator {cfg.modulator!r} returned advantages of shape "
                                 f"{adv.shape} (finite: {np.isfinite(adv).all()}) for group {k}")
            if clusters[k] is not None:
                info = {**info, "n_clusters": float(len(np.unique(clusters[k])))}
            advantages.append(adv)
            infos.append({key: float(v) for key, v in info.items()})
        return advantages, infos, stats
