"""A snapshot's group gradients on disk: one ``.npy`` file of shape (n, D), float32, whose rows are
written and read at their file offsets, never through a memory map.

Why not ``np.memmap``: the pages of a map, dirty or only read, count in the process's resident
size. A 2.5 GB gradient file written through one map and read through another for the Gram made a
3 GB sampling process report a 7.2 GB peak (``peak_rss_gb_finishing_process``), which measured the
page cache, not what the study needs. Plain reads and writes leave the cache to the kernel, so the
peak is the model, one gradient and one block of the Gram. The file stays a standard ``.npy``
(``np.load`` reads it).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DTYPE = np.dtype("<f4")


def _header(f) -> tuple[int, tuple[int, int]]:
    """(offset of the first row, shape) of the open ``.npy`` file ``f``."""
    f.seek(0)
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    if dtype != DTYPE or fortran or len(shape) != 2:
        raise ValueError(f"{getattr(f, 'name', f)}: not a (n, D) little-endian float32 C-order array")
    return f.tell(), shape


def create(path: Path, n: int, dim: int) -> None:
    """An (n, dim) float32 ``.npy`` of zeros at ``path`` (sparse on disk until rows are written)."""
    with open(path, "xb") as f:  # never over a user's file, nor over another process's rows
        np.lib.format.write_array_header_1_0(f, {"descr": DTYPE.str, "fortran_order": False, "shape": (n, dim)})
        f.truncate(f.tell() + n * dim * DTYPE.itemsize)


def shape(path: Path) -> tuple[int, int]:
    with open(path, "rb") as f:
        return _header(f)[1]


def write_row(path: Path, k: int, vector: np.ndarray) -> None:
    """Row ``k`` := ``vector``, on disk (fsync) when this returns."""
    with open(path, "r+b") as f:
        offset, (n, dim) = _header(f)
        v = np.ascontiguousarray(vector, dtype=DTYPE)
        if not 0 <= k < n or v.shape != (dim,):
            raise ValueError(f"{path}: row {k} of shape {v.shape} does not fit an array of shape {(n, dim)}")
        f.seek(offset + k * dim * DTYPE.itemsize)
        f.write(v.tobytes())
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path, rows) -> np.ndarray:
    """The rows ``rows`` (in that order) as a float64 (len(rows), D) array."""
    with open(path, "rb") as f:
        offset, (n, dim) = _header(f)
        out = np.empty((len(rows), dim))
        for i, k in enumerate(rows):
            if not 0 <= int(k) < n:
                raise ValueError(f"{path}: no row {k} in an array of {n} rows")
            f.seek(offset + int(k) * dim * DTYPE.itemsize)
            out[i] = np.fromfile(f, dtype=DTYPE, count=dim)
    return out


def gram_of(path: Path, rows: list[int], block: int = 16, scale: np.ndarray | None = None) -> np.ndarray:
    """K = X Xᵀ of the rows ``rows`` of the (·, D) float32 ``.npy`` at ``path``, in float64,
    ``block`` rows at a time (peak memory about 2 · block · D · 8 bytes); with ``scale`` (D,),
    the Gram of the rows times it, (X S)(X S)ᵀ (``adam_metric``: Adam's preconditioner)."""
    n = len(rows)
    order = np.asarray(rows)

    def read(i):
        A = read_rows(path, order[i : i + block])
        return A if scale is None else A * scale

    K = np.zeros((n, n))
    for i in range(0, n, block):
        A = read(i)
        for j in range(i, n, block):
            B = A if j == i else read(j)
            K[i : i + block, j : j + block] = A @ B.T
            K[j : j + block, i : i + block] = K[i : i + block, j : j + block].T
    return K
