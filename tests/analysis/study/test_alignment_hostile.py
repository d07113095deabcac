"""Hostile input, `gcpo align --restat`: a snapshot's frames are checked before any
table is replaced, and every refusal names the file, column and position. Each test failed before
its fix: a NaN weight or an all-dead pool gave "cos nan" tables silently, a NaN Gram read "not
symmetric", a negative ‖g‖² "Singular matrix", a pool of 4 or an empty frame KeyError 'batch_size',
a missing column KeyError 'role', an unreadable Gram or card named no file, and a missing card
failed after the tables were replaced."""

import json

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.study.alignment import restat, snapshot_paths


def _snapshot(out, P=6, K=None, **columns):
    """A synthetic finished snapshot s0 of P pool groups (random gradients, two weightings)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(P, 8))
    groups = pd.DataFrame(
        {"snapshot": "s0", "position": np.arange(P), "role": "pool", "w_none": 1.0, "w_se": rng.uniform(0.5, 2, P)}
    )
    for name, values in columns.items():
        groups[name] = values
    paths = snapshot_paths(out, "s0")
    paths["gram"].parent.mkdir(parents=True)
    groups.to_parquet(paths["groups"])
    np.save(paths["gram"], X @ X.T if K is None else K)
    paths["card"].write_text(json.dumps({"snapshot": "s0"}))
    return paths


def _cli(argv, capsys) -> tuple[int, str]:
    from gcpo_analysis.cli import main

    capsys.readouterr()
    rc = main(argv)
    return rc, capsys.readouterr().err


def test_a_synthetic_snapshot_restats(tmp_path):
    _snapshot(tmp_path)
    restat(tmp_path, n_batches=20, n_boot=5)
    assert "equal weights reach cos" in (tmp_path / "reading.md").read_text()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_weight_is_refused_by_file_column_and_position(tmp_path, capsys, bad):
    w = np.ones(6)
    w[2] = bad
    _snapshot(tmp_path, w_se=w)
    rc, err = _cli(["align", "--restat", str(tmp_path)], capsys)
    assert rc == 2 and "s0.groups.parquet: column 'w_se' has a non-finite weight" in err and "position 2" in err
    assert not (tmp_path / "summary.parquet").exists()


@pytest.mark.parametrize(
    ("entry", "value", "named"),
    [((1, 1), np.nan, "non-finite entry nan at (1, 1)"), ((0, 0), -1.0, "negative squared norm K[0, 0]")],
)
def test_a_gram_that_is_no_gram_is_refused_naming_the_entry(tmp_path, capsys, entry, value, named):
    X = np.random.default_rng(1).normal(size=(6, 8))
    K = X @ X.T
    K[entry] = value
    _snapshot(tmp_path, K=K)
    rc, err = _cli(["align", "--restat", str(tmp_path)], capsys)
    assert rc == 2 and "s0.gram.npy" in err and named in err


def test_too_few_pool_groups_for_the_smallest_batch_are_refused(tmp_path, capsys):
    _snapshot(tmp_path, P=4)
    rc, err = _cli(["align", "--restat", str(tmp_path)], capsys)
    assert rc == 2 and "s0.groups.parquet: 4 pool groups; the smallest batch (4) needs at least 5" in err


def test_a_missing_column_is_named(tmp_path, capsys):
    paths = _snapshot(tmp_path)
    pd.read_parquet(paths["groups"]).drop(columns="role").to_parquet(paths["groups"])
    rc, err = _cli(["align", "--restat", str(tmp_path)], capsys)
    assert rc == 2 and "s0.groups.parquet is missing required column(s) ['role']" in err


@pytest.mark.parametrize("which", ["gram", "card"])
def test_an_unreadable_frame_is_named_and_no_table_is_replaced(tmp_path, capsys, which):
    paths = _snapshot(tmp_path)
    restat(tmp_path, n_batches=20, n_boot=5)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    paths[which].write_bytes(b"")
    rc, err = _cli(["align", "--restat", str(tmp_path)], capsys)
    assert rc == 2 and f"{paths[which]} is unreadable" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_pool_without_gradients_says_so_warns_and_records_it(tmp_path):
    """Every group's rewards equal: K = 0, no cosine is defined; the reading said "cos nan"."""
    _snapshot(tmp_path, K=np.zeros((6, 6)))
    with pytest.warns(UserWarning, match="no batch has a defined cosine"):
        restat(tmp_path, n_batches=20, n_boot=5)
    assert "nan" not in (tmp_path / "reading.md").read_text()
    assert "no batch has a defined cosine" in (tmp_path / "reading.md").read_text()
    card = json.loads((tmp_path / "card.json").read_text())
    assert card["restat"]["no_defined_cosine"] == [["s0", 4]]
