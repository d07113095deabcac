"""The snapshot's gradient file (gcpo_train.align.rows): rows written and read by offset are what
np.load reads, the Gram of gram_of is X Xᵀ, and a wrong row or an existing file is refused."""

import numpy as np
import pytest

from gcpo_train.align import rows


def test_rows_round_trip_through_numpys_own_reader(tmp_path):
    path = tmp_path / "g.npy"
    rows.create(path, 5, 7)
    assert rows.shape(path) == (5, 7)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5, 7)).astype(np.float32)
    for k in (3, 0, 4):  # any order; the rows not written stay zero
        rows.write_row(path, k, X[k])
    loaded = np.load(path)
    np.testing.assert_array_equal(loaded[[0, 3, 4]], X[[0, 3, 4]])
    assert not loaded[[1, 2]].any()
    np.testing.assert_array_equal(rows.read_rows(path, [4, 0]), X[[4, 0]].astype(np.float64))


def test_gram_of_is_x_xt_in_any_block_size(tmp_path):
    from gcpo_train.align.rows import gram_of

    path = tmp_path / "g.npy"
    X = np.random.default_rng(1).normal(size=(9, 11)).astype(np.float32)
    rows.create(path, 9, 11)
    for k in range(9):
        rows.write_row(path, k, X[k])
    order = [8, 2, 5, 0, 1]
    Y = X[order].astype(np.float64)
    for block in (1, 2, 16):
        np.testing.assert_allclose(gram_of(path, order, block=block), Y @ Y.T, rtol=1e-12)


def test_bad_rows_and_an_existing_file_are_refused(tmp_path):
    path = tmp_path / "g.npy"
    rows.create(path, 2, 3)
    with pytest.raises(ValueError, match="row 2 of shape"):
        rows.write_row(path, 2, np.zeros(3))
    with pytest.raises(ValueError, match=r"row 0 of shape \(4,\)"):
        rows.write_row(path, 0, np.zeros(4))
    with pytest.raises(ValueError, match="no row 5"):
        rows.read_rows(path, [5])
    with pytest.raises(FileExistsError):
        rows.create(path, 2, 3)
    np.save(tmp_path / "other.npy", np.zeros((2, 3)))  # float64: not a gradient file
    with pytest.raises(ValueError, match="float32"):
        rows.read_rows(tmp_path / "other.npy", [0])
