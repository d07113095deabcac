"""gcpo_train.evaluation.heldout on inputs it used to misread: read_predictions now refuses, naming
the file, an empty predictions file (NaN met later as "cannot convert float NaN to integer"), a
query scored twice (blamed later on paired_gain's "base frame", naming no file) and a file that
is no parquet; paired_gain refuses a confidence given in percent (95: NaN bounds) and scores that
are bools (True read as 1 on a 0-100 scale) or texts (an unnamed TypeError)."""

import re

import numpy as np
import pandas as pd
import pytest

from gcpo_train.evaluation.heldout import paired_gain, read_predictions, read_scores

GOOD = pd.DataFrame(
    {"query_id": ["a", "b", "c"], "answer": ["x", "y", "z"], "score": [0.0, 50.0, 100.0], "references": [["x"]] * 3}
)
BASE = pd.DataFrame({"query_id": ["a", "b", "c", "d"], "score": [0.0, 0.0, 100.0, 100.0]})


def _write(tmp_path, frame, name="p.predictions.parquet"):
    path = tmp_path / name
    frame.to_parquet(path)
    return path


def test_an_empty_predictions_file_is_refused_by_its_path(tmp_path):
    path = _write(tmp_path, GOOD.iloc[:0])
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: the file holds no predictions"):
        read_predictions(path)


def test_a_query_scored_twice_is_refused_by_its_path_and_rows(tmp_path):
    path = _write(tmp_path, pd.concat([GOOD, GOOD.iloc[:1]], ignore_index=True))
    with pytest.raises(
        ValueError, match=rf"^{re.escape(str(path))}: row 3 scores query 'a' a second time \(rows 0, 3\)"
    ):
        read_predictions(path)
    # read_scores says it the same way (one check), after its flag
    with pytest.raises(ValueError, match=rf"^--paired_with {re.escape(str(path))}: row 3 scores query 'a' a second"):
        read_scores(path, "--paired_with")


def test_a_file_that_is_no_parquet_or_missing_is_named(tmp_path):
    bad = tmp_path / "garbage.predictions.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(ValueError, match=f"^{re.escape(str(bad))}: not a readable predictions file"):
        read_predictions(bad)
    with pytest.raises(FileNotFoundError, match=f"no such predictions file: {re.escape(str(tmp_path / 'nope'))}"):
        read_predictions(tmp_path / "nope")


def test_a_good_file_still_reads(tmp_path):
    assert read_predictions(_write(tmp_path, GOOD))["query_id"].tolist() == ["a", "b", "c"]


@pytest.mark.parametrize("confidence", [95, 0, 1, 1.5, -0.5, True, "0.95", float("nan")])
def test_a_confidence_outside_0_1_is_refused(confidence):
    with pytest.raises(ValueError, match=r"confidence must be a level in \(0, 1\), e.g. 0.95"):
        paired_gain(BASE, BASE.assign(score=[10.0, 0.0, 100.0, 90.0]), confidence=confidence)


@pytest.mark.parametrize(
    "scores, shown",
    [
        ([True, True, True, False], "True"),
        (np.array([True, True, True, False], dtype=object), "True"),
        (["50", "50", "50", "50"], "'50'"),
        ([10.0, None, 100.0, 90.0], "nan"),
        ([10.0, float("inf"), 100.0, 90.0], "inf"),
    ],
)
@pytest.mark.parametrize("side", ["base", "trained"])
def test_scores_that_are_no_finite_numbers_are_refused_naming_the_frame_and_query(scores, shown, side):
    bad = BASE.assign(score=scores)
    frames = (bad, BASE) if side == "base" else (BASE, bad)
    with pytest.raises(ValueError, match=rf"^{side} frame: query '[ab]' has score {shown} .*not a finite number"):
        paired_gain(*frames)


def test_numbers_of_any_numeric_type_still_pair():
    ints = BASE.assign(score=[0, 0, 100, 100])  # int64
    objects = BASE.assign(score=np.array([10.0, 0, 100, np.int64(90)], dtype=object))
    gain = paired_gain(ints, objects, confidence=0.9)
    assert gain["diff"] == pytest.approx(0.0) and gain["confidence"] == 0.9
