"""A training run's run.json and gcpo eval's metrics file record the environment that made them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytest.importorskip("torch")

from gcpo_analysis import __version__  # noqa: E402
from gcpo_train.evaluation.evaluate import write_outputs  # noqa: E402
from gcpo_train.runfiles.run_folder import write_run_info  # noqa: E402


def test_run_json_records_the_environment(tmp_path):
    import torch

    write_run_info(tmp_path, {"config": {"steps": 1}})
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["config"] == {"steps": 1} and info["versions"]["torch"] == torch.__version__
    assert info["environment"]["gcpo"] == __version__
    assert info["environment"]["torch_threads"] == torch.get_num_threads()


def test_eval_metrics_record_the_environment(tmp_path):
    write_outputs(tmp_path / "m.json", {"metrics": {"f1": 0.5}}, pd.DataFrame({"query_id": ["a"], "score": [0.5]}))
    record = json.loads((tmp_path / "m.json").read_text())
    assert record["metrics"] == {"f1": 0.5} and record["environment"]["gcpo"] == __version__
