"""``gcpo pilot NAME ARGS``: the pilots behind committed results, moved from scripts/ into the
package, run through the one command line; a refusal is its one-line error (exit 2)."""

import pytest

from gcpo_analysis.cli import main as gcpo
from gcpo_train.pilots.cli import PILOTS


def test_every_pilot_runs_its_own_help(capsys):
    for name in PILOTS:
        with pytest.raises(SystemExit) as stop:
            gcpo(["pilot", name, "--help"])
        assert stop.value.code == 0 and f"usage: gcpo pilot {name}" in capsys.readouterr().out


def test_a_pilot_refusal_is_one_line(tmp_path, capsys):
    existing = tmp_path / "test.jsonl"
    existing.write_text("")
    assert gcpo(["pilot", "boolq-as-qa", str(existing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gcpo pilot: error: ") and "exists; remove it" in err and "Traceback" not in err


def test_an_unknown_pilot_is_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit):
        gcpo(["pilot", "math-pilot"])
    assert "span-gate" in capsys.readouterr().err
