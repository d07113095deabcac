"""One command-line style: every --help renders, both flag spellings work, typos get close matches."""

import pytest

from gcpo_analysis.cli import build_parser, main


@pytest.mark.parametrize("command", [[], ["study"], ["score"], ["proofs"], ["train"], ["eval"], ["export"]])
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


def test_version_has_one_source(capsys):
    """`gcpo --version`, gcpo_analysis.__version__ and the installed metadata agree, and
    pyproject.toml reads the version from the package instead of repeating it."""
    import importlib.metadata

    tomllib = pytest.importorskip("tomllib")
    from pathlib import Path

    import gcpo_analysis

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"gcpo {gcpo_analysis.__version__}"
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gcpo_analysis.__version__"}
    assert importlib.metadata.version("gcpo") == gcpo_analysis.__version__


@pytest.mark.parametrize("flag", ["--group-size", "--group_size"])
def test_both_spellings_everywhere(flag):
    parser = build_parser()
    assert parser.parse_args(["train", flag, "4"]).cfg_group_size == 4
    assert parser.parse_args(["study", flag, "4"]).group_size == 4
    spelled = "--alpha-base" if "-" in flag[2:] else "--alpha_base"
    assert parser.parse_args(["score", "x.jsonl", "-o", "y.parquet", spelled, "0.3"]).alpha_base == 0.3


@pytest.mark.parametrize(
    "command, typo, suggestion", [(["train"], "--group-sise", "--group-size"), (["study"], "--n-querys", "--n-queries")]
)
def test_a_typo_gets_close_matches(command, typo, suggestion, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(command + [typo, "3"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"unknown option '{typo}'" in err and suggestion in err


def test_score_reads_a_trl_style_frame_without_renaming(tmp_path):
    import json

    import pandas as pd

    src = tmp_path / "trl.jsonl"
    rows = [
        {"prompt": f"q{q}", "completion": c, "reward": r}
        for q in range(3)
        for c, r in (("the king", 1.0), ("a city", 0.0), ("the king", 1.0), ("war", 0.0))
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "g.parquet"
    with pytest.warns(UserWarning, match="--r-max"):
        assert main(["score", str(src), "-o", str(out), "--query-col", "prompt", "--measures", "rd"]) == 0
    g = pd.read_parquet(out)
    assert list(g["query_id"]) == ["q0", "q1", "q2"] and (g["rd"] == 0.5).all()  # [0, 2] range by default
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert "--r-max" in meta["reward_range_warning"]
    assert main(["score", str(src), "-o", str(out), "--query-col", "prompt", "--measures", "rd", "--r-max", "1"]) == 0
    assert (pd.read_parquet(out)["rd"] == 1.0).all()


def test_score_needs_answers_only_for_measures_that_read_them(tmp_path, capsys):
    import json

    src = tmp_path / "trl.jsonl"
    src.write_text("".join(json.dumps({"prompt": "q", "completion": c, "reward": 1.0}) + "\n" for c in "ab"))
    rc = main(["score", str(src), "-o", str(tmp_path / "g.parquet"), "--query-col", "prompt", "--measures", "cd"])
    assert rc == 2 and "--answer-col" in capsys.readouterr().err


def test_plot_train_draws_the_curves_of_a_log(tmp_path, capsys):
    import json

    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {
            "step": s,
            "reward_mean": 0.1 * s,
            "frac_zero_std": 0.5,
            "kl": 0.01 * s,
            "loss": 0.2,
            "w_bot": 0.9,
            "w_rd": 1.1,
            "time_generate": 1.0,
            "time_step": 2.0,
        }
        for s in (1, 2, 3)
    ]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "rew')
    with pytest.warns(UserWarning, match="partial last line"):
        assert main(["plot-train", str(run)]) == 0
    assert (run / "plots" / "training.png").stat().st_size > 10_000 and (run / "plots" / "training.svg").exists()
    assert main(["plot-train", str(tmp_path / "nothing")]) == 2


def test_library_progress_is_logged_not_printed(capsys, caplog):
    """A library call reports progress through logging (silenceable in a notebook), not stdout;
    the gcpo command's configure_logging shows it on stderr as `[study] ...`."""
    import logging

    from gcpo_analysis.cli import configure_logging
    from gcpo_analysis.study.run import _Timer

    with caplog.at_level(logging.INFO, logger="gcpo_analysis"):
        with _Timer()("collect"):
            pass
    assert capsys.readouterr().out == ""
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("gcpo_analysis.study.run", logging.INFO, "collect ...")
    ]

    logger = logging.getLogger("gcpo_analysis")
    old_level = logger.level
    try:
        logger.setLevel(logging.NOTSET)
        configure_logging()
        configure_logging()  # idempotent: one handler, one line
        with _Timer()("statistics"):
            pass
        std = capsys.readouterr()
        assert std.out == "" and std.err == "[study] statistics ...\n"
        logger.setLevel(logging.WARNING)  # what a notebook user does to silence it
        with _Timer()("figures"):
            pass
        assert capsys.readouterr() == ("", "")
    finally:
        logger.setLevel(old_level)
