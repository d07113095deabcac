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
