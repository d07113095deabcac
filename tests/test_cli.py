"""One command-line style: every --help renders, both flag spellings work, typos get close matches."""
import pytest

from gcpo_analysis.cli import build_parser, main


@pytest.mark.parametrize("command", [[], ["study"], ["score"], ["proofs"], ["train"], ["eval"]])
def test_every_help_renders(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(command + ["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "usage: gcpo" in out and "(default: None) (default" not in out


def test_version(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith("gcpo ")


@pytest.mark.parametrize("flag", ["--group-size", "--group_size"])
def test_both_spellings_everywhere(flag):
    parser = build_parser()
    assert parser.parse_args(["train", flag, "4"]).cfg_group_size == 4
    assert parser.parse_args(["study", flag, "4"]).group_size == 4
    spelled = "--alpha-base" if "-" in flag[2:] else "--alpha_base"
    assert parser.parse_args(["score", "x.jsonl", "-o", "y.parquet", spelled, "0.3"]).alpha_base == 0.3


@pytest.mark.parametrize("command, typo, suggestion", [(["train"], "--group-sise", "--group-size"),
                                                       (["study"], "--n-querys", "--n-queries")])
def test_a_typo_gets_close_matches(command, typo, suggestion, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(command + [typo, "3"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"unknown option '{typo}'" in err and suggestion in err
