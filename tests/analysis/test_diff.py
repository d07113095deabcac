"""`gcpo diff` on small synthetic study folders: equal, within tolerance, beyond, missing, rank tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.cli import main
from gcpo_analysis.diff import compare_folders, failed, is_rank_table, rel_diff, rel_diffs
from gcpo_analysis.diff.values import Gap, json_gap, text_gap


def _folder(
    root: Path, *, v: float = 1234.5678, rho: float = 0.25, seconds: float = 1.5, md_v: str = "1234.57"
) -> Path:
    """A study-shaped folder: V in the groups frame, a magnitude table, a rank table, a card, a summary."""
    (root / "tables").mkdir(parents=True)
    groups = pd.DataFrame({"query_id": ["q1", "q2"], "grad_var": [v, 2.0], "G": [8, 8], "t_gradvar": [seconds, 1.0]})
    groups.to_parquet(root / "groups.parquet", index=False)
    pd.DataFrame({"statistic": ["ratio_q50"], "estimate": [v / 1000]}).to_csv(
        root / "tables/lipschitz_bound.csv", index=False
    )
    pd.DataFrame({"measure": ["bot"], "rho": [rho], "p": [0.5]}).to_csv(root / "tables/spearman.csv", index=False)
    card = {
        "settings": {"seed": 0, "output": f"/home/{root.name}/study"},
        "model": f"packaged:SmolLM2 (/opt/{root.name}/lib/model.gguf)",
        "ci_width": v / 100,
        "timings_s": {"total": seconds},
        "environment": {"processor": f"cpu {seconds}"},
    }
    (root / "run_card.json").write_text(json.dumps(card))
    (root / "summary.md").write_text(f"| V | rho |\n|---|---|\n| {md_v} | {rho:.3f} |\n")
    (root / "parts").mkdir()  # a study's restart cache: never compared
    (root / "parts" / f"{seconds}.parquet").write_bytes(b"")
    (root / "figures").mkdir()
    (root / "figures/figure1.png").write_bytes(bytes([int(seconds)]))  # rendered: never compared
    return root


def _status(rows) -> dict[str, str]:
    return {r.path: r.status for r in rows}


def test_rel_diff_against_a_hand_computation():
    assert rel_diff(1.0, 1.0) == 0.0
    assert rel_diff(0.0, 0.0) == 0.0
    assert rel_diff(2.0, 1.0) == pytest.approx(0.5)  # |2 - 1| / 2
    assert rel_diff(-1.0, 1.0) == pytest.approx(2.0)
    assert rel_diff(float("nan"), float("nan")) == 0.0
    assert rel_diff(float("nan"), 1.0) == float("inf")
    assert rel_diff(float("inf"), 1e308) == float("inf")
    x, y = np.array([1.0, 0.0, np.nan, 3.0]), np.array([1.0 + 1e-7, 0.0, np.nan, np.nan])
    np.testing.assert_allclose(rel_diffs(x, y), [1e-7 / (1.0 + 1e-7), 0.0, 0.0, np.inf])


def test_identical_folders_are_equal_and_exit_0(tmp_path, capsys):
    a, b = _folder(tmp_path / "a"), _folder(tmp_path / "b", seconds=9.0)  # other run time, paths, processor
    rows = compare_folders(a, b)
    assert _status(rows) == {
        "figures/figure1.png": "skipped",
        "groups.parquet": "equal",
        "run_card.json": "equal",
        "summary.md": "equal",
        "tables/lipschitz_bound.csv": "equal",
        "tables/spearman.csv": "equal",
    }
    assert not failed(rows)
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "5 equal; 0 within tol; 0 differs; 0 missing; 1 skipped" in out


def test_magnitudes_within_the_tolerance_are_reported_with_their_largest_relative_difference(tmp_path, capsys):
    v = 1234.5678
    w = v * (1 + 4e-7)
    a, b = _folder(tmp_path / "a", v=v), _folder(tmp_path / "b", v=w, md_v="1234.58")  # rounds the other way
    rows = {r.path: r for r in compare_folders(a, b, rtol=1e-6)}
    for rel in ("groups.parquet", "tables/lipschitz_bound.csv", "run_card.json"):
        assert rows[rel].status == "within tol", rel
        assert rows[rel].max_rel == pytest.approx(abs(w - v) / w, rel=1e-6), rel
    assert rows["summary.md"].status == "within tol"
    assert "one unit apart in the last digit" in rows["summary.md"].detail
    assert rows["tables/spearman.csv"].status == "equal"
    assert main(["diff", str(a), str(b)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("| groups.parquet"))
    assert [c.strip() for c in line.split("|")[2:4]] == ["within 1e-05", "4e-07"]
    # the same folders with no tolerance: every magnitude differs
    strict = {r.path: r.status for r in compare_folders(a, b, rtol=0)}
    assert strict["groups.parquet"] == strict["run_card.json"] == strict["summary.md"] == "differs"
    assert main(["diff", "--rtol", "0", str(a), str(b)]) == 1


def test_a_magnitude_beyond_the_tolerance_differs_and_exits_1(tmp_path, capsys):
    a = _folder(tmp_path / "a", v=1000.0, md_v="1000.00")
    b = _folder(tmp_path / "b", v=1000.1, md_v="1000.10")  # 1e-4 relative
    rows = {r.path: r for r in compare_folders(a, b, rtol=1e-6)}
    assert rows["groups.parquet"].status == "differs"
    assert rows["groups.parquet"].max_rel == pytest.approx(0.1 / 1000.1)
    assert "grad_var, row 0" in rows["groups.parquet"].detail
    assert "G" not in rows["groups.parquet"].detail.split("largest")[0]  # the equal column is not named
    assert rows["summary.md"].status == "differs"  # 1000.00 vs 1000.10: beyond one last-digit unit
    assert main(["diff", str(a), str(b)]) == 1
    assert "differs" in capsys.readouterr().out
    assert main(["diff", "--rtol", "1e-3", str(a), str(b)]) == 0  # a looser stated tolerance covers it


def test_a_missing_file_fails(tmp_path):
    a, b = _folder(tmp_path / "a"), _folder(tmp_path / "b")
    (b / "tables/lipschitz_bound.csv").unlink()
    (b / "extra.csv").write_text("x\n1\n")
    rows = {r.path: (r.status, r.detail) for r in compare_folders(a, b)}
    assert rows["tables/lipschitz_bound.csv"] == ("missing", "only in REFERENCE")
    assert rows["extra.csv"] == ("missing", "only in OTHER")
    assert main(["diff", str(a), str(b)]) == 1


def test_a_rank_table_must_be_equal_whatever_the_tolerance(tmp_path):
    a, b = _folder(tmp_path / "a", rho=0.25), _folder(tmp_path / "b", rho=0.25 + 1e-12)
    rows = {r.path: r for r in compare_folders(a, b, rtol=1e-3)}
    assert rows["tables/spearman.csv"].status == "differs"
    assert rows["tables/spearman.csv"].detail.startswith("rank table, must be equal")
    assert rows["summary.md"].status == "equal"  # rho printed at 3 decimals: the same text
    assert main(["diff", "--rtol", "1e-3", str(a), str(b)]) == 1
    # --exact adds files to the rank tables
    c = _folder(tmp_path / "c", v=1234.5678 * (1 + 1e-7))
    assert _status(compare_folders(a, c, exact=("groups.parquet",)))["groups.parquet"] == "differs"


def test_rank_tables_are_named_by_their_file_in_a_tables_folder():
    assert is_rank_table("tables/spearman_grad_var.md")
    assert is_rank_table("tables/untrimmed/confirmatory.csv")
    assert not is_rank_table("spearman.csv")  # not in a tables/ folder
    assert not is_rank_table("tables/lipschitz_bound.csv")
    assert not is_rank_table("tables/v_parts.csv")  # V = N + C: magnitudes
    assert is_rank_table("tables/v_parts.csv", exact=("tables/v_*",))


def test_texts_differ_in_their_words_and_json_in_its_keys_and_types():
    gap = text_gap("rho = 0.25 on V\n", "rho = 0.25 on C\n", Gap(), 1e-6)
    assert gap.structure == ["line 1: 'rho = 0.25 on V' vs 'rho = 0.25 on C'"]
    assert text_gap("x 1.5e-07", "x 1.6e-07", Gap(), 1e-6).n_last_digit == 1  # one unit of 1e-8
    assert text_gap("x 1.5e-07", "x 1.6e-07", Gap(), 0).n_last_digit == 0  # no tolerance: no rounding either
    assert text_gap("x 0.15", "x 0.17", Gap(), 1e-6).max_rel == pytest.approx(0.02 / 0.17)
    assert json_gap({"x": 1}, {"x": 1.0}, Gap()).structure == [".x: 1 vs 1.0"]  # int vs float: a change
    assert json_gap({"x": [float("nan"), 1]}, {"x": [float("nan"), 1]}, Gap()).exact
    assert json_gap({"target_modules": ["q", "v"]}, {"target_modules": ["v", "q"]}, Gap()).exact
    assert not json_gap({"other": ["q", "v"]}, {"other": ["v", "q"]}, Gap()).exact
    assert json_gap({"run": "/x/a", "time_total": 3.0}, {"run": "/y/b", "time_total": 4.0}, Gap()).exact
    assert json_gap({"run": 1.0}, {"run": 2.0}, Gap()).max_rel == pytest.approx(0.5)  # a number is compared
    assert json_gap({"k": "a"}, {"j": "a"}, Gap()).structure == [".j: only in B", ".k: only in A"]


def test_array_cells_of_a_parquet_frame_are_compared_by_value(tmp_path):
    emb = np.array([0.5, -0.25], dtype=np.float16)
    for name, e in (("a", emb), ("b", emb), ("c", emb + np.float16(0.001))):
        (tmp_path / name).mkdir()
        pd.DataFrame({"rollout_id": [0], "embedding": [e]}).to_parquet(tmp_path / name / "embeddings.parquet")
    assert _status(compare_folders(tmp_path / "a", tmp_path / "b"))["embeddings.parquet"] == "equal"
    r = compare_folders(tmp_path / "a", tmp_path / "c")[0]
    assert r.status == "differs" and "embedding, row 0" in r.detail


def test_bad_arguments_are_named(tmp_path, capsys):
    a = _folder(tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="OTHER .*nope is not a folder"):
        compare_folders(a, tmp_path / "nope")
    assert main(["diff", str(a), str(tmp_path / "nope")]) != 0
    with pytest.raises(SystemExit):
        main(["diff", "--rtol", "-1", str(a), str(a)])
    assert "--rtol: must be a finite number >= 0" in capsys.readouterr().err
