"""figures/update_alignment regenerates from its frames alone (gcpo align --restat), byte for byte,
and the update-alignment page shows its headline table."""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.study.alignment import load_snapshot, restat, snapshot_paths, snapshots

ROOT = Path(__file__).resolve().parents[3]
FOLDER = ROOT / "figures" / "update_alignment"
TABLES = ("alignment.md", "headline.md", "reading.md", "card.json")
FRAMES = ("batches.parquet", "groups.parquet", "summary.parquet")


@pytest.mark.slow
def test_committed_tables_regenerate_byte_for_byte(tmp_path):
    shutil.copytree(FOLDER / "snapshots", tmp_path / "snapshots")
    restat(tmp_path)
    for name in TABLES:
        assert (tmp_path / name).read_bytes() == (FOLDER / name).read_bytes(), name
    for name in FRAMES:
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / name), pd.read_parquet(FOLDER / name))


def test_the_results_page_includes_the_headline_table():
    """The update-alignment page shows the committed headline table itself (a snippet, never a
    retyped copy); the README's findings row quotes its cells (tests/integration/test_readme_findings.py)."""
    page = (ROOT / "docs" / "results" / "update_alignment.md").read_text()
    assert '--8<-- "figures/update_alignment/headline.md"' in page


def test_committed_snapshots_hold_every_group_level_modulator():
    from gcpo_analysis.measures.modulators import MODULATORS

    names = snapshots(FOLDER)
    assert names
    for name in names:
        groups, K = load_snapshot(FOLDER, name)
        expected = {f"w_{m}" for m, spec in MODULATORS.items() if spec.weight is not None}
        assert expected <= set(groups.columns), name
        # a group whose rewards tie has no gradient; one whose rewards differ has one
        np.testing.assert_array_equal(np.diag(K) > 0, groups["live"].to_numpy())


def test_a_gram_of_the_wrong_size_is_refused(tmp_path):
    name = snapshots(FOLDER)[0]
    shutil.copytree(FOLDER / "snapshots", tmp_path / "snapshots")
    np.save(snapshot_paths(tmp_path, name)["gram"], np.eye(3), allow_pickle=False)
    with pytest.raises(ValueError, match="Gram for"):
        restat(tmp_path)
    snapshot_paths(tmp_path, name)["gram"].unlink()
    with pytest.raises(FileNotFoundError, match="no Gram"):
        restat(tmp_path)


def test_the_oracle_is_at_least_every_weighting_in_every_committed_batch():
    batches = pd.read_parquet(FOLDER / "batches.parquet")
    wide = batches.pivot(index=["snapshot", "batch_size", "batch"], columns="weighting", values="cos")
    oracle = wide.pop("oracle")
    gap = wide.sub(oracle, axis=0)  # other − oracle: never above 0 where both are defined
    assert ((gap <= 1e-9) | gap.isna()).all().all()
    assert gap.notna().any().any()
