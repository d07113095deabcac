"""Inputs read as written: ids stay the strings written in every format ("01" and "1"
are two queries in a .json too), rollouts are ordered by the data ("2" before "10", as 2 before
10), "None"/"NA"/empty answers are text where the column is text, and the same data in JSON,
JSONL, Parquet and CSV give the same scores from `gcpo score`."""

import json

import pandas as pd
import pytest

from gcpo_analysis.cli import main
from gcpo_analysis.frames import id_order, read_table

TEXTS = ["None", "NA", "", "null", "nan", "N/A"]


def _rows():
    return [
        {
            "query_id": q,
            "rollout_id": str(r),
            "completion": f"{TEXTS[r % 6]} {r % 3}",
            "answer": TEXTS[r % 6],
            "reward": float(r % 3),
        }
        for q in ["01", "1", "10", "2"]
        for r in range(12)
    ]


def _write_all(folder, rows):
    df = pd.DataFrame(rows)
    df.to_json(folder / "r.jsonl", orient="records", lines=True)
    (folder / "r.json").write_text(json.dumps(rows))
    df.to_parquet(folder / "r.parquet")
    df.to_csv(folder / "r.csv", index=False)
    return ["r.jsonl", "r.json", "r.parquet", "r.csv"]


@pytest.mark.parametrize("name", ["r.json", "r.csv", "r.parquet", "r.jsonl"])
def test_ids_and_texts_are_read_as_written(tmp_path, name):
    _write_all(tmp_path, _rows())
    df = read_table(tmp_path / name)
    assert list(pd.unique(df["query_id"])) == ["01", "1", "10", "2"]  # "01" and "1" not merged
    assert df["answer"].tolist()[:6] == TEXTS  # text, not nulls


def test_the_same_data_in_every_format_scores_the_same(tmp_path, capsys):
    names = _write_all(tmp_path, _rows())
    for name in names:
        out = tmp_path / f"out_{name.replace('.', '_')}.jsonl"
        rc = main(["score", str(tmp_path / name), "-o", str(out), "--measures", "se,rd,cd,kle", "--judge", "lexical"])
        assert rc == 0, capsys.readouterr().err
    outs = [(tmp_path / f"out_{n.replace('.', '_')}.jsonl").read_text() for n in names]
    assert all(o == outs[0] for o in outs[1:])
    assert [json.loads(line)["query_id"] for line in outs[0].splitlines()] == ["01", "1", "10", "2"]


def test_rollouts_are_ordered_by_the_data_not_as_strings(tmp_path, capsys):
    """Rollout ids 0..11 as numbers (Parquet) and as strings (CSV, which reads ids as text) give
    one order, so one set of scores; a string sort put "10" before "2"."""
    rows = [
        {"query_id": "q", "rollout_id": r, "completion": f"w{r} " * (r + 1), "answer": f"a{r % 4}", "reward": r / 11}
        for r in range(12)
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "n.parquet")
    pd.DataFrame(rows).to_csv(tmp_path / "n.csv", index=False)
    for name in ("n.parquet", "n.csv"):
        assert (
            main(["score", str(tmp_path / name), "-o", str(tmp_path / f"{name}.jsonl"), "--measures", "cd,bot,kle"])
            == 0
        )
    a, b = (json.loads((tmp_path / f"{n}.jsonl").read_text()) for n in ("n.parquet", "n.csv"))
    assert a == b
    assert id_order(pd.Series(["10", "2", "01", "1", "b", "a"])).tolist() == [3, 2, 0, 1, 5, 4]
