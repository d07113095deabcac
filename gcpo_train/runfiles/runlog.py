"""The training log ``output_dir/log.jsonl``: one JSON object per logged step.

A run killed mid-write can leave a partial last line; ``read_log`` drops it with a warning (so
``--resume`` and ``gcpo plot-train`` still work) and refuses a bad line anywhere else, naming it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path


def read_log(path) -> list[dict]:
    """Rows of a log.jsonl. A partial (unparseable) LAST line is dropped with a warning; an
    unparseable line before it, or a row without an integer ``step``, is an error naming it."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    rows = []
    for k, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            if k == len(lines):
                warnings.warn(
                    f"{path}: dropping a partial last line {k} ({err}); a crash mid-write leaves one", stacklevel=2
                )
                break
            raise ValueError(f"{path}: line {k} is not JSON ({err})") from None
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):  # JSON true is no step
            raise ValueError(f"{path}: line {k} has no integer 'step'")
        rows.append(row)
    return rows
