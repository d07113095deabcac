"""The measurement batch: the texts and rewards of many groups in, one ``GroupFeatures`` each out.

One builder serves every caller — the groups frame (``score.score_groups``), gcpo_train's loop
and its TRL adapter (``gcpo_train.modulation.GroupModulator``) — so a modulator sees the same
inputs wherever it runs. Only what ``needs`` names is computed (``Modulator.needs``, the names
of ``vocab``): ``EMBEDDINGS``, the vectors mu_i of all groups from one batched ``encode``
(Section 3.4); ``CLUSTERS``, the greedy entailment clusters of all groups in lock-step, one
judge call per round (Appendix E, threshold ``nli_threshold``); per-rollout token entropies,
log-probabilities and policy-ratio variances only when named too.

The embedding judge reuses the measures' embedder, so one model is loaded: the judge spec
'embedding' in any case or spacing (``judge_shares_embedder``) decides it, for every caller.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..vocab import CLUSTERS, EMBEDDINGS, NLI_THRESHOLD
from .clustering import batched_greedy_clusters
from .dispersion import reward_array
from .embed import embed_groups, make_embedder
from .judges import make_judge
from .modulators import GroupFeatures

# Bounded costs: a text is cut to MAX_TEXT_CHARS before it is embedded, judged or
# tokenised (a 20 MB answer took `gcpo score` to 3.6 GB); the encoders read at most 256-512
# tokens (~1-2k characters) anyway, so only the lexical judges see less. Each cut is counted in
# the stats ("texts_cut", in `gcpo score`'s metadata and the training log) and warned about.
MAX_TEXT_CHARS = 20_000
# Groups far larger than any GRPO setup (G = 4-64): the pairwise measures cost O(G^2) memory and
# KLE an O(G^3) eigendecomposition, so such a group is named in a warning before the work starts.
LARGE_GROUP = 1024


def cap_texts(groups: Sequence[Sequence[str]] | None, limit: int = MAX_TEXT_CHARS) -> tuple[list | None, set]:
    """(the groups' texts with each cut to ``limit`` characters, the (group, rollout) cut)."""
    if groups is None:
        return None, set()
    cut: set = set()
    out = []
    for k, g in enumerate(groups):
        row = []
        for i, t in enumerate(g):
            if isinstance(t, str) and len(t) > limit:
                t = t[:limit]
                cut.add((k, i))
            row.append(t)
        out.append(row)
    return out, cut


def _warn_costs(texts: Sequence[Sequence[str]], n_cut: int, group_ids: Sequence | None = None) -> None:
    import warnings

    if n_cut:
        warnings.warn(
            f"{n_cut} rollout text(s) longer than {MAX_TEXT_CHARS:,} characters were cut to that length before "
            f"embedding and judging (counted as texts_cut in the output's metadata)",
            stacklevel=3,
        )
    sizes = [len(g) for g in texts]
    if sizes and max(sizes) > LARGE_GROUP:
        k = int(np.argmax(sizes))
        which = f"group {k}" if group_ids is None else f"the group of query {group_ids[k]!r}"
        warnings.warn(
            f"{which} has G = {sizes[k]:,} rollouts, far more than any GRPO setup (G = 4-64): the pairwise "
            f"measures need G^2 = {sizes[k] ** 2:,} entries and KLE an O(G^3) eigendecomposition; "
            f"expect a long run (split the group, or drop kle)",
            stacklevel=3,
        )


def judge_shares_embedder(judge: object) -> bool:
    """True when ``judge`` is the spec of the embedding judge, which then scores with the
    measures' embedder instead of loading its own."""
    return isinstance(judge, str) and judge.strip().lower() == "embedding"


def measurement_tools(needs, embedder=None, judge=None):
    """(embedder, judge) that ``needs`` calls for; None for what it does not.

    embedder: an object with ``encode(texts)`` is used as it is; a spec (None for the packaged
    MiniLM, a name or a path) becomes ``make_embedder(spec)``, built only when the embeddings or
    the embedding judge need it. judge: a spec or a judge object, through ``make_judge``.
    """
    wants_embedder = EMBEDDINGS in needs or (CLUSTERS in needs and judge_shares_embedder(judge))
    if not wants_embedder:
        embedder = None
    elif embedder is None or isinstance(embedder, str):
        embedder = make_embedder(embedder)
    if CLUSTERS not in needs:
        return embedder, None
    return embedder, make_judge(judge, embedder=embedder) if judge_shares_embedder(judge) else make_judge(judge)


def _per_rollout(kept: dict, k: int) -> dict[str, Any]:
    """Group k's per-rollout arrays of ``kept`` (token_entropy, logprobs, ...), as float64."""
    return {name: np.asarray(values[k], dtype=np.float64) for name, values in kept.items()}


def prepare_groups(
    texts: Sequence[Sequence[str]],
    rewards: Sequence[ArrayLike],
    needs: Collection[str],
    *,
    embedder: Any = None,
    judge: Any = None,
    nli_threshold: float = NLI_THRESHOLD,
    embedding_dtype: DTypeLike | None = None,
    answers: Sequence | None = None,
    token_entropy: Sequence | None = None,
    logprobs: Sequence | None = None,
    ratio_var: Sequence | None = None,
    n_tokens: Sequence | None = None,
    progress: bool = False,
    group_ids: Sequence | None = None,
) -> tuple[list[GroupFeatures], dict]:
    """One ``GroupFeatures`` per group, and the clustering's counts with ``texts_cut`` (the texts
    cut to ``MAX_TEXT_CHARS``) when any was cut ({} without clustering and cuts).

    texts: one list of G_q strings per group, what is embedded and clustered (the extracted
    answer for QA, the full completion for math). A judge that compares final answers
    (``clusters_answers``: the math judge, answer equivalence) clusters ``answers`` instead:
    two full derivations are never "equivalent", their final answers are. rewards: one array of G_q per group.
    needs: names from ``Modulator.needs`` / ``score.MEASURES``. embedder, judge: objects or
    specs (``measurement_tools``). embedding_dtype: cast the embeddings (None keeps the
    embedder's dtype). answers, token_entropy, logprobs, ratio_var, n_tokens: optional, one
    entry per group; token_entropy, logprobs and ratio_var are kept only when ``needs`` names
    them, and n_tokens (SE's length normalisation) only with the log-probabilities. group_ids:
    what the warnings call each group (a frame's query ids; None: its position).
    """
    n = len(texts)
    if len(rewards) != n:
        raise ValueError(f"{len(rewards)} reward groups for {n} text groups")
    checked = []  # before anything is embedded or judged
    for k, r in enumerate(rewards):
        try:
            checked.append(reward_array(r))
        except ValueError as err:
            raise ValueError(f"group {k if group_ids is None else group_ids[k]!r}: {err}") from None
    embedder, judge = measurement_tools(needs, embedder, judge)
    capped, cut = cap_texts(texts)
    answers, cut_answers = cap_texts(answers)
    texts = capped if capped is not None else texts
    n_cut = len(cut | cut_answers)  # rollouts whose text or answer was cut
    _warn_costs(texts, n_cut, group_ids)
    embeddings: list = [None] * n
    clusters: list = [None] * n
    stats: dict = {"texts_cut": n_cut} if n_cut else {}
    if EMBEDDINGS in needs:
        embeddings = embed_groups(embedder, texts)
        if embedding_dtype is not None:
            embeddings = [np.asarray(e, dtype=embedding_dtype) for e in embeddings]
    if CLUSTERS in needs:
        clustered = texts
        if getattr(judge, "clusters_answers", False):
            if answers is None:
                raise ValueError(
                    f"the {judge.describe()['kind']!r} judge compares final answers: pass answers= "
                    "(the extracted answer of every rollout)"
                )
            clustered = answers
        clusters, counts = batched_greedy_clusters(clustered, judge, threshold=nli_threshold, progress=progress)
        stats.update(counts)
    given = dict(token_entropy=token_entropy, logprobs=logprobs, ratio_var=ratio_var)
    kept = {name: values for name, values in given.items() if values is not None and name in needs}
    if "logprobs" in kept and n_tokens is not None:
        kept["n_tokens"] = n_tokens
    groups = [
        GroupFeatures(
            rewards=checked[k],
            embeddings=embeddings[k],
            clusters=clusters[k],
            answers=None if answers is None else list(answers[k]),
            **_per_rollout(kept, k),
        )
        for k in range(n)
    ]
    return groups, stats
