"""Hostile input, ``gcpo compare``: a comparison folder is its own truth.
A refused argument writes nothing, a finished run is checked against the comparison by its own
run.json, a run killed during its final evaluation resumes by evaluating, and every error names
its source (the flag, or the config key and file). Each test failed on the code before its fix
(e498d2b)."""

import json
import re

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")


def _cli(argv, capsys) -> tuple[int, str]:
    from helpers.cli_error import cli_outcome

    return cli_outcome(argv, capsys)


def _comparison(tmp_path, seeds=(0,), arms=("none",), eval_every=1, **kw):
    """helpers.loop_setup.comparison's tiny comparison; ``eval_every=0`` evaluates the last step
    after training (the evaluation a kill can interrupt after the last checkpoint)."""
    from helpers.loop_setup import comparison, loop_config

    from gcpo_train.config import TrainConfig

    cmp = comparison(TrainConfig(**{**loop_config(tmp_path, "unused"), **kw}), tmp_path / "cmp", arms, seeds)
    cmp.eval_every = eval_every
    return cmp


def _config(tmp_path, compare: str = "") -> str:
    path = tmp_path / "c.yaml"
    path.write_text(f"model: tiny:llama\ndataset: narrativeqa\nsteps: 1\n{compare}")
    return str(path)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--seeds=-1"], "--seeds"),
        (["--seeds", "0", "--split_seed=-3"], "--split_seed"),
        (["--seeds", "0", "--eval_every=-2"], "--eval_every"),
    ],
)
def test_a_refused_argument_writes_no_compare_json(tmp_path, capsys, flags, named):
    """--seeds=-1 and --split_seed=-3 were written to compare.json before being refused, and every
    later correct command in that folder then failed on the mismatch."""
    out = tmp_path / "cmp"
    rc, err = _cli(["compare", "--config", _config(tmp_path), "--output", str(out), *flags], capsys)
    assert rc == 2 and named in err
    assert not (out / "compare.json").exists()


@pytest.mark.parametrize(
    ("seeds", "named"),
    [
        (str(10**23), "--seeds: seed 100000000000000000000000 must fit a 64-bit integer"),
        ("0,,1", "--seeds '0,,1': an empty item"),
        ("0,1,", "--seeds '0,1,': an empty item"),
    ],
)
@pytest.mark.parametrize("mode", ["--report_only", "--plan"])
def test_a_seed_beyond_int64_or_an_empty_seed_item_is_refused_by_the_flag(tmp_path, capsys, seeds, named, mode):
    """--seeds 10^23 was refused as "seed must fit a 64-bit integer", naming no flag, and
    --seeds 0,,1 dropped the empty item and ran (or planned) seeds 0 and 1."""
    out = tmp_path / "cmp"
    rc, err = _cli(["compare", "--config", _config(tmp_path), "--output", str(out), f"--seeds={seeds}", mode], capsys)
    assert rc == 2 and named in err
    assert not out.exists()


@pytest.mark.parametrize("arms", ["none,,bot_rd", "none,", ",none"])
def test_an_empty_modulator_item_is_refused_by_the_flag(tmp_path, capsys, arms):
    """--modulators none,,bot_rd dropped the empty item and ran the other arms."""
    out = tmp_path / "cmp"
    rc, err = _cli(["compare", "--config", _config(tmp_path), "--output", str(out), f"--modulators={arms}"], capsys)
    assert rc == 2 and "--modulators" in err and "empty item" in err
    assert not out.exists()


@pytest.mark.parametrize(("key", "value"), [("modulators", "none,,bot_rd"), ("seeds", "0,1,")])
def test_an_empty_item_in_a_config_list_is_refused_by_file_and_key(tmp_path, capsys, key, value):
    """The config file's comma strings dropped an empty item, as the flags did."""
    config = _config(tmp_path, f"compare:\n  {key}: '{value}'\n")
    out = tmp_path / "cmp"
    rc, err = _cli(["compare", "--config", config, "--output", str(out)], capsys)
    assert rc == 2 and f"{config}: compare.{key} '{value}': an empty item" in err, err
    assert not out.exists()


def test_a_refused_argument_of_the_api_writes_no_compare_json(tmp_path):
    with pytest.raises(ValueError, match="--seeds: a training seed must be an integer >= 0, got -1"):
        _comparison(tmp_path, seeds=(0, -1))
    with pytest.raises(ValueError, match="--split_seed must be an integer >= 0, got -3"):
        from helpers.loop_setup import loop_config

        from gcpo_train.compare.run import Comparison
        from gcpo_train.config import TrainConfig

        Comparison(TrainConfig(**loop_config(tmp_path, "unused")), tmp_path / "cmp", ["none"], [0], split_seed=-3)
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ("eval_every: -1", "compare.eval_every"),
        ("eval_n: 0", "compare.eval_n"),
        ("split_seed: -3", "compare.split_seed"),
        ("seeds: [0, -1]", "compare.seeds"),
        ("modulators: [none, bot_rdd]", "compare.modulators"),
    ],
)
def test_a_bad_value_of_the_compare_mapping_names_its_key_and_file(tmp_path, capsys, mapping, key):
    """A config's compare: values were reported as flags the user never gave (--eval_n, --seeds)."""
    config = _config(tmp_path, f"compare:\n  {mapping}\n")
    rc, err = _cli(["compare", "--config", config, "--output", str(tmp_path / "cmp")], capsys)
    assert rc == 2 and key in err and config in err and "--" not in err.split("error:")[1].split("(--traceback")[0]
    assert not (tmp_path / "cmp").exists()


def test_a_flag_replaces_the_mapping_s_value(tmp_path, capsys):
    """A flag given wins over the compare: mapping, and is checked (and named) as the flag."""
    config = _config(tmp_path, "compare:\n  eval_n: 0\n")
    rc, err = _cli(["compare", "--config", config, "--output", str(tmp_path / "cmp"), "--eval_n", "-4"], capsys)
    assert rc == 2 and "--eval_n" in err and "compare.eval_n" not in err


def test_a_truncated_compare_json_is_named(tmp_path, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare.json").write_text('{"config": {"model"')
    for extra in ([], ["--report_only"]):
        rc, err = _cli(["compare", "--config", _config(tmp_path), "--output", str(out), "--seeds", "0", *extra], capsys)
        assert rc == 2 and str(out / "compare.json") in err and "not a readable comparison record" in err


@pytest.mark.slow
def test_finished_runs_of_another_comparison_are_refused_by_their_run_json(tmp_path):
    """compare.json lost and the learning rate changed: the finished runs at the old rate were
    reported as the new comparison (done.json alone was trusted)."""
    _comparison(tmp_path).run(progress=False)
    out = tmp_path / "cmp"
    (out / "compare.json").unlink()
    with pytest.raises(ValueError, match=r"learning_rate: run=0\.005 vs comparison=0\.001"):
        _comparison(tmp_path, learning_rate=1e-3).run(progress=False)
    (out / "compare.json").unlink(missing_ok=True)
    with pytest.raises(ValueError, match="learning_rate"):
        _comparison(tmp_path, learning_rate=1e-3).report()
    with pytest.raises(ValueError, match="steps: run=2 vs comparison=3"):  # steps is not in the config hash
        _comparison(tmp_path, steps=3).report()
    assert _comparison(tmp_path).run(progress=False)["table"].set_index("arm").loc["none", "step"] == 2


@pytest.mark.slow
def test_a_run_killed_during_its_final_evaluation_resumes_by_evaluating(tmp_path, monkeypatch):
    """gcpo backend: killed after its last checkpoint, during the final evaluation, the run could
    never resume ("pass --steps greater than 2", which compare refuses). Now its trained policy is
    restored from that checkpoint and evaluated; nothing is trained again."""
    from gcpo_train.loop import trainer as trainer_module

    real = trainer_module.GCPOLoopTrainer.evaluate

    def killed(self, tag="final"):
        if tag == "step_000002":
            raise KeyboardInterrupt
        return real(self, tag)

    monkeypatch.setattr(trainer_module.GCPOLoopTrainer, "evaluate", killed)
    with pytest.raises(KeyboardInterrupt):
        _comparison(tmp_path, eval_every=0).run(progress=False)
    run = tmp_path / "cmp" / "runs" / "none" / "seed_0"
    final = run / "eval" / "step_000002.predictions.parquet"
    assert (run / "checkpoints" / "step_000002").is_dir() and not final.exists()
    log = (run / "log.jsonl").read_bytes()
    monkeypatch.setattr(trainer_module.GCPOLoopTrainer, "evaluate", real)
    _comparison(tmp_path, eval_every=0).run(progress=False)
    assert (run / "done.json").exists() and (run / "log.jsonl").read_bytes() == log
    # the restored policy is the trained one: its scores are those of the same comparison run
    # without a kill (CPU, deterministic)
    (tmp_path / "ref").mkdir()
    _comparison(tmp_path / "ref", eval_every=0).run(progress=False)
    ref = tmp_path / "ref" / "cmp" / "runs" / "none" / "seed_0"
    assert (
        pd.read_parquet(final)["score"].tolist()
        == pd.read_parquet(ref / "eval" / "step_000002.predictions.parquet")["score"].tolist()
    )
    assert (
        pd.read_parquet(final)["completion"].tolist()
        == pd.read_parquet(ref / "eval" / "step_000002.predictions.parquet")["completion"].tolist()
    )
    assert json.loads((run / "done.json").read_text())["steps"] == 2


def _pilot(folder, score=None):
    """results.parquet of a pilot: arms none and bot_rd, seeds 0-2, five queries, last step 2."""
    import numpy as np

    rng = np.random.default_rng(0)
    rows = [
        dict(arm=a, seed=s, step=2, query_id=f"q{i}", score=float(rng.random()) if score is None else score)
        for a in ("none", "bot_rd")
        for s in range(3)
        for i in range(5)
    ]
    folder.mkdir()
    pd.DataFrame(rows).to_parquet(folder / "results.parquet")


def test_a_plan_for_one_seed_is_refused_by_the_flag(tmp_path, capsys):
    """--plan --seeds 0 read "a paired t test needs at least 2 seeds, got 1", naming no flag."""
    _pilot(tmp_path / "cmp")
    rc, err = _cli(
        ["compare", "--config", _config(tmp_path), "--output", str(tmp_path / "cmp"), "--plan", "--seeds", "0"], capsys
    )
    assert rc == 2 and "--seeds '0': --plan gives the δ that S >= 2 seeds detect" in err
    assert not (tmp_path / "cmp" / "plan.md").exists()


@pytest.mark.parametrize(("score", "named"), [(0.5, "sd(D) = 0 and δ = 0.05"), (0.0, "sd(D) = 0 and δ = 0 ")])
def test_a_pilot_without_spread_or_reference_score_is_refused_not_planned(tmp_path, capsys, score, named):
    """Every delta equal planned "2 seeds for 80% power" (power nan), silently."""
    _pilot(tmp_path / "cmp", score=score)
    rc, err = _cli(["compare", "--config", _config(tmp_path), "--output", str(tmp_path / "cmp"), "--plan"], capsys)
    assert rc == 2 and "results.parquet: arm 'bot_rd' against 'none'" in err and named in err
    assert not (tmp_path / "cmp" / "plan.md").exists()


@pytest.mark.parametrize(
    ("spoil", "named"),
    [
        ("nan", "1 score(s) are missing or not finite, the first of arm 'bot_rd' seed 1 step 2 query 'q3'"),
        (
            "empty",
            "comparison results frame is missing required column(s) ['arm', 'seed', 'step', 'query_id', 'score']",
        ),
    ],
)
def test_a_pilot_with_a_nan_score_or_no_rows_is_named_not_planned(tmp_path, capsys, spoil, named):
    """A NaN score was dropped by pivot_table's mean and the plan made from the rest; a results
    file with no rows died with KeyError: 'arm'."""
    import numpy as np

    _pilot(tmp_path / "cmp")
    path = tmp_path / "cmp" / "results.parquet"
    df = pd.read_parquet(path)
    if spoil == "nan":
        df.loc[(df["arm"] == "bot_rd") & (df["seed"] == 1) & (df["query_id"] == "q3"), "score"] = np.nan
    else:
        df = pd.DataFrame()
    df.to_parquet(path)
    rc, err = _cli(["compare", "--config", _config(tmp_path), "--output", str(tmp_path / "cmp"), "--plan"], capsys)
    assert rc == 2 and f"{path}: " in err and named in err, err
    assert not (tmp_path / "cmp" / "plan.md").exists()


def test_plan_file_writes_the_named_file_and_refuses_a_path(tmp_path, capsys):
    """--plan --plan_file closing_plan.md writes beside plan.md; a path out of OUTPUT is refused by name."""
    _pilot(tmp_path / "cmp")
    argv = ["compare", "--config", _config(tmp_path), "--output", str(tmp_path / "cmp"), "--plan"]
    rc, err = _cli([*argv, "--plan_file", "closing_plan.md"], capsys)
    assert rc == 0, err
    assert (tmp_path / "cmp" / "closing_plan.md").exists() and not (tmp_path / "cmp" / "plan.md").exists()
    rc, err = _cli([*argv, "--plan_file", "../plan.md"], capsys)
    assert rc == 2 and "plan file '../plan.md': a file name ending in .md" in err
    assert not (tmp_path / "plan.md").exists()


def test_a_bad_run_folder_is_named_as_itself_not_as_the_results_file(tmp_path):
    """write_plan blamed results.parquet for a seed_00 folder among the runs."""
    from gcpo_train.compare.plan import write_plan

    _pilot(tmp_path / "cmp")
    bad = tmp_path / "cmp" / "runs" / "none" / "seed_00"
    bad.mkdir(parents=True)
    (bad / "done.json").write_text('{"arm": "none", "seed": 0, "steps": 2}')
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))}: not a run of the comparison"):
        write_plan(tmp_path / "cmp")
