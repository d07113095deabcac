"""gcpo_train.pilots.choice_as_qa (a multiple-choice record as a QA record) and gcpo_train.pilots.choice_gate
(the learning gate against the base policy and against "always the k-th option"), on
hand-made records whose scores are worked out by hand."""

import json
import runpy
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
AS_QA = runpy.run_path(str(ROOT / "gcpo_train" / "pilots" / "choice_as_qa.py"))
GATE = runpy.run_path(str(ROOT / "gcpo_train" / "pilots" / "choice_gate.py"))


def test_a_record_becomes_qa_with_its_options_in_the_question():
    rec = {"passage": "Ann lost her keys.", "question": "How does Ann feel?", "options": "A. happy\nB. upset\nC. tall"}
    qa = AS_QA["as_qa"]({**rec, "answer": "B. upset"}, "f line 1")
    assert qa["answer"] == ["upset"] and qa["position"] == 1 and qa["passage"] == "Ann lost her keys."
    assert qa["question"] == "How does Ann feel?\nOptions:\n- happy\n- upset\n- tall"
    assert GATE["options_of"](qa["question"]) == ["happy", "upset", "tall"]


@pytest.mark.parametrize(
    "options, answer, match",
    [("A. x\nB. y", "C. z", "names none of the options"), ("x\ny", "A. x", "are not lines"), ("A. x", "A. x", "not")],
)
def test_malformed_records_are_refused_by_line(options, answer, match):
    with pytest.raises(SystemExit, match=f"f line 7: .*{match}"):
        AS_QA["as_qa"]({"question": "q", "options": options, "answer": answer}, "f line 7")


APPLES = [
    {"question": "q0\nOptions:\n- red apple\n- blue car", "passage": "p", "answer": ["red apple"]},
    {"question": "q1\nOptions:\n- red apple\n- blue car", "passage": "p", "answer": ["blue car"]},
]


def _choice_data(tmp_path, recs):
    """(the records as a QA data file, a writer of predictions files for its queries:
    preds(path, answers, scores) -> str(path))."""
    from gcpo_analysis.data import load_queries

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ids = list(load_queries("narrativeqa", path=str(data), split="test")["query_id"])
    refs = [r["answer"] for r in recs]

    def preds(path, answers, scores):
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"query_id": ids, "answer": answers, "score": scores, "references": refs}).to_parquet(path)
        return str(path)

    return str(data), preds


def test_the_gate_by_hand(tmp_path):
    data, write = _choice_data(
        tmp_path,
        [
            *APPLES,
            {"question": "q2\nOptions:\n- green tree\n- old house", "passage": "p", "answer": ["old house"]},
            {"question": "q3\nOptions:\n- green tree\n- old house", "passage": "p", "answer": ["old house"]},
        ],
    )

    def preds(name, answers, scores):
        return write(tmp_path / f"{name}.parquet", answers, scores)

    base = preds("base", ["I think so", "no", "a tree", "no idea"], [0.0, 0.0, 0.0, 0.0])
    trained = preds("trained", ["Red apple.", "blue car", "old house", "green tree"], [100.0, 100.0, 100.0, 0.0])
    row = GATE["gate"](str(data), str(trained), pd.read_parquet(base))
    # always option 0: 100, 0, 0, 0 -> 25; always option 1: 0, 100, 100, 100 -> 75 (the best)
    assert row["F1 always #0"] == pytest.approx(25.0) and row["F1 always #1"] == pytest.approx(75.0)
    assert row["F1"] == pytest.approx(75.0) and row["Acc"] == pytest.approx(75.0)
    assert row["copies option"] == "0:50% 1:50%"
    assert row["Δ vs best constant"] == pytest.approx(0.0) and row["Δ vs base"] == pytest.approx(75.0)
    # each option copied half the time; at random that scores .5·mean F1(option 1) + .5·mean F1(option 2)
    # = .5·25 + .5·75 = 50 against its 75: Δ = +25
    assert row["Δ vs own positions"] == pytest.approx(25.0)
    table = GATE["files_table"](str(data), str(base), [str(trained)]).splitlines()
    assert table[2].startswith("| base.parquet (base) | 0.0 | 0.0 |  |")
    assert table[3].startswith("| trained.parquet | 75.0 | 75.0 | +75.0 ") and "| +25.0 [" in table[3]
    first = GATE["gate"](str(data), str(base), None)
    assert first["copies option"] == "other:100%" and "Δ vs base" not in first


def test_the_curve_by_hand(tmp_path):
    """--curve: each evaluated step's gate with the training reward averaged since the previous
    evaluated step and that step's KL (worked by hand); a log missing a step is refused; the
    figure is written."""
    data, write = _choice_data(tmp_path, APPLES)

    def preds(name, answers, scores):
        return write(tmp_path / f"{name}.predictions.parquet", answers, scores)

    base = preds("base", ["hm", "hm"], [0.0, 0.0])
    later = preds("run_4", ["red apple", "blue car"], [100.0, 100.0])
    early = preds("run_2", ["red apple", "red apple"], [100.0, 0.0])
    log = tmp_path / "log.jsonl"
    rewards = [0.0, 1.0, 2.0, 1.0]
    log.write_text(
        "".join(json.dumps({"step": k + 1, "reward_mean": r, "kl": k / 10}) + "\n" for k, r in enumerate(rewards))
    )
    rows = GATE["curve_rows"](str(data), str(log), base, [later, early])
    assert [r["step"] for r in rows] == [2, 4]
    assert [r["reward"] for r in rows] == [pytest.approx(0.5), pytest.approx(1.5)]  # steps 1-2, then 3-4
    assert [r["kl"] for r in rows] == [pytest.approx(0.1), pytest.approx(0.3)]
    assert [r["F1"] for r in rows] == [pytest.approx(50.0), pytest.approx(100.0)]
    assert rows[1]["Δ vs base"] == pytest.approx(100.0) and rows[1]["Δ vs best constant"] == pytest.approx(50.0)
    table = GATE["curve_table"](str(data), str(log), base, [early, later]).splitlines()
    assert table[2].startswith("| 0 (base) | | | 0.0 |") and table[3].startswith("| 2 | 0.50 | 0.10 | 50.0 |")
    # another run, evaluated at step 4 only: Δ there, paired by query; ω from the rollouts beside the log
    other = preds("other_4", ["x", "blue car"], [0.0, 100.0])
    (tmp_path / "rollouts").mkdir()
    for k in range(1, 5):  # one group a step, rewards 0, 2: A = ∓1; the modulator doubled (then halved) them
        scale = 2.0 if k <= 2 else 0.5
        frame = {"step": k, "query_id": "q", "reward": [0.0, 2.0], "advantage": [-scale, scale]}
        pd.DataFrame(frame).to_parquet(tmp_path / "rollouts" / f"step_{k:06d}.parquet")
    rows = GATE["curve_rows"](str(data), str(log), base, [later, early], [other])
    assert [r["omega"] for r in rows] == ["2.00–2.00", "0.50–0.50"]
    assert "versus" not in rows[0] and rows[1]["versus"] == "+50.0 [+0.0, +100.0]"
    table = GATE["curve_table"](str(data), str(log), base, [early, later], [other]).splitlines()
    assert table[0].endswith("| ω p5–p95 since the previous row | Δ vs the other run [95% CI] |")
    assert table[4].endswith("| 0.50–0.50 | +50.0 [+0.0, +100.0] |")
    written = GATE["curve_figure"](str(data), base, [[early, later], [other]], str(tmp_path / "curve"))
    assert GATE["_run_name"](other) == "other"
    assert all(p.stat().st_size > 0 for p in written)
    log.write_text(json.dumps({"step": 1, "reward_mean": 0.0, "kl": 0.0}) + "\n")
    with pytest.raises(SystemExit, match=r"step\(s\) 2 not logged"):
        GATE["curve_rows"](str(data), str(log), base, [early])


def test_compare_table_reads_a_per_seed_base(tmp_path):
    """--compare on a folder whose base policy was evaluated once per seed (tiny models): each
    run is paired with its own seed's base, one base row per seed; a folder without any base is
    refused by name."""
    data, write = _choice_data(tmp_path, APPLES)

    def preds(path, scores):
        write(path, ["red apple", "x"], scores)

    folder = tmp_path / "cmp"
    preds(folder / "base" / "seed_0.predictions.parquet", [0.0, 0.0])
    preds(folder / "base" / "seed_1.predictions.parquet", [100.0, 0.0])
    for seed in (0, 1):
        preds(folder / "runs" / "none" / f"seed_{seed}" / "eval" / "step_000002.predictions.parquet", [100.0, 0.0])
        (folder / "runs" / "none" / f"seed_{seed}" / "done.json").write_text("{}")
    table = GATE["compare_table"](str(data), str(folder)).splitlines()
    assert table[2].startswith("| none | 0 | 2 | 50.0 | 50.0 | +50.0 ")  # against seed 0's base (F1 0)
    assert table[3].startswith("| none | 1 | 2 | 50.0 | 50.0 | +0.0 ")  # against seed 1's (F1 50)
    assert [line.split("|")[1:3] for line in table[4:]] == [[" base policy ", " 0 "], [" base policy ", " 1 "]]
    for path in (folder / "base").iterdir():
        path.unlink()
    with pytest.raises(SystemExit, match="no base-policy predictions"):
        GATE["compare_table"](str(data), str(folder))


def test_choice_dependence_against_a_naive_bootstrap():
    """choice_dependence's Δ = Σ_k cov(1[picks k], F1_k) and its CI against a loop that resamples
    queries and recomputes the position shares; 0 for a policy whose picks ignore the query (one
    position always), and large for one that always picks the best option."""
    import numpy as np

    rng = np.random.default_rng(1)
    f1 = rng.uniform(0, 100, (60, 3))
    on = np.eye(3)[rng.integers(0, 3, 60)]

    def naive(f1, on):
        return sum(np.mean(on[:, k] * f1[:, k]) - on[:, k].mean() * f1[:, k].mean() for k in range(3))

    got = GATE["choice_dependence"](f1, on)
    assert got["Δ vs own positions"] == pytest.approx(naive(f1, on))
    draws = [naive(f1[i], on[i]) for i in rng.integers(0, 60, (4000, 60))]
    low, high = (float(x) for x in got["CI own"].strip("[]").split(","))
    assert low == pytest.approx(np.percentile(draws, 2.5), abs=0.6)
    assert high == pytest.approx(np.percentile(draws, 97.5), abs=0.6)
    constant = GATE["choice_dependence"](f1, np.eye(3)[np.zeros(60, int)])
    assert constant == {"Δ vs own positions": pytest.approx(0.0), "CI own": "[+0.0, +0.0]"}
    best = GATE["choice_dependence"](f1, np.eye(3)[f1.argmax(1)])
    assert best["Δ vs own positions"] > 10 and float(best["CI own"].strip("[]").split(",")[0]) > 0
