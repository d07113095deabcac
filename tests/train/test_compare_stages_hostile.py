"""Hostile input to the planned reading (gcpo_train.compare.stages, ``gcpo compare reading``):
flags that contradict each other, an arm read against itself, seeds one arm lacks, and outputs
that would land on a user's file or in the comparison folder."""

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.cli import main
from gcpo_train.compare.stages import reading, reading_markdown


def _results(n_seeds=10, n_queries=12, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_seeds):
        base = rng.uniform(0, 100, n_queries)
        treated = np.clip(base + rng.normal(0.5, 4.0) + rng.normal(0, 5, n_queries), 0, 100)
        for arm, score in (("none", base), ("bot_rd", treated)):
            rows += [
                {"arm": arm, "seed": s, "step": 60, "query_id": f"q{q}", "score": float(v)} for q, v in enumerate(score)
            ]
    return pd.DataFrame(rows)


def test_contradicting_look_flags_are_refused_naming_them():
    res = _results()
    with pytest.raises(ValueError, match="--planned 22 needs --first_look"):
        reading(res, "bot_rd", 3.26, planned=22)  # was ignored
    with pytest.raises(ValueError, match="--first_look 20 must be below --planned 10"):
        reading(res, "bot_rd", 3.26, first_look=20, planned=10)  # was a silent one-look reading
    with pytest.raises(ValueError, match="--first_look must be an integer >= 2, got 1"):
        reading(res, "bot_rd", 3.26, first_look=1)
    with pytest.raises(ValueError, match="--planned must be an integer >= 2, got 0"):
        reading(res, "bot_rd", 3.26, first_look=6, planned=0)


def test_fewer_seeds_than_the_first_look_are_read_with_a_warning_and_a_note():
    with pytest.warns(UserWarning, match="Only 10 paired seeds of the first look's 13"):
        r = reading(_results(), "bot_rd", 3.26, first_look=13, planned=22)
    assert "seed_level" in r and "before the plan's first look" in reading_markdown(r)


def test_an_arm_against_itself_is_refused():
    with pytest.raises(ValueError, match="--arm and --reference name the same arm 'none'"):
        reading(_results(), "none", 3.26)  # was "the per-seed deltas have no spread"


def test_a_seed_one_arm_lacks_is_named_and_left_out():
    res = _results()
    res = res[~((res["arm"] == "bot_rd") & (res["seed"] == 3))]
    with pytest.warns(UserWarning, match=r"left out of the pairing: 3 \(none only\)"):
        r = reading(res, "bot_rd", 3.26, first_look=5, planned=10)
    assert list(r["per_seed"].index) == [0, 1, 2, 4, 5, 6, 7, 8, 9]


def test_outputs_never_land_on_a_users_file_or_in_the_comparison(tmp_path, capsys):
    folder = tmp_path / "cmp"
    folder.mkdir()
    _results().to_parquet(folder / "results.parquet")
    args = ["compare", "reading", str(folder), "--arm", "bot_rd", "--margin", "3.26", "--output"]
    # the strip plot beside the reading: a user's file of that name was written over
    (tmp_path / "mine_deltas.png").write_bytes(b"a user's picture")
    assert main([*args, str(tmp_path / "mine.md")]) == 2
    assert "mine_deltas.png exists" in capsys.readouterr().err
    assert (tmp_path / "mine_deltas.png").read_bytes() == b"a user's picture" and not (tmp_path / "mine.md").exists()
    # a sub-folder of the comparison is the comparison's (only the folder itself was refused)
    (folder / "sub").mkdir()
    assert main([*args, str(folder / "sub" / "r.md")]) == 2
    assert "outside the comparison folder" in capsys.readouterr().err and not (folder / "sub" / "r.md").exists()
    # a file where a folder is expected: named, not "[Errno 17] File exists"
    (tmp_path / "user.md").write_text("notes")
    assert main([*args, str(tmp_path / "user.md" / "r.md")]) == 2
    assert "user.md is a file, not a folder" in capsys.readouterr().err
    # a results.parquet that is a folder: no results file (was "missing required column(s)")
    (tmp_path / "odd" / "results.parquet").mkdir(parents=True)
    assert main(["compare", "reading", str(tmp_path / "odd"), "--arm", "bot_rd", "--margin", "3.26"]) == 2
    assert "holds no results.parquet" in capsys.readouterr().err


@pytest.mark.parametrize("looks", [{}, {"first_look": 6, "planned": 10}])
def test_arms_that_never_diverged_are_read_not_refused(looks):
    """Every seed's delta 0 (an arm that never left the reference, e.g. a weight that never
    changed an update): no t interval or TOST exists, so each is "—", the verdict is
    "inconclusive" with a warning, and the reading is still printed (it stopped on the first
    look's t interval, then on the δ sensitivity)."""
    res = _results(n_seeds=8)
    twin = res[res["arm"] == "bot_rd"].assign(arm="twin")
    with pytest.warns(UserWarning, match="no spread"):
        r = reading(pd.concat([res, twin]), "twin", 3.26, reference="bot_rd", **looks)
    assert (r["per_seed"] == 0).all()
    assert (r["sensitivity"]["verdict"] == "inconclusive").all() and r["sensitivity"]["p_tost"].isna().all()
    rows = r["sequential"]["looks"] if looks else [r["seed_level"]]
    assert all(row["verdict"] == "inconclusive" for row in rows)
    text = reading_markdown(r)
    assert "nan" not in text and "| — |" in text and "inconclusive" in text
