"""A study whose measures provide no clusters or embeddings: `--measures
rd,token_entropy` finishes; the stages that need clusters or embeddings (the Lipschitz check and
its embeddings sidecar) are skipped with a warning and recorded in the run card."""

import json
import warnings

import pandas as pd
import pytest

pytest.importorskip("torch")

from helpers.varied_rewards import varied_rewards  # noqa: E402

from gcpo_analysis.cli import main  # noqa: E402
from gcpo_analysis.study import StudyConfig, run_study  # noqa: E402

SETTINGS = dict(
    n_queries=10, group_size=3, max_new_tokens=4, max_context_tokens=12, judge="lexical", n_boot=200, trim=1, k_folds=3
)


@pytest.fixture(scope="module", autouse=True)
def hashed_rewards():
    """Rewards that vary on a random model (helpers.varied_rewards)."""
    with varied_rewards():
        yield


@pytest.fixture(scope="module")
def cluster_free(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("cluster_free")
    cfg = StudyConfig(
        model=str(tiny_model_dir), output=str(out), measures="rd,token_entropy", reference="rd", **SETTINGS
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        groups, result = run_study(cfg)
    return out, groups, [str(w.message) for w in caught]


@pytest.mark.slow
def test_a_study_without_a_clustering_measure_finishes(cluster_free):
    out, groups, caught = cluster_free
    assert len(groups) == 10 and "n_clusters" not in groups.columns
    for name in ("rollouts.parquet", "groups.parquet", "grams.parquet", "run_card.json", "summary.md"):
        assert (out / name).exists(), name
    assert (out / "tables" / "spearman_grad_var.csv").exists()
    # the stage that needs clusters and embeddings did not run, and nothing of it was written
    assert not (out / "embeddings.parquet").exists()
    assert not (out / "tables" / "lipschitz.csv").exists()
    card = json.loads((out / "run_card.json").read_text())
    skipped = card["skipped_stages"]
    assert [s["stage"] for s in skipped] == ["lipschitz"]
    assert "rd, token_entropy" in skipped[0]["reason"] and "clusters" in skipped[0]["reason"]
    assert any("Lipschitz" in m and "skipped" in m for m in caught), caught
    assert "lipschitz" not in card


@pytest.mark.slow
def test_restat_of_a_cluster_free_study_skips_the_same_stage(cluster_free, tmp_path):
    out, groups, _ = cluster_free
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in out.iterdir():
        if p.is_file():
            (copy / p.name).write_bytes(p.read_bytes())
    assert main(["study", "--restat", str(copy)]) == 0
    again = pd.read_parquet(copy / "groups.parquet")
    assert again["grad_var"].to_numpy() == pytest.approx(groups["grad_var"].to_numpy())


@pytest.mark.slow
def test_restat_keeps_the_recorded_reason_and_adds_no_other(cluster_free, tmp_path):
    out, _, _ = cluster_free
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in out.iterdir():
        if p.is_file():
            (copy / p.name).write_bytes(p.read_bytes())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["study", "--restat", str(copy)]) == 0
    # no warning about a missing sidecar the run never meant to write
    assert not [str(w.message) for w in caught if "embeddings.parquet" in str(w.message)]
    card = json.loads((copy / "run_card.json").read_text())
    assert [s["stage"] for s in card["skipped_stages"]] == ["lipschitz"] and "lipschitz_restat_skipped" not in card


def test_the_clusters_check_of_a_groups_frame_without_clusters_is_none(tmp_path):
    from gcpo_analysis.study.lipschitz import _clusters_check

    pd.DataFrame({"query_id": ["a"], "rd": [0.1]}).to_parquet(tmp_path / "groups.parquet")
    prepared = pd.DataFrame({"query_id": ["a", "a"], "rollout_id": [0, 1], "cluster": [0, 1]})
    assert _clusters_check(tmp_path, prepared) is None
    pd.DataFrame({"query_id": ["a"], "n_clusters": [2]}).to_parquet(tmp_path / "groups.parquet")
    assert _clusters_check(tmp_path, prepared) == {"groups": 1, "n_clusters_equal": 1}
