"""scripts/check_recorded_outputs.py's `compare` on tiny synthetic folders (no model runs)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_recorded_outputs.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("check_recorded_outputs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _folder(root: Path, *, value: float = 0.1, seconds: float = 1.5, with_md: bool = True) -> Path:
    root.mkdir()
    frame = pd.DataFrame({"query_id": ["a", "b"], "bot": [value, 0.5], "n": [1, 2]})
    frame.to_parquet(root / "groups.parquet", index=False)
    frame.to_csv(root / "table.csv", index=False)
    card = {"settings": {"seed": 0}, "rho": value, "seconds": seconds, "started": f"t{seconds}"}
    (root / "card.json").write_text(json.dumps(card))
    rows = [{"step": 1, "loss": value, "time_generate": seconds}, {"step": 2, "loss": 0.2, "time_total": seconds}]
    (root / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if with_md:
        (root / "summary.md").write_text(f"rho = {value!r}\n")
    (root / "figure.png").write_bytes(bytes([int(seconds)]))  # rendered: never compared
    return root


def _status(rows):
    return {rel: status for rel, status, _ in rows}


def test_identical_folders_compare_identical(check, tmp_path):
    a, b = _folder(tmp_path / "a"), _folder(tmp_path / "b")
    rows = check.compare(a, b)
    assert _status(rows) == {
        "card.json": "identical",
        "figure.png": "skipped",
        "groups.parquet": "identical",
        "log.jsonl": "identical",
        "summary.md": "identical",
        "table.csv": "identical",
    }
    assert check.main(["compare", str(a), str(b)]) == 0


def test_a_float_one_ulp_apart_differs_everywhere_it_is_written(check, tmp_path):
    x = 0.1
    y = float(np.nextafter(x, 1.0))
    a, b = _folder(tmp_path / "a", value=x), _folder(tmp_path / "b", value=y)
    rows = {rel: (status, detail) for rel, status, detail in check.compare(a, b)}
    for rel in ("groups.parquet", "table.csv", "card.json", "log.jsonl", "summary.md"):
        assert rows[rel][0] == "differs", rel
    assert "bot: 1 values" in rows["groups.parquet"][1] and f"{y - x:.3g}" in rows["groups.parquet"][1]
    assert "n:" not in rows["groups.parquet"][1]  # the equal column is not reported
    assert rows["card.json"][1].startswith(".rho:")
    assert check.main(["compare", str(a), str(b)]) == 1


def test_a_missing_file_is_reported_and_fails(check, tmp_path):
    a, b = _folder(tmp_path / "a"), _folder(tmp_path / "b", with_md=False)
    rows = {rel: (status, detail) for rel, status, detail in check.compare(a, b)}
    assert rows["summary.md"] == ("missing", "only in A")
    assert check.main(["compare", str(a), str(b)]) == 1


def test_timing_keys_are_ignored_but_not_their_neighbours(check, tmp_path):
    a, b = _folder(tmp_path / "a", seconds=1.5), _folder(tmp_path / "b", seconds=9.25)
    assert set(_status(check.compare(a, b)).values()) <= {"identical", "skipped"}
    # a path key is ignored only while it holds a path; a number under the same name is compared
    assert check.json_diffs({"run": "/x/a", "tokens_per_s": 3.0}, {"run": "/y/b", "tokens_per_s": 4.0}) == []
    assert check.json_diffs({"run": 1.0}, {"run": 2.0}) == [".run: 1.0 vs 2.0 (|diff| 1)"]
    assert (
        check.json_diffs(
            {"gcpo/time_weights": 1, "step_time": 2, "loss": 3}, {"gcpo/time_weights": 5, "step_time": 6, "loss": 3}
        )
        == []
    )


def test_json_nan_equals_nan_and_sets_compare_unordered(check):
    assert check.json_diffs({"x": [float("nan"), 1]}, {"x": [float("nan"), 1]}) == []
    assert check.json_diffs({"target_modules": ["q", "v"]}, {"target_modules": ["v", "q"]}) == []
    assert check.json_diffs({"other": ["q", "v"]}, {"other": ["v", "q"]}) != []
    assert check.json_diffs({"x": 1}, {"x": 1.0}) == [".x: 1 vs 1.0 (|diff| 0)"]  # int vs float is a change
