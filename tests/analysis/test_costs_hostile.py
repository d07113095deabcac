"""Bounded costs: every text is cut to MAX_TEXT_CHARS before it is embedded or judged,
with a warning and a count in `gcpo score`'s metadata; a group far larger than any training
setup is named in a warning before the O(G^2)/O(G^3) work."""

import json

import pandas as pd
import pytest

from gcpo_analysis.cli import main
from gcpo_analysis.measures import prepare
from gcpo_analysis.measures.prepare import MAX_TEXT_CHARS, prepare_groups


class Recording:
    def __init__(self):
        self.longest = 0

    def encode(self, texts):
        import numpy as np

        self.longest = max([self.longest, *map(len, texts)])
        return np.ones((len(texts), 3)) + np.arange(len(texts))[:, None] * [1, 0, 0]


def test_a_huge_answer_is_cut_before_embedding_and_counted(tmp_path, capsys):
    huge = "word " * (3 * MAX_TEXT_CHARS // 5)
    df = pd.DataFrame(
        {
            "query_id": ["q"] * 3,
            "rollout_id": [0, 1, 2],
            "completion": [huge, "b", "c"],
            "answer": [huge, "b", "c"],
            "reward": [0.0, 1.0, 2.0],
        }
    )
    df.to_parquet(tmp_path / "r.parquet")
    out = tmp_path / "g.parquet"
    with pytest.warns(UserWarning, match="1 rollout text\\(s\\) longer than 20,000 characters were cut"):
        assert (
            main(["score", str(tmp_path / "r.parquet"), "-o", str(out), "--measures", "cd,se", "--judge", "lexical"])
            == 0
        )
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["texts_cut"] == 1
    assert "texts_cut" not in meta["clustering"]


def test_the_embedder_never_sees_more_than_the_cap():
    enc = Recording()
    texts = [["x" * (MAX_TEXT_CHARS + 5), "short"]]
    with pytest.warns(UserWarning, match="cut"):
        groups, stats = prepare_groups(texts, [[0.0, 1.0]], {"embeddings"}, embedder=enc)
    assert enc.longest == MAX_TEXT_CHARS and stats == {"texts_cut": 1}
    _, stats = prepare_groups([["a", "b"]], [[0.0, 1.0]], {"embeddings"}, embedder=Recording())
    assert stats == {}


def test_a_group_far_larger_than_training_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "LARGE_GROUP", 8)
    G = 9
    df = pd.DataFrame(
        {
            "query_id": ["big"] * G + ["small"] * 2,
            "rollout_id": list(range(G)) + [0, 1],
            "completion": ["a"] * (G + 2),
            "answer": ["a"] * (G + 2),
            "reward": [float(i % 2) for i in range(G + 2)],
        }
    )
    df.to_parquet(tmp_path / "r.parquet")
    with pytest.warns(UserWarning, match="the group of query 'big' has G = 9 rollouts.*KLE an O\\(G\\^3\\)"):
        assert main(["score", str(tmp_path / "r.parquet"), "-o", str(tmp_path / "g.parquet"), "--measures", "rd"]) == 0
