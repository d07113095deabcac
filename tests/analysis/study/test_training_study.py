"""`gcpo study --from-training`: the gap study on a tiny tracked training run's groups."""

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from helpers.embedders import HashEmbedder  # noqa: E402
from helpers.loop_setup import make  # noqa: E402

from gcpo_analysis.study.from_training import phase_of, read_training_run, rho_windows, run_training_study  # noqa: E402

MEASURES = ["token_entropy", "cd", "bot", "rd"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    make(
        root, "run", modulator="bot_rd", queries_per_step=6, steps=6, beta=0.0, track_gradvar=True, share_prompt=False
    ).train()
    return root / "run"


@pytest.mark.slow
def test_from_training_tables_and_groups(run, tmp_path):
    card = run_training_study(
        run,
        tmp_path / "out",
        measures=MEASURES,
        n_boot=200,
        k_folds=3,
        trim=0,
        embedder=HashEmbedder(),
        judge="lexical",
        n_windows=3,
    )
    groups = pd.read_parquet(tmp_path / "out" / "groups.parquet")
    assert len(groups) == 36 and groups["query_id"].is_unique
    # V_train per group is the trainer's, step by step
    for step in range(1, 7):
        frame = pd.read_parquet(run / "rollouts" / f"step_{step:06d}.parquet").groupby("query_id", sort=False).first()
        mine = groups[groups["step"] == step].set_index("train_query_id").loc[frame.index]
        np.testing.assert_array_equal(mine["grad_var"].to_numpy(), frame["grad_var"].to_numpy())
        np.testing.assert_array_equal(mine["train_bot"].to_numpy(), frame["bot"].to_numpy())
    # beta = 0: V_train is 0 exactly where the advantages are all 0, and only there
    assert ((groups["grad_var"] == 0) == groups["adv_all_zero"]).all()
    assert card["pooled"]["n_groups"] == 36
    assert [card[p]["n_groups"] for p in ("early", "middle", "late")] == [12, 12, 12]
    for name in ("pooled", "early", "middle", "late"):
        assert (tmp_path / "out" / "tables" / name / "spearman.csv").exists()
    assert (tmp_path / "out" / "figures" / "rho_over_training.png").exists()
    # the rescored BoT (same lexical judge and embedder as the modulator) is the modulator's
    assert card["train_vs_rescored_max_abs_diff"]["bot"] < 1e-6
    saved = json.loads((tmp_path / "out" / "run_card.json").read_text())
    assert saved["environment"]["gcpo"] == saved["versions"]["gcpo"] and saved["environment"]["torch_threads"] >= 1


def test_rho_windows_match_scipy():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    groups = pd.DataFrame({"step": np.repeat(np.arange(1, 11), 4), "bot": rng.random(40), "grad_var": rng.random(40)})
    table = rho_windows(groups, ["bot"], n_windows=2, n_boot=300)
    first = groups[groups["step"] <= 5]
    assert table["rho"].iloc[0] == pytest.approx(spearmanr(first["bot"], first["grad_var"]).statistic)
    assert (table["ci_low"] <= table["rho"]).all() and (table["rho"] <= table["ci_high"]).all()
    assert list(phase_of(pd.Series([1, 2, 3, 4, 5, 6, 7]))) == ["early"] * 3 + ["middle"] * 2 + ["late"] * 2


def test_untracked_run_is_refused(tmp_path):
    make(tmp_path, "plain", steps=1).train()
    with pytest.raises(ValueError, match="track_gradvar"):
        read_training_run(tmp_path / "plain")


def test_cli_dispatch(monkeypatch):
    """`gcpo study --from-training RUN` reaches run_training_study with the study's flags."""
    from gcpo_analysis.cli import main
    from gcpo_analysis.study import from_training as training_study

    seen = []
    monkeypatch.setattr(training_study, "run_training_study", lambda run, out, **kw: seen.append((run, out, kw)))
    main(
        [
            "study",
            "--from-training",
            "runs/x",
            "--output",
            "o",
            "--measures",
            "bot,rd",
            "--n-boot",
            "200",
            "--trim",
            "0",
            "--judge",
            "lexical",
        ]
    )
    run, out, kw = seen[0]
    assert (run, out) == ("runs/x", "o")
    assert kw["measures"] == ["bot", "rd"] and kw["n_boot"] == 200 and kw["trim"] == 0 and kw["judge"] == "lexical"


@pytest.mark.slow
def test_a_run_of_gcpo_0_1_is_named_in_a_warning_and_the_card(run, tmp_path):
    # gcpo <= 0.1.0 wrote the sampler's (tempered) token_entropy and no temperature column
    import shutil

    old = tmp_path / "old_run"
    shutil.copytree(run, old, ignore=shutil.ignore_patterns("checkpoints", "training_study"))
    for f in (old / "rollouts").glob("step_*.parquet"):
        pd.read_parquet(f).drop(columns="temperature").to_parquet(f)
    kw = dict(measures=MEASURES, n_boot=50, k_folds=3, trim=0, embedder=HashEmbedder(), judge="lexical", n_windows=3)
    with pytest.warns(UserWarning, match="gcpo <= 0.1.0"):
        card = run_training_study(old, tmp_path / "out_old", **kw)
    assert "gcpo <= 0.1.0" in card["logprob_convention_warning"]
    assert "logprob_convention_warning" not in run_training_study(run, tmp_path / "out_new", **kw)
