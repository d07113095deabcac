"""Hostile frames (gcpo_analysis.frames; issues "Trust" and 20): columns that are what they
claim, ids and numbers that are refused naming the row, one line per error. One test per probe;
the round-two probes each failed on the code before the issue (a57d336). The other hostile
tests live beside the tests of the module they attack (tests/**/test_*_hostile.py)."""

import json

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.cli import main
from gcpo_analysis.frames import FrameError, read_frame, validate_groups, validate_rollouts


def _cli(argv, capsys):
    capsys.readouterr()
    rc = main(argv)
    err = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    return rc, err


def _rollouts(completions, **extra):
    n = len(completions)
    return pd.DataFrame(
        {
            "query_id": ["q0"] * n,
            "rollout_id": range(n),
            "completion": completions,
            "answer": completions,
            "reward": [1.0] * n,
            **extra,
        }
    )


# ----------------------------------------------------------------------------- 4. columns
def test_conversational_completions_are_read_as_their_last_assistant_content():
    said = ["Paris", "London", "Paris", "Rome"]
    convo = [[{"role": "user", "content": "capital?"}, {"role": "assistant", "content": w}] for w in said]
    out = validate_rollouts(_rollouts(convo))
    assert out["completion"].tolist() == said and out["answer"].tolist() == said


def test_conversational_completions_score_as_distinct_answers(tmp_path, capsys):
    said = ["Paris", "London", "Paris", "Rome"]
    path = tmp_path / "trl.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": [{"role": "user", "content": "capital of France?"}],
                    "completion": [{"role": "assistant", "content": w}],
                    "reward": r,
                }
            )
            + "\n"
            for w, r in zip(said, [2.0, 0.0, 2.0, 0.0])
        )
    )
    rc, err = _cli(
        [
            "score",
            str(path),
            "-o",
            str(tmp_path / "g.parquet"),
            "--query-col",
            "prompt",
            "--measures",
            "se",
            "--judge",
            "lexical",
            "--full-completion",
        ],
        capsys,
    )
    assert rc == 0, err
    groups = pd.read_parquet(tmp_path / "g.parquet")
    p = np.array([2, 1, 1]) / 4  # three clusters: Paris x2, London, Rome
    assert len(groups) == 1 and groups["se"].iloc[0] == pytest.approx(-(p * np.log(p)).sum())


@pytest.mark.parametrize("cell", [5, ["a", "b"], {"x": 1}])
def test_a_non_text_completion_cell_is_refused_naming_column_and_row(cell):
    df = _rollouts(["a", "b", "c"])
    df["completion"] = pd.Series(["a", cell, "c"], dtype=object)
    with pytest.raises(FrameError, match=r"column 'completion' must hold text.*at row 1"):
        validate_rollouts(df)


def test_csv_ids_are_read_as_strings(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("query_id,rollout_id,completion,answer,reward\n01,0,a,a,1\n01,1,b,b,0\n1,0,c,c,1\n1,1,d,d,0\n")
    df = read_frame(path)
    assert sorted(df["query_id"].unique()) == ["01", "1"]
    assert df["answer"].tolist() == ["a", "b", "c", "d"]


def test_a_jsonl_line_that_is_an_array_is_one_line(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text('{"query_id": "q", "rollout_id": 0, "completion": "a", "answer": "a", "reward": 1}\n[1, 2]\n')
    rc, err = _cli(["score", str(path), "-o", str(tmp_path / "g.parquet"), "--measures", "rd"], capsys)
    assert rc == 2 and len(err) == 1 and "line 2" in err[0] and "JSON object" in err[0]


def test_reward_col_beside_an_existing_reward_column(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    rows = [
        {"query_id": "q", "completion": w, "answer": w, "reward": 0.0, "score": s}
        for w, s in zip("abcd", [2.0, 0.0, 2.0, 0.0])
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(UserWarning, match="replaced by the mapped"):
        rc, err = _cli(
            ["score", str(path), "-o", str(tmp_path / "g.parquet"), "--reward-col", "score", "--measures", "rd"], capsys
        )
    assert rc == 0, err
    assert pd.read_parquet(tmp_path / "g.parquet")["mean_reward"].iloc[0] == pytest.approx(1.0)


def test_one_column_for_completion_and_answer(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text(
        "".join(
            json.dumps({"query_id": "q", "text": w, "reward": r}) + "\n" for w, r in zip("abab", [2.0, 0.0, 2.0, 0.0])
        )
    )
    rc, err = _cli(
        [
            "score",
            str(path),
            "-o",
            str(tmp_path / "g.parquet"),
            "--completion-col",
            "text",
            "--answer-col",
            "text",
            "--measures",
            "se",
            "--judge",
            "lexical",
        ],
        capsys,
    )
    assert rc == 0, err
    assert pd.read_parquet(tmp_path / "g.parquet")["se"].iloc[0] == pytest.approx(np.log(2))


# ----------------------------------------------------------------------------- 5. numbers
def test_a_negative_grad_var_is_refused():
    with pytest.raises(FrameError, match=r"'grad_var' must be a finite number >= 0.*-0.5 at row 1"):
        validate_groups(pd.DataFrame({"query_id": ["a", "b"], "G": [4, 4], "grad_var": [0.1, -0.5]}))


# ----------------------------------------------------------------------------- ids and rewards
def _frame(**cols):
    base = {
        "query_id": np.repeat([0, 1], 2),
        "rollout_id": np.tile([0, 1], 2),
        "completion": ["a"] * 4,
        "answer": ["a"] * 4,
        "reward": [0.0, 1.0, 1.0, 2.0],
    }
    base.update(cols)
    return pd.DataFrame(base)


@pytest.mark.parametrize(
    "cols, msg",
    [
        ({"query_id": [0, None, 1, 1]}, "'query_id' is null at row 1"),
        (
            {"query_id": pd.Series([1, "1", 2, 2], dtype=object)},
            "'query_id' mixes types: 1 \\(number\\) at row 0 and '1' \\(text\\) at row 1",
        ),
        ({"rollout_id": pd.Series([0, "0", 0, 1], dtype=object)}, "'rollout_id' mixes types"),
        (
            {"reward": pd.Series([0.0, "1.5", 1.0, 2.0], dtype=object)},
            "'reward' must be numeric, got '1.5' \\(str\\) at row 1",
        ),
        ({"reward": [True, False, True, True]}, "'reward' must be numeric, got True \\(bool\\) at row 0"),
    ],
)
def test_bad_ids_and_rewards_name_the_row(cols, msg):
    with pytest.raises(FrameError, match=msg):
        validate_rollouts(_frame(**cols))


@pytest.mark.parametrize("ext", ["svg", "pdf", "png"])
def test_a_figure_drawn_twice_is_the_same_bytes(tmp_path, ext):
    """A rerun of a study must reproduce its figures byte for byte: SVG used to carry its
    creation date and randomly salted element ids, PDF its creation date."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gcpo_analysis.frames import write_figure

    fig, ax = plt.subplots()
    ax.plot([0, 1, 3], clip_on=True)
    ax.set_title("V against BoT")
    first = write_figure(fig, tmp_path / f"a.{ext}").read_bytes()
    second = write_figure(fig, tmp_path / f"b.{ext}").read_bytes()
    plt.close(fig)
    assert first == second


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_an_empty_file_is_named(tmp_path, suffix):
    """A 0-byte CSV gave pandas' "No columns to parse from file", without the file's name."""
    from gcpo_analysis.frames import read_table

    path = tmp_path / f"r{suffix}"
    path.write_bytes(b"")
    with pytest.raises(FrameError, match=f"{path.name}: the rollouts file is empty"):
        read_table(path)
