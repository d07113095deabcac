"""What every landed arm-seed of the comparison's later stages must hold (``test_stage2_runs``,
``test_dose_runs``): the protocol's config, a finished 60-step run, the same 362 held-out
questions, and its no-passage control on them."""

import json
from pathlib import Path

import pandas as pd


def check_landed_run(run: Path, reference: Path, control: Path, allowed: set[str], expected: dict) -> pd.DataFrame:
    """``run``'s config is ``reference``'s (a committed run folder) but for the keys in ``allowed``,
    and holds ``expected``; it finished 60 steps; its held-out predictions score ``reference``'s 362
    questions in order; ``control`` (a no-passage ``*.predictions.parquet``) scores the same ones,
    with its record beside it saying n = 362. Returns the run's held-out predictions."""
    config = json.loads((run / "run.json").read_text())["config"]
    first = json.loads((reference / "run.json").read_text())["config"]
    differ = {k for k in set(config) | set(first) if config.get(k) != first.get(k)}
    assert differ <= allowed | {"output_dir", "resume"}, differ
    assert {k: config.get(k) for k in expected} == expected
    assert (run / "done.json").is_file() and len(list((run / "rollouts").glob("step_*.parquet"))) == 60
    held_out = pd.read_parquet(run / "eval" / "step_000060.predictions.parquet")
    reference_out = pd.read_parquet(reference / "eval" / "step_000060.predictions.parquet")
    assert held_out["query_id"].tolist() == reference_out["query_id"].tolist() and len(held_out) == 362
    blank = pd.read_parquet(control)
    assert blank["query_id"].tolist() == held_out["query_id"].tolist()
    record = control.with_name(control.name.replace(".predictions.parquet", ".json"))
    assert json.loads(record.read_text())["n"] == 362
    return held_out
