"""``gcpo align --restat`` matches each row of a snapshot's groups frame to its Gram: a frame
edited by hand (rows moved to other positions, a position repeated) was read as the Gram's and
weighed one group's gradient by another's ω; it is refused, naming the file and the row."""

import json

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.study.alignment import restat, snapshot_paths
from gcpo_analysis.study.alignment_match import check_frame_matches_gram


def _snapshot(out, edit=None):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 8)).astype(np.float32).astype(np.float64)
    K = X @ X.T
    groups = pd.DataFrame(
        {
            "snapshot": "s0",
            "position": np.arange(6),
            "role": "pool",
            "w_none": 1.0,
            "w_se": rng.uniform(0.5, 2, 6),
            "grad_norm2": [float(np.dot(x, x)) for x in X],  # as gcpo align writes it
        }
    )
    if edit is not None:
        groups = edit(groups)
    paths = snapshot_paths(out, "s0")
    paths["gram"].parent.mkdir(parents=True)
    groups.to_parquet(paths["groups"])
    np.save(paths["gram"], K)
    paths["card"].write_text(json.dumps({"snapshot": "s0"}))
    return paths


def test_the_frame_gcpo_align_writes_restats(tmp_path):
    _snapshot(tmp_path)
    restat(tmp_path, n_batches=10, n_boot=5)
    assert (tmp_path / "summary.parquet").exists()


def _swap_positions(groups):
    groups.loc[[1, 4], "position"] = [4, 1]
    return groups


@pytest.mark.parametrize(
    "edit, named",
    [
        (_swap_positions, r"s0.groups.parquet: row 1 \(position 1\) has grad_norm2 .* K\[1, 1\]"),
        (lambda g: g.assign(position=[0, 1, 2, 2, 4, 5]), r"s0.groups.parquet: row 3 repeats position 2"),
        (lambda g: g.assign(grad_norm2=g["grad_norm2"] * [1, 1, 1, 1, 1, 1.001]), r"row 5 \(position 5\)"),
    ],
)
def test_an_edited_frame_is_refused_naming_the_file_and_row(tmp_path, edit, named):
    _snapshot(tmp_path, edit)
    with pytest.raises(ValueError, match=named):
        restat(tmp_path, n_batches=10, n_boot=5)
    assert not (tmp_path / "summary.parquet").exists()


def test_the_match_tolerates_the_grams_rounding_only():
    K = np.diag([2.0, 0.0, 5.0])
    frame = pd.DataFrame({"position": [0, 1, 2], "grad_norm2": [2.0 * (1 + 1e-12), 0.0, 5.0]})
    check_frame_matches_gram(frame, K, "f", "g")
    with pytest.raises(ValueError, match="row 1"):
        check_frame_matches_gram(frame.assign(grad_norm2=[2.0, 1e-3, 5.0]), K, "f", "g")
