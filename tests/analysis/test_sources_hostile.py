"""Errors that name their source: an
out-of-range reward is named by its row and query, a file that is not UTF-8 by its name and
line, YAML nested too deeply by its file (or its flag), a CSV input beside the Parquet output is
not mistaken for the output, and a temperature whose logits overflow float32 is refused at the
boundary naming the key. Each test failed on the code before its fix (e498d2b)."""

import json

import pandas as pd
import pytest
from helpers.cli_error import cli_error

from gcpo_analysis.cli import main

ROLLOUTS = "examples/rollouts_small.jsonl"


def _rollouts(root):
    from pathlib import Path

    return pd.read_json(Path(__file__).resolve().parents[2] / ROLLOUTS, lines=True)


def test_an_out_of_range_reward_is_named_by_its_row_and_query(tmp_path, capsys):
    """The error said "reward np.float64(5.0) at index (0, 5)": a position in an internal array."""
    df = _rollouts(tmp_path)
    df.loc[5, "reward"] = 5.0
    path = tmp_path / "r.jsonl"
    df.to_json(path, orient="records", lines=True)
    rc, line = cli_error(["score", str(path), "-o", str(tmp_path / "o.parquet"), "--measures", "rd"], capsys)
    qid, rid = df.loc[5, "query_id"], int(df.loc[5, "rollout_id"])
    assert rc == 2 and f"reward 5 at row 5 (query_id={qid!r}, rollout_id={rid})" in line
    assert "index" not in line and "np." not in line and "--r-max" in line
    assert not (tmp_path / "o.parquet").exists()


def test_a_csv_input_beside_the_parquet_output_is_not_refused(tmp_path, capsys):
    """score r.csv -o r.parquet was refused as if the output were the input: the CSV beside -o is
    written only with --csv (and then the refusal stands)."""
    src = tmp_path / "r.csv"
    _rollouts(tmp_path).to_csv(src, index=False)
    before = src.read_bytes()
    assert main(["score", str(src), "-o", str(tmp_path / "r.parquet"), "--measures", "rd"]) == 0
    assert src.read_bytes() == before and (tmp_path / "r.parquet").exists()
    rc, line = cli_error(["score", str(src), "-o", str(tmp_path / "r.parquet"), "--measures", "rd", "--csv"], capsys)
    assert rc == 2 and "is the input rollouts file" in line and src.read_bytes() == before


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".json"])
def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path, capsys, suffix):
    """The error was the decoder's "'utf-8' codec can't decode byte 0xff", naming no file."""
    path = tmp_path / f"r{suffix}"
    good = '{"query_id": "q", "rollout_id": 0}\n'
    path.write_bytes(good.encode() + b'{"query_id": "\xff"}\n')
    rc, line = cli_error(["score", str(path), "-o", str(tmp_path / "o.parquet"), "--measures", "rd"], capsys)
    assert rc == 2 and f"{path}: line 2" in line and "not UTF-8" in line and "0xff" in line


def test_a_config_that_is_not_utf8_is_named(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"model: tiny:llama\ndataset: narr\xe9\n")
    for command in (["train", "--config", str(path)], ["compare", "--config", str(path), "--output", "x"]):
        rc, line = cli_error(command, capsys)
        assert rc == 2 and f"{path}: line 2" in line and "not UTF-8" in line


def test_yaml_nested_too_deeply_names_its_file_or_flag(tmp_path, capsys):
    """A RecursionError with no file name, and through a flag value a raw traceback."""
    deep = "[" * 5000 + "]" * 5000
    path = tmp_path / "deep.yaml"
    path.write_text(f"steps: {deep}\n")
    rc, line = cli_error(["train", "--config", str(path)], capsys)
    assert rc == 2 and str(path) in line and "nested too deeply" in line
    block = tmp_path / "block.yaml"
    block.write_text("a:\n" + "".join("  " * i + "b:\n" for i in range(1, 3000)))
    rc, line = cli_error(["train", "--config", str(block)], capsys)
    assert rc == 2 and str(block) in line and "nested too deeply" in line
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--steps", deep])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --steps" in err and "nested too deeply" in err
    assert "Traceback" not in err and deep not in err
    rc, line = cli_error(["compare", "--config", str(path), "--output", str(tmp_path / "c")], capsys)
    assert rc == 2 and str(path) in line


@pytest.mark.parametrize("value", ["1e-45", "1e-31", "0"])
def test_a_temperature_whose_logits_overflow_float32_is_refused_naming_the_key(tmp_path, capsys, value):
    """temperature: 1e-45 was accepted and failed at step 1 inside torch.multinomial."""
    path = tmp_path / "c.yaml"
    path.write_text(f"model: tiny:llama\ndataset: narrativeqa\ntemperature: {value}\n")
    rc, line = cli_error(["train", "--config", str(path), "--output_dir", str(tmp_path / "run")], capsys)
    assert (
        rc == 2 and "temperature must be" in line and str(value) in line
    )  # the float32 edge or the >= 1e-30 rule names the key
    assert not (tmp_path / "run").exists()


def test_the_smallest_temperature_allowed_samples(tmp_path):
    """At the bound (1e-30) the loop samples and logs a finite step (near-greedy)."""
    pytest.importorskip("peft")
    from helpers.loop_setup import make

    rows = make(tmp_path, "run", steps=1, temperature=1e-30).train()
    assert len(rows) == 1 and all(pd.notna(rows[0][k]) for k in ("reward_mean", "loss"))
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["temperature"] == 1e-30
