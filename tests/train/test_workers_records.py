"""compare.workers reads each finished run's done.json (its torch thread count pairs the arms of a
seed) as untrusted: a truncated file stopped a rerun of the comparison with a bare JSONDecodeError
naming no file; an ill-typed ``threads`` was read as absent, letting the seed's next run train at
another thread count. Both are refused naming the file (and the field)."""

import json
import re

import pytest

from gcpo_train.compare.workers import check_threads, recorded_threads


def _done(out, arm, seed, text):
    run = out / "runs" / arm / f"seed_{seed}"
    run.mkdir(parents=True)
    (run / "done.json").write_text(text)
    return run / "done.json"


def test_a_done_json_that_is_not_json_is_named(tmp_path):
    bad = _done(tmp_path, "none", 0, '{"arm": "none", "seed": 0, "ste')  # cut mid-write
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))} is not a readable run record \(JSONDecodeError"):
        recorded_threads(tmp_path, 0)
    with pytest.raises(ValueError, match=re.escape(str(bad))):  # what a rerun of the comparison calls
        check_threads(tmp_path, 0, 1)


@pytest.mark.parametrize("text", ["[1, 2]", '"done"', "null"])
def test_a_done_json_that_is_no_object_is_named(tmp_path, text):
    bad = _done(tmp_path, "none", 0, text)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))} is not a run record \(a mapping of arm, seed"):
        recorded_threads(tmp_path, 0)


@pytest.mark.parametrize("threads", ["4", 0, -1, 2.0, True])
def test_an_ill_typed_thread_count_is_named_with_its_field(tmp_path, threads):
    bad = _done(tmp_path, "none", 0, json.dumps({"arm": "none", "seed": 0, "steps": 2, "threads": threads}))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))}: field 'threads' must be an integer >= 1"):
        recorded_threads(tmp_path, 0)


def test_good_records_are_read_and_an_old_one_without_threads_passes(tmp_path):
    _done(tmp_path, "none", 0, json.dumps({"arm": "none", "seed": 0, "steps": 2, "threads": 4}))
    _done(tmp_path, "bot_rd", 0, json.dumps({"arm": "bot_rd", "seed": 0, "steps": 2}))  # before the record
    _done(tmp_path, "none", 1, "not json: another seed's, not read")
    assert recorded_threads(tmp_path, 0) == {"runs/none/seed_0": 4}
    with pytest.raises(ValueError, match="runs/none/seed_0 trained with 4 torch thread"):
        check_threads(tmp_path, 0, 2)
