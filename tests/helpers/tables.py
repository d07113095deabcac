"""Committed CSV tables against their recomputation: equal up to float rounding across CPUs.

A table's floats are written at 10 significant digits (``frames.TABLE_FLOAT_FORMAT``), but a
value computed on another CPU (other SIMD widths, another BLAS kernel) can differ in its 13th
digit and so round to another 10th digit when it sits at a rounding boundary. Byte equality
would then fail for a correct recomputation; these helpers accept exactly that and nothing more:
the same columns and rows, text cells equal, numbers within ``rtol`` (NaN where NaN)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

RTOL = 1e-8  # 10 written digits: one unit in the last is at most 1e-9 relative; a real change is far larger


def same_csv(a: bytes, b: bytes, rtol: float = RTOL) -> bool:
    """True when two CSV files are the same table up to ``rtol`` on their numeric cells."""
    if a == b:
        return True
    try:
        x, y = (pd.read_csv(io.BytesIO(t), keep_default_na=False, na_values=["nan", "NaN", ""]) for t in (a, b))
    except (ValueError, pd.errors.ParserError):
        return False
    if list(x.columns) != list(y.columns) or x.shape != y.shape:
        return False
    for col in x.columns:
        u, v = x[col], y[col]
        if pd.api.types.is_numeric_dtype(u) and pd.api.types.is_numeric_dtype(v):
            if not np.allclose(u.to_numpy(float), v.to_numpy(float), rtol=rtol, atol=0.0, equal_nan=True):
                return False
        elif not u.astype(str).equals(v.astype(str)):
            return False
    return True


def same_file(name: str, a: bytes, b: bytes) -> bool:
    """CSV files by ``same_csv``, every other file byte for byte."""
    return same_csv(a, b) if str(name).endswith(".csv") else a == b
