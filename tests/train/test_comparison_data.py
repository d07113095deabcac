"""A comparison folder is read once (gcpo_train.compare.comparison_data): the report checks the
results once and reads each rollouts file once, and the report, the plan and the effective
treatment computed from the loaded data equal the folder-reading functions' on a committed
comparison."""

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "figures" / "train_compare" / "compare"


@pytest.fixture
def folder(tmp_path):
    copy = tmp_path / "cmp"
    shutil.copytree(COMMITTED, copy)
    return copy


def test_a_report_reads_each_file_once(folder, monkeypatch):
    import gcpo_train.compare.comparison_data as cd
    from gcpo_train.compare.report import write_report

    calls: Counter = Counter()
    for name in ("check_results", "finished_seeds"):
        real = getattr(cd, name)
        monkeypatch.setattr(cd, name, lambda *a, _r=real, _n=name, **k: (calls.update([_n]), _r(*a, **k))[1])
    import gcpo_train.compare.treatment as tr

    real_read = tr.read_rollouts
    read: Counter = Counter()
    monkeypatch.setattr(tr, "read_rollouts", lambda path, *a, **k: (read.update([path]), real_read(path, *a, **k))[1])
    arms = json.loads((folder / "compare.json").read_text())["modulators"]
    write_report(folder, pd.read_parquet(folder / "results.parquet"), arms, "none", figures=False)
    files = sorted(folder.glob("runs/*/seed_*/rollouts/step_*.parquet"))
    assert calls["check_results"] == 1 and calls["finished_seeds"] == len(arms)
    assert len(files) > 0 and sorted(read) == files and set(read.values()) == {1}


def test_the_loaded_data_gives_the_folder_readers_numbers(folder):
    from gcpo_train.compare.comparison_data import load_comparison
    from gcpo_train.compare.plan import plan, plan_of
    from gcpo_train.compare.report import finished_results
    from gcpo_train.compare.treatment import (
        coupling,
        coupling_of,
        effective_treatment,
        omega_frame,
        omega_of,
        treatment_of,
    )

    data = load_comparison(folder)
    arms = data.arms
    assert arms[0] == "none" and all(data.finished[a] for a in arms)
    for arm in arms:
        runs = {s: data.rollouts[arm, s] for s in data.finished[arm]}
        by_folder = omega_frame(folder, arm, data.eps)
        pd.testing.assert_frame_equal(omega_of(runs, data.eps), by_folder)
        norms = [n for s in data.finished[arm] for n in data.grad_norms.get((arm, s), [])]
        assert treatment_of(by_folder, norms, data.max_grad_norm) == pytest.approx(
            effective_treatment(folder, arm, by_folder, data.max_grad_norm), nan_ok=True
        )
        if arm != "none":
            ref = {s: data.rollouts["none", s] for s in data.finished["none"]}
            pd.testing.assert_frame_equal(coupling_of(runs, ref), coupling(folder, arm, "none"))
    finished = finished_results(data.results, data.steps, data.finished_pairs())
    a, b = plan_of(data), plan(finished, "none", data.margin)
    pd.testing.assert_frame_equal(a, b)
    assert np.isfinite(a["tau"]).all()
