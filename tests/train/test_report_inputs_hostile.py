"""A comparison's results, record and plan file read as untrusted by the report and the planner
(round-eight probes of ``gcpo compare``'s report and ``--plan``): a repeated results row, a score
that is a bool or a text, a step or seed stored as text, a run missing a query, a reference with
no finished run or a score of 0, a NaN max_grad_norm in compare.json, a plan named as one of the
comparison's own files, --plan_file without --plan, and a table of an earlier report. Each test
failed on the code before its fix. Inputs: small hand-made folders (no model is loaded)."""

import json
import math

import pandas as pd
import pytest

pytest.importorskip("torch")

ARMS = ["none", "x", "x:shuffled"]


def _rows(arms=ARMS, seeds=3, queries=4, step=1, reference_score=None) -> pd.DataFrame:
    """Long results (arm, seed, step, query_id, score) whose per-seed deltas vary."""
    rows = [
        dict(
            arm=arm,
            seed=s,
            step=step,
            query_id=f"q{q}",
            score=float(10 + q + s * (i + 1) + i) if reference_score is None or arm != "none" else reference_score,
        )
        for i, arm in enumerate(arms)
        for s in range(seeds)
        for q in range(queries)
    ]
    return pd.DataFrame(rows)


def _folder(tmp_path, arms=ARMS, seeds=3, finished=None, record=None):
    """A comparison folder: compare.json and each run's folder, with a done.json where ``finished``
    (default: every run) holds (arm, seed)."""
    from gcpo_train.compare.layout import arm_seed_folder

    out = tmp_path / "cmp"
    out.mkdir()
    spec = {"config": {}, "modulators": list(arms), "seeds": list(range(seeds)), "steps": 1, **(record or {})}
    (out / "compare.json").write_text(json.dumps(spec))
    for arm in arms:
        for s in range(seeds):
            run = arm_seed_folder(out, arm, s)
            run.mkdir(parents=True)
            if finished is None or (arm, s) in finished:
                (run / "done.json").write_text("{}")
    return out


# ---------------------------------------------------------------------- compare.json (finding 5)
@pytest.mark.parametrize("clip", [math.nan, math.inf, -1.0])
def test_a_max_grad_norm_that_clips_nothing_knowable_is_refused(tmp_path, clip):
    """ "max_grad_norm": NaN was read, every step compared as not clipped, and the summary said 0%
    clipped though every step's norm was 3."""
    from gcpo_train.compare.record import read_record
    from gcpo_train.compare.report import write_report

    out = _folder(tmp_path, record={"config": {"max_grad_norm": clip}})
    with pytest.raises(ValueError, match=r"compare\.json: config field 'max_grad_norm' must be a finite number >= 0"):
        read_record(out / "compare.json")
    with pytest.raises(ValueError, match=r"compare\.json: config field 'max_grad_norm'"):
        write_report(out, _rows(), ARMS, "none", figures=False)


@pytest.mark.parametrize("clip", [0, 0.0, None, 1.0])
def test_a_max_grad_norm_of_0_or_null_still_means_no_clipping(tmp_path, clip):
    from gcpo_train.compare.record import read_record

    out = _folder(tmp_path, record={"config": {"max_grad_norm": clip}})
    assert read_record(out / "compare.json")["config"]["max_grad_norm"] == clip
