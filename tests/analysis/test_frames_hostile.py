"""Hostile input, round two (issue 20), frames and numbers: columns that are what they claim,
numbers that are refused, bounded work, one line per error. One test per probe; each failed on
the code before the issue (a57d336)."""

import json
import time
import warnings

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


def test_unknown_modulator_params_are_refused_under_trl(tmp_path):
    pytest.importorskip("trl")
    from gcpo_train.trl import GCPOConfig

    with pytest.raises(ValueError, match="q_alfa.*accepted keys"):
        GCPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], modulator_params={"q_alfa": 50})


# ----------------------------------------------------------------------------- 5. numbers
def test_a_negative_grad_var_is_refused():
    with pytest.raises(FrameError, match=r"'grad_var' must be a finite number >= 0.*-0.5 at row 1"):
        validate_groups(pd.DataFrame({"query_id": ["a", "b"], "G": [4, 4], "grad_var": [0.1, -0.5]}))


def test_grpo_advantages_refuse_an_overflow():
    from gcpo_analysis.measures import grpo_advantages_batch
    from gcpo_analysis.measures.advantages import grpo_advantages

    with pytest.raises(ValueError, match="overflow"):
        grpo_advantages([1e308, -1e308, 1e308])
    with pytest.raises(ValueError, match="overflow"):
        grpo_advantages_batch([[1e308, -1e308, 1e308]])


def test_a_study_part_with_fewer_rollouts_than_g_is_refused(tmp_path):
    torch = pytest.importorskip("torch")
    from gcpo_analysis.study.collect import collect_rollouts
    from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

    tok = tiny_tokenizer()
    tok.pad_token = tok.pad_token or tok.eos_token
    model = tiny_causal_lm("llama", vocab_size=len(tok)).eval()
    queries = pd.DataFrame(
        {
            "query_id": ["a", "b"],
            "prompt": ["who is the king ?", "the city"],
            "references": [["the king"], ["city"]],
            "task": "qa_f1",
        }
    )
    kw = dict(G=3, max_new_tokens=3, grad_var=False, out_dir=tmp_path, progress=False)
    torch.manual_seed(0)
    collect_rollouts(model, tok, queries, **kw)
    part = [p for p in (tmp_path / "parts").glob("00000_*.parquet") if ".groups" not in p.name][0]
    pd.read_parquet(part).iloc[:2].to_parquet(part)  # a part of 2 rollouts, G = 3
    with pytest.raises(ValueError, match="holds 2 rollouts, not G = 3"):
        collect_rollouts(model, tok, queries, **kw)


# ----------------------------------------------------------------------------- 6. bounded work
def test_plot_train_downsamples_a_long_log(tmp_path):
    pytest.importorskip("matplotlib")
    from gcpo_train.plot_train import MAX_POINTS, plot_training

    n = 60_000
    steps = np.arange(1, n + 1)
    lines = [json.dumps({"step": int(s), "reward_mean": float(np.sin(s / 1000)), "kl": 0.0}) for s in steps]
    (tmp_path / "log.jsonl").write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    with pytest.warns(UserWarning, match=f"{n} logged steps drawn as {MAX_POINTS}"):
        paths = plot_training(tmp_path)
    assert time.perf_counter() - t0 < 30
    svg = [p for p in paths if str(p).endswith(".svg")][0]
    assert svg.stat().st_size < 2_000_000


def test_a_hub_name_goes_offline_first(monkeypatch):
    pytest.importorskip("transformers")
    from gcpo_analysis.models import load_policy

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(OSError, match="not in the local Hugging Face cache.*HF_HUB_OFFLINE"):
        load_policy("gcpo-test-org/no-such-model-xyz")
    assert time.perf_counter() - t0 < 5


# ----------------------------------------------------------------------------- 7. one line
def test_a_degenerate_top_split_reports_rho_and_says_why_it_skips(tmp_path):
    from gcpo_analysis.stats import gap_study

    rng = np.random.default_rng(0)
    n = 40
    frame = pd.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(n)],
            "G": 8,
            "grad_var": np.r_[np.zeros(36), rng.random(4) + 1],
            "cd": rng.random(n),
            "rd": rng.random(n),
        }
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = gap_study(frame, measures=["cd", "rd"], reference="rd", n_boot=50)
    assert np.isfinite(res.spearman["rho"]).all()
    assert res.retrieval["auc"].isna().all()
    assert any("AUC and precision skipped" in str(w.message) and "tied at the cut" in str(w.message) for w in caught)


def test_traceback_flag_shows_the_rest(tmp_path, capsys):
    missing = tmp_path / "none.parquet"
    rc, err = _cli(["score", str(missing), "-o", str(tmp_path / "g.parquet")], capsys)
    assert rc == 2 and len(err) == 1
    with pytest.raises(FileNotFoundError):
        main(["--traceback", "score", str(missing), "-o", str(tmp_path / "g.parquet")])
