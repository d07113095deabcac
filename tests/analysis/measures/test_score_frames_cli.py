"""score_groups against per-group calls; frame round trips and errors; the `gcpo score` command."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.embedders import HashEmbedder

from gcpo_analysis import frames
from gcpo_analysis.cli import main
from gcpo_analysis.measures import dispersion as D
from gcpo_analysis.measures.clustering import greedy_nli_clusters
from gcpo_analysis.measures.entropy import kernel_language_entropy, semantic_entropy
from gcpo_analysis.measures.judges import LexicalJudge
from gcpo_analysis.measures.score import score_groups

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "rollouts_small.jsonl"


@pytest.fixture(scope="module")
def rollouts():
    return frames.read_frame(EXAMPLE)


def test_score_groups_matches_per_group_functions(rollouts):
    emb = HashEmbedder()
    groups = score_groups(rollouts, "all", embedder=emb, judge="lexical", progress=False)
    assert list(groups["query_id"]) == list(pd.unique(rollouts["query_id"]))
    from gcpo_analysis.measures.embed import make_embedder

    embedder = make_embedder(emb)
    for row in groups.itertuples():
        g = rollouts[rollouts.query_id == row.query_id].sort_values("rollout_id")
        e = embedder.encode(g["answer"].tolist())
        c = greedy_nli_clusters(g["answer"].tolist(), LexicalJudge())
        G = len(g)
        a = 0.6 / math.log(G)
        assert row.G == G
        assert row.cd == pytest.approx(D.cosine_dispersion(e), abs=1e-6)
        # the batched BoT sums the float32 embeddings in another order (1.8e-9 apart on an AMD EPYC runner)
        assert row.bot == pytest.approx(D.barycentric_transport(e, c), abs=1e-8)
        assert row.rd == pytest.approx(D.reward_dispersion(g["reward"]))
        assert row.w_cd == pytest.approx(max(0, 1 - a * row.cd**2))
        assert row.w_rd == pytest.approx(1 + a * row.rd)
        assert row.se == pytest.approx(semantic_entropy(c))  # discrete: empirical cluster mass
        assert row.se_lw == pytest.approx(semantic_entropy(c, g["logprob"].to_numpy()))
        assert row.kle == pytest.approx(kernel_language_entropy(embeddings=e))
        assert row.n_clusters == len(set(c))
        assert row.token_entropy == pytest.approx(g["token_entropy"].mean())
        assert row.pe == pytest.approx(-g["logprob"].mean())
        assert row.success_rate == pytest.approx(g["success"].mean())
    meta = groups.attrs["gcpo"]
    assert (
        meta["judge"]["kind"] == "lexical"
        and meta["se"].startswith("discrete")
        and meta["se_lw"].startswith("likelihood")
    )


def test_group_of_one_scores_zero_with_a_warning():
    df = pd.DataFrame(dict(query_id=["a"], rollout_id=[0], completion=["x"], answer=["x"], reward=[1.0]))
    with pytest.warns(UserWarning, match="G = 1"):
        g = score_groups(df, "cd,bot,rd,se", embedder=HashEmbedder(), judge="lexical", progress=False)
    row = g.iloc[0]
    assert row.cd == 0 and row.bot == 0 and row.rd == 0 and row.se == 0
    assert row.w_cd == 1 and row.w_bot == 1 and row.w_rd == 1


def test_score_errors_name_the_problem(rollouts):
    with pytest.raises(ValueError, match=r"unknown measure\(s\) \['entropy'\]"):
        score_groups(rollouts, "entropy,cd", progress=False)
    with pytest.raises(ValueError, match="needs the rollouts column 'token_entropy'"):
        score_groups(rollouts.drop(columns="token_entropy"), "token_entropy", progress=False)
    bad = rollouts.copy()
    bad.loc[5, "reward"] = 2.5
    with pytest.raises(ValueError, match="outside the declared range"):
        score_groups(bad, "rd", progress=False)


def test_frame_round_trip(tmp_path, rollouts):
    for suffix in (".parquet", ".jsonl"):
        path = frames.write_frame(rollouts, tmp_path / f"r{suffix}")
        back = frames.read_frame(path)
        pd.testing.assert_frame_equal(back.reset_index(drop=True), rollouts.reset_index(drop=True), check_dtype=False)
        assert back["references"].iloc[0] == ["Paris"]


def test_bad_frames_name_column_and_row(tmp_path, rollouts):
    with pytest.raises(frames.FrameError, match=r"missing required column\(s\) \['reward'\]"):
        frames.validate_rollouts(rollouts.drop(columns="reward"))
    bad = rollouts.copy()
    bad.loc[3, "reward"] = np.nan
    with pytest.raises(frames.FrameError, match=r"'reward' has a non-finite value nan at row 3 \(query_id='nqa-1'\)"):
        frames.validate_rollouts(bad)
    dup = pd.concat([rollouts.iloc[:2], rollouts.iloc[:1]])
    with pytest.raises(frames.FrameError, match="duplicate"):
        frames.validate_rollouts(dup)
    p = tmp_path / "broken.jsonl"
    p.write_text('{"query_id": "a"}\n{not json\n')
    with pytest.raises(frames.FrameError, match="broken.jsonl, line 2"):
        frames.read_frame(p)
    with pytest.raises(frames.FrameError, match="'G' must be an integer >= 1"):
        frames.validate_groups(pd.DataFrame({"query_id": ["a"], "G": [0]}))


def test_cli_score_writes_groups_and_metadata(tmp_path):
    out = tmp_path / "groups.parquet"
    rc = main(["score", str(EXAMPLE), "-o", str(out), "--measures", "rd,se", "--judge", "lexical", "--csv"])
    assert rc == 0
    g = pd.read_parquet(out)
    assert {"query_id", "G", "rd", "w_rd", "se", "n_clusters"} <= set(g.columns) and len(g) == 4
    assert (tmp_path / "groups.csv").exists()
    meta = json.loads((tmp_path / "groups.meta.json").read_text())
    assert meta["judge"]["kind"] == "lexical"
    from gcpo_analysis import __version__

    assert meta["environment"]["gcpo"] == __version__ and "git_commit" in meta["environment"]


def test_cli_score_bad_input_is_one_clear_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"query_id": "q", "rollout_id": 0, "completion": "x", "answer": "x"}) + "\n")
    assert main(["score", str(bad), "-o", str(tmp_path / "g.parquet")]) == 2
    err = capsys.readouterr().err
    assert "missing required column(s) ['reward']" in err
    assert not (tmp_path / "g.parquet").exists()
    assert (
        main(["score", str(EXAMPLE), "-o", str(tmp_path / "g.parquet"), "--judge", "oracle", "--measures", "se"]) == 2
    )
    assert "unknown judge 'oracle'" in capsys.readouterr().err


def test_cli_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for cmd in ("study", "score", "proofs", "train", "eval"):
        assert cmd in text
