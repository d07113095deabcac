"""The one error line of a refused `gcpo` command, for the hostile-input tests."""

from gcpo_analysis.cli import main


def cli_error(argv, capsys) -> tuple[int, str]:
    """Run `gcpo argv` in-process; (exit code, its single "error:" line on stderr)."""
    capsys.readouterr()
    rc = main(argv)
    lines = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert len(lines) == 1, lines
    return rc, lines[0]


def cli_outcome(argv, capsys) -> tuple[int, str]:
    """Run `gcpo argv` in-process; (exit code, its "error:" line, or "" when it succeeded)."""
    capsys.readouterr()
    rc = main(argv)
    lines = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert len(lines) <= 1, lines
    return rc, "\n".join(lines)
