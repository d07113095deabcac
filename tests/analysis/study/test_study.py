"""`gcpo study` end to end on a tiny random model: outputs, resume, --from-rollouts, notebook 01."""

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
import transformers  # noqa: E402
from helpers.varied_rewards import varied_rewards  # noqa: E402

from gcpo_analysis.cli import main  # noqa: E402
from gcpo_analysis.study import StudyConfig, run_study  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = dict(
    n_queries=12, group_size=3, max_new_tokens=4, max_context_tokens=12, judge="lexical", n_boot=300, trim=1, k_folds=3
)


@pytest.fixture(scope="module", autouse=True)
def hashed_rewards():
    """Rewards that vary on a random model (helpers.varied_rewards)."""
    with varied_rewards():
        yield


@pytest.fixture(scope="module")
def study(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    cfg = StudyConfig(model=str(tiny_model_dir), output=str(out), **SETTINGS)
    groups, result = run_study(cfg)
    return out, groups, result


@pytest.mark.slow
def test_study_writes_every_output(study):
    out, groups, result = study
    for name in (
        "rollouts.parquet",
        "groups.parquet",
        "run_card.json",
        "summary.md",
        "tables/spearman_grad_var.md",
        "tables/spearman_success_rate.csv",
        "tables/gap_study.json",
        "tables/size_control.csv",
        "figures/size_control.png",
        "figures/figure1.png",
        "figures/figure1.svg",
        "figures/correlations.png",
    ):
        assert (out / name).exists(), name
    assert len(groups) == 12 and (groups["G"] == 3).all()
    assert (groups["grad_var"] >= 0).all() and groups["grad_var"].notna().all()
    for col in ("token_entropy", "se", "kle", "cd", "bot", "rd", "w_bot", "w_rd", "success_rate"):
        assert col in groups.columns
    card = json.loads((out / "run_card.json").read_text())
    assert card["judge"]["kind"] == "lexical" and card["embedder"]["kind"] == "sentence-transformers"
    assert {"rollouts, rewards and gradient variance", "statistics", "total"} <= set(card["timings_s"])
    assert set(card["spearman"]) >= {"cd", "bot", "se"} and card["n_after_trim"] == 11
    # what made it: this checkout's version and commit, the processor, torch's threads
    import torch

    from gcpo_analysis import __version__

    env = card["environment"]
    assert env["gcpo"] == card["versions"]["gcpo"] == __version__
    assert env["torch_threads"] == torch.get_num_threads() and env["processor"]
    assert env["omp_num_threads"] == os.environ.get("OMP_NUM_THREADS")


@pytest.mark.slow
def test_killed_run_resumes_without_recomputing(study, tiny_model_dir, tmp_path, monkeypatch):
    out_full, groups_full, _ = study
    out = tmp_path / "resumed"
    cfg = StudyConfig(model=str(tiny_model_dir), output=str(out), **SETTINGS)
    real_generate = transformers.GenerationMixin.generate
    calls = {"n": 0, "die_after": 5}

    def counting_generate(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > calls["die_after"]:
            raise KeyboardInterrupt("killed")
        return real_generate(self, *args, **kwargs)

    monkeypatch.setattr(transformers.GenerationMixin, "generate", counting_generate)
    with pytest.raises(KeyboardInterrupt):
        run_study(cfg)
    calls.update(n=0, die_after=10**9)
    groups, _ = run_study(cfg)
    assert calls["n"] == 12 - 5  # only the unfinished queries were generated again
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "rollouts.parquet"), pd.read_parquet(out_full / "rollouts.parquet")
    )
    pd.testing.assert_frame_equal(
        groups.drop(columns=[c for c in groups if c.startswith("t_")]),
        groups_full.drop(columns=[c for c in groups_full if c.startswith("t_")]),
    )


@pytest.mark.slow
def test_other_settings_in_the_same_folder_are_refused(study, tiny_model_dir):
    out, _, _ = study
    cfg = StudyConfig(model=str(tiny_model_dir), output=str(out), **{**SETTINGS, "group_size": 4})
    with pytest.raises(ValueError, match="other settings"):
        run_study(cfg)


@pytest.mark.slow
def test_from_rollouts_reruns_measures_and_statistics(study, tmp_path):
    out, groups, _ = study
    rc = main(
        [
            "study",
            "--from-rollouts",
            str(out / "rollouts.parquet"),
            "--output",
            str(tmp_path / "re"),
            "--judge",
            "lexical",
            "--n-boot",
            "300",
            "--trim",
            "1",
            "--k-folds",
            "3",
        ]
    )
    assert rc == 0
    again = pd.read_parquet(tmp_path / "re" / "groups.parquet")
    for col in ("cd", "bot", "se", "rd", "grad_var"):
        assert again[col].to_numpy() == pytest.approx(groups[col].to_numpy())


@pytest.mark.slow
def test_from_rollouts_without_a_target_is_a_clear_error(study, tmp_path, capsys):
    out, _, _ = study
    lone = tmp_path / "lone" / "rollouts.parquet"
    lone.parent.mkdir()
    lone.write_bytes((out / "rollouts.parquet").read_bytes())
    rc = main(["study", "--from-rollouts", str(lone), "--output", str(tmp_path / "x")])
    assert rc == 2 and "no 'grad_var' for these rollouts" in capsys.readouterr().err


def test_from_rollouts_with_success_rate_as_target_finishes_without_the_v_tables(study, tmp_path):
    """The error above tells the user to pass --target success_rate; that run then died in the V
    tables, which trimmed on grad_var whatever the target. They are skipped, said and recorded."""
    out, _, _ = study
    lone = tmp_path / "lone" / "rollouts.parquet"
    lone.parent.mkdir()
    lone.write_bytes((out / "rollouts.parquet").read_bytes())
    argv = ["study", "--from-rollouts", str(lone), "--output", str(tmp_path / "s"), "--judge", "lexical"]
    with pytest.warns(UserWarning, match="V tables .* are skipped"):
        rc = main([*argv, "--target", "success_rate", "--n-boot", "50", "--trim", "0", "--k-folds", "3"])
    assert rc == 0
    card = json.loads((tmp_path / "s" / "run_card.json").read_text())
    assert "grad_var" in card["trim_note"]["skipped"]
    assert (tmp_path / "s" / "tables" / "spearman_success_rate.csv").exists()
    assert not (tmp_path / "s" / "tables" / "v_parts.csv").exists()
    with pytest.warns(UserWarning, match="V tables .* are skipped"):
        assert main(["study", "--restat", str(tmp_path / "s")]) == 0


@pytest.mark.slow
@pytest.mark.notebook
def test_notebook_01_regenerates_the_figures(study, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    out, _, _ = study
    nb = nbformat.read(ROOT / "notebooks" / "01_gap_study.ipynb", as_version=4)
    env = {
        "STUDY_DIR": str(out),
        "FIGURES_DIR": str(tmp_path / "figs"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
        ).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    for name in ("figure1.png", "figure1.svg", "correlations.png", "correlations.svg"):
        assert (tmp_path / "figs" / name).exists(), name


@pytest.mark.slow
def test_from_rollouts_default_output_is_a_new_folder_that_keeps_every_column(study):
    out, _, _ = study
    before = (out / "groups.parquet").read_bytes()
    rc = main(
        [
            "study",
            "--from-rollouts",
            str(out / "rollouts.parquet"),
            "--judge",
            "lexical",
            "--n-boot",
            "300",
            "--trim",
            "1",
            "--k-folds",
            "3",
        ]
    )
    assert rc == 0
    assert (out / "groups.parquet").read_bytes() == before  # the source run is untouched
    new = out / "reanalysis-1"
    again = pd.read_parquet(new / "groups.parquet")
    original = pd.read_parquet(out / "groups.parquet")
    assert set(original.columns) <= set(again.columns)  # grad_norm2_mean, t_generate, t_gradvar kept
    for col in ("grad_norm2_mean", "t_generate", "t_gradvar"):
        assert again[col].to_numpy() == pytest.approx(original[col].to_numpy())


@pytest.mark.slow
def test_from_rollouts_refuses_to_write_over_what_it_reads(study, capsys):
    out, _, _ = study
    before = (out / "groups.parquet").read_bytes()
    rc = main(["study", "--from-rollouts", str(out / "rollouts.parquet"), "--output", str(out)])
    assert rc == 2 and "which this re-analysis reads" in capsys.readouterr().err
    assert (out / "groups.parquet").read_bytes() == before


def test_pilot_gate_bounds():
    from gcpo_analysis.study import pilot_gate

    def groups(success, v):
        return pd.DataFrame({"success_rate": success, "grad_var": v})

    ok = pilot_gate(groups([0.125, 0.0, 0.25, 0.0, 0.125], [1.0, 0.0, 2.0, 0.0, 0.5]))
    assert ok["passed"] and ok["n_queries"] == 5 and ok["frac_v_positive"] == 0.6
    assert np.isclose(ok["mean_success"], 0.1)
    assert not pilot_gate(groups([0.05, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]))["passed"]  # too hard
    assert not pilot_gate(groups([0.95] * 4, [1.0, 1.0, 1.0, 1.0]))["passed"]  # solved
    assert pilot_gate(groups([0.5] * 5, [1.0, 0.0, 0.0, 0.0, 1.0]))["passed"]  # 40% with V > 0: enough
    assert not pilot_gate(groups([0.5] * 5, [1.0, 0.0, 0.0, 0.0, 0.0]))["passed"]  # 20%: too few


@pytest.mark.slow
def test_from_rollouts_warns_on_a_trainer_frame_of_gcpo_0_1(study, tmp_path):
    # a trainer frame of gcpo <= 0.1.0 (its columns, no temperature) held the sampler's tempered
    # token_entropy: the re-analysis says so in a warning and in its run card; the study's own frame does not
    out, _, _ = study
    frame = pd.read_parquet(out / "rollouts.parquet").drop(columns="temperature")
    frame["advantage"], frame["reward_failed"] = 0.0, False
    src = tmp_path / "old" / "rollouts.parquet"
    src.parent.mkdir()
    frame.to_parquet(src)
    (tmp_path / "old" / "groups.parquet").write_bytes((out / "groups.parquet").read_bytes())
    args = [
        "--judge",
        "lexical",
        "--n-boot",
        "100",
        "--trim",
        "1",
        "--k-folds",
        "3",
        "--measures",
        "token_entropy,bot,rd",
    ]
    with pytest.warns(UserWarning, match="gcpo <= 0.1.0"):
        assert main(["study", "--from-rollouts", str(src), "--output", str(tmp_path / "re"), *args]) == 0
    card = json.loads((tmp_path / "re" / "run_card.json").read_text())
    assert "gcpo <= 0.1.0" in card["logprob_convention_warning"]
    assert (
        main(["study", "--from-rollouts", str(out / "rollouts.parquet"), "--output", str(tmp_path / "own"), *args]) == 0
    )
    assert "logprob_convention_warning" not in json.loads((tmp_path / "own" / "run_card.json").read_text())
