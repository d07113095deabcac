"""prepare_groups: the one measurement batch builder of score_groups, gcpo_train and the TRL
adapter, checked against a group-by-group construction; and the embedding judge's sharing of the
embedder, decided one way for every caller."""

from types import SimpleNamespace

import numpy as np
import pytest
from helpers.embedders import HashEmbedder

from gcpo_analysis.measures.clustering import greedy_nli_clusters
from gcpo_analysis.measures.judges import LexicalJudge
from gcpo_analysis.measures.prepare import judge_shares_embedder, measurement_tools, prepare_groups
from gcpo_analysis.measures.score import score_groups
from gcpo_analysis.vocab import CLUSTERS, EMBEDDINGS

TEXTS = [
    ["the king", "a king", "the city", "the king"],
    ["war", "the war ended", "love"],
    ["he", "he", "he", "she", "his father"],
]
REWARDS = [[0.0, 2.0, 1.0, 0.5], [1, 1, 0], [0.0, 0.5, 1.0, 1.5, 2.0]]
ANSWERS = [[t.split()[-1] for t in g] for g in TEXTS]
ENTROPY = [np.linspace(0.1, 1.0, len(g)) for g in TEXTS]
LOGPROBS = [-np.arange(1.0, len(g) + 1) for g in TEXTS]
LENGTHS = [np.full(len(g), 3.0) for g in TEXTS]


class EncodeOnly:
    """A user's embedder as gcpo_train accepts it: ``encode(texts)`` and nothing else."""

    def encode(self, texts):
        return HashEmbedder(dim=5).encode(texts)


def _naive(needs, threshold, dtype=None):
    """The groups one at a time, from the definitions: encode each group alone, cluster it alone."""
    out = []
    for k, texts in enumerate(TEXTS):
        e = HashEmbedder().encode(texts)
        out.append(
            dict(
                rewards=np.array(REWARDS[k], dtype=np.float64),
                embeddings=(e if dtype is None else e.astype(dtype)) if EMBEDDINGS in needs else None,
                clusters=greedy_nli_clusters(texts, LexicalJudge(), threshold=threshold) if CLUSTERS in needs else None,
                logprobs=LOGPROBS[k] if "logprobs" in needs else None,
                n_tokens=LENGTHS[k] if "logprobs" in needs else None,
                token_entropy=ENTROPY[k] if "token_entropy" in needs else None,
                ratio_var=None,
                answers=ANSWERS[k],
            )
        )
    return out


@pytest.mark.parametrize(
    "needs", [set(), {EMBEDDINGS}, {CLUSTERS}, {EMBEDDINGS, CLUSTERS, "logprobs"}, {CLUSTERS, "token_entropy"}]
)
@pytest.mark.parametrize("threshold, dtype", [(0.35, None), (0.8, np.float64)])
def test_prepare_groups_equals_the_group_by_group_construction(needs, threshold, dtype):
    groups, stats = prepare_groups(
        TEXTS,
        REWARDS,
        needs,
        embedder=HashEmbedder(),
        judge="lexical",
        nli_threshold=threshold,
        embedding_dtype=dtype,
        answers=ANSWERS,
        token_entropy=ENTROPY,
        logprobs=LOGPROBS,
        n_tokens=LENGTHS,
    )
    assert len(groups) == len(TEXTS) and (stats != {}) == (CLUSTERS in needs)
    for group, want in zip(groups, _naive(needs, threshold, dtype)):
        for field, value in want.items():
            got = getattr(group, field)
            if value is None:
                assert got is None, field
            elif field == "answers":
                assert got == value
            else:
                assert got.dtype == np.asarray(value).dtype and np.array_equal(got, value), field


def test_nothing_is_built_or_computed_that_needs_do_not_name():
    embedder = HashEmbedder()

    class NoJudge:
        name = "never"

        def entailment(self, premises, hypotheses):
            raise AssertionError("the judge was called")

        def describe(self):
            return {}

    groups, stats = prepare_groups(
        TEXTS,
        REWARDS,
        {"ratio_var"},
        embedder=embedder,
        judge=NoJudge(),
        token_entropy=ENTROPY,
        logprobs=LOGPROBS,
        n_tokens=LENGTHS,
    )
    assert embedder.calls == 0 and stats == {}
    assert all(
        g.embeddings is None
        and g.clusters is None
        and g.logprobs is None
        and g.n_tokens is None
        and g.token_entropy is None
        for g in groups
    )
    assert measurement_tools(set(), "unused-spec", "lexical") == (None, None)


def test_an_encode_only_embedder_is_used_as_it_is():
    groups, _ = prepare_groups(TEXTS, REWARDS, {EMBEDDINGS}, embedder=EncodeOnly())
    for group, texts in zip(groups, TEXTS):
        assert np.array_equal(group.embeddings, HashEmbedder(dim=5).encode(texts))
    with pytest.raises(ValueError, match="3 reward groups for 2 text groups"):
        prepare_groups(TEXTS[:2], REWARDS, {EMBEDDINGS}, embedder=EncodeOnly())


# ----------------------------------------------------------------------------- judge sharing
@pytest.mark.parametrize(
    "spec, shares",
    [
        ("embedding", True),
        (" Embedding ", True),
        ("EMBEDDING", True),
        ("lexical", False),
        ("nli", False),
        (LexicalJudge(), False),
    ],
)
def test_judge_shares_embedder(spec, shares):
    assert judge_shares_embedder(spec) is shares


def _settings(judge, modulator="bot"):
    return SimpleNamespace(
        modulator=modulator,
        embedder=None,
        judge=judge,
        nli_threshold=0.35,
        alpha_base=0.6,
        r_min=0.0,
        r_max=2.0,
        eps=1e-6,
        q_hawkeye_alpha=0.6,
        eg_spo_alpha=1.0,
        r2vpo_lambda=1.0,
        empo_low=0.0,
        empo_high=0.5,
        modulator_params=None,
        use_full_completion=None,
    )


@pytest.mark.parametrize("spec", ["embedding", " Embedding "])
def test_the_embedding_judge_uses_the_measures_embedder_everywhere(spec):
    """score_groups, gcpo_train's loop and the TRL adapter (both through GroupModulator) hand the
    embedding judge their own embedder: had either built its own, it would load the packaged
    MiniLM and never call ours for the clustering."""
    pytest.importorskip("trl")
    import pandas as pd

    from gcpo_train.modulation import GroupModulator
    from gcpo_train.trl import group_weights, modulation_settings

    rollouts = pd.DataFrame(
        {
            "query_id": np.repeat([0, 1, 2], [4, 3, 5]),
            "rollout_id": np.concatenate([np.arange(len(g)) for g in TEXTS]),
            "completion": sum(TEXTS, []),
            "answer": sum(TEXTS, []),
            "reward": np.concatenate(REWARDS),
        }
    )
    for_score = HashEmbedder()
    frame = score_groups(rollouts, "se", embedder=for_score, judge=spec, progress=False)
    assert for_score.calls > 0 and frame.attrs["gcpo"]["judge"]["kind"] == "embedding"

    loop = GroupModulator(_settings(spec, "se"), embedder=HashEmbedder())
    loop.modulate_groups(REWARDS, TEXTS, ANSWERS)
    embedder, judge = loop.tools()
    assert embedder.calls > 0 and judge.embedder.model is embedder

    trl = GroupModulator(modulation_settings(_settings(spec, "care")), embedder=HashEmbedder())
    group_weights(
        sum([g[:3] for g in TEXTS], []),
        np.concatenate([r[:3] for r in REWARDS]),
        3,
        group_modulator=trl,
        modulator="care",
    )
    assert trl.tools()[0].calls > 0


def test_group_modulator_measures_in_float64_and_names_cluster_stats():
    from gcpo_train.modulation import GroupModulator

    modulator = GroupModulator(_settings("lexical", "bot_rd"), embedder=EncodeOnly())
    advantages, infos, stats = modulator.modulate_groups(REWARDS, TEXTS, ANSWERS)
    assert [a.shape for a in advantages] == [(4,), (3,), (5,)] and all(a.dtype == np.float64 for a in advantages)
    assert {"bot", "w_bot", "rd", "w_rd", "n_clusters"} <= set(infos[0])
    assert stats and all(key.startswith("cluster_") for key in stats)
    assert modulator.describe()["judge"]["kind"] == "lexical"
