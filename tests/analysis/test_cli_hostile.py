"""Hostile input for the `gcpo` command line (issues "Trust" and 20): `gcpo score` never writes
over its input or into a run's rollouts, an OS error is one line naming the path and leaves no
temporary file, and --traceback shows the rest."""

from pathlib import Path

import pytest

from gcpo_analysis.cli import main


def _snapshot(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".gcpo")
    }


def _cli_text(argv, capsys):
    """(exit code, the command's error lines): library warnings on stderr are not error lines."""
    from gcpo_analysis.cli import main

    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    return rc, "\n".join(x for x in err.splitlines() if "Warning" not in x and not x.startswith("  "))


def _cli_error_lines(argv, capsys):
    capsys.readouterr()
    rc = main(argv)
    err = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    return rc, err


def test_score_refuses_to_write_over_its_input(rollouts_file, capsys):
    before = rollouts_file.read_bytes()
    assert main(["score", str(rollouts_file), "-o", str(rollouts_file), "--measures", "rd"]) == 2
    assert "is the input rollouts file" in capsys.readouterr().err
    assert rollouts_file.read_bytes() == before


@pytest.mark.parametrize("where", ["a folder", "under a file"])
def test_os_errors_are_one_line_naming_the_path_and_leave_no_litter(rollouts_file, tmp_path, capsys, where):
    if where == "a folder":
        out = tmp_path / "out.parquet"
        out.mkdir()
    else:
        out = rollouts_file / "out.parquet"
    assert main(["score", str(rollouts_file), "-o", str(out), "--measures", "rd"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err or str(out.parent) in err
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob("*.gcpo-tmp"))


def test_score_output_inside_a_runs_rollouts_is_refused(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from helpers.loop_setup import make

    make(tmp_path, "run", steps=1, checkpoint_every=1).train()
    run = tmp_path / "run"
    frame = run / "rollouts" / "step_000001.parquet"
    before = _snapshot(run)
    rc, err = _cli_text(
        ["score", str(frame), "-o", str(run / "rollouts" / "groups.parquet"), "--measures", "rd"], capsys
    )
    assert rc == 2 and "prunes and replaces" in err and _snapshot(run) == before


def test_traceback_flag_shows_the_rest(tmp_path, capsys):
    missing = tmp_path / "none.parquet"
    rc, err = _cli_error_lines(["score", str(missing), "-o", str(tmp_path / "g.parquet")], capsys)
    assert rc == 2 and len(err) == 1
    with pytest.raises(FileNotFoundError):
        main(["--traceback", "score", str(missing), "-o", str(tmp_path / "g.parquet")])


def test_score_defaults_leave_out_a_measure_whose_column_is_missing(rollouts_file, tmp_path, capsys):
    """Another tool's rollouts frame (no token_entropy column) failed with the defaults the help
    says are for any tool's frame; now that measure is left out, said and recorded. Asked for by
    name, it is still an error naming the column."""
    import json

    import pandas as pd

    out = tmp_path / "g.parquet"
    with pytest.warns(UserWarning, match="default measures left out: token_entropy \\(no 'token_entropy' column\\)"):
        assert main(["score", str(rollouts_file), "-o", str(out), "--judge", "lexical"]) == 0
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["default_measures_left_out"] == {"token_entropy": ["token_entropy"]}
    assert "token_entropy" not in pd.read_parquet(out).columns and "w_rd" in pd.read_parquet(out).columns
    rc, err = _cli_error_lines(
        ["score", str(rollouts_file), "-o", str(tmp_path / "h.parquet"), "--measures", "token_entropy,rd"], capsys
    )
    assert rc == 2 and "needs the rollouts column 'token_entropy'" in "\n".join(err)


def test_a_missing_column_error_lists_the_files_own_columns(tmp_path, capsys):
    """A groups frame fed back in was said to have 'rollout_id' and 'answer', which gcpo had
    derived itself; the error lists what the file holds."""
    frame = tmp_path / "w.jsonl"
    frame.write_text('{"query_id": "q", "G": 1, "mean_reward": 0.5}\n')
    rc, err = _cli_error_lines(["score", str(frame), "-o", str(tmp_path / "g.parquet")], capsys)
    said = "\n".join(err)
    assert rc == 2 and "missing required column(s) ['completion', 'reward']" in said
    assert "it has ['query_id', 'G', 'mean_reward']" in said


def test_score_never_replaces_a_json_file_it_did_not_write(rollouts_file, tmp_path, capsys):
    """-o user.parquet replaced the user's own user.meta.json with the sidecar, unasked."""
    import json

    mine = tmp_path / "user.meta.json"
    mine.write_text('{"a": 1}')
    out = tmp_path / "user.parquet"
    rc, err = _cli_error_lines(["score", str(rollouts_file), "-o", str(out), "--measures", "rd"], capsys)
    assert rc == 2 and "user.meta.json exists and was not written by gcpo score" in "\n".join(err)
    assert mine.read_text() == '{"a": 1}' and not out.exists()
    mine.unlink()  # a sidecar of gcpo score's own is replaced, as -o asks
    assert main(["score", str(rollouts_file), "-o", str(out), "--measures", "rd"]) == 0
    assert main(["score", str(rollouts_file), "-o", str(out), "--measures", "rd", "--alpha-base", "0.3"]) == 0
    assert json.loads(mine.read_text())["alpha_base"] == 0.3
