"""The second stage's landed arm-seeds (figures/train_compare/nqa_fp32/stage2/) against its plan:
only seeds 13–21 of none and bot_rd, each trained under the confirmatory protocol (its config the
first stage's but for the seed), finished, evaluated on the same 362 questions, and with its
no-passage control; the card is the first stage's with the seeds extended to 21."""

import json
from pathlib import Path

import pytest
from helpers.landed_runs import check_landed_run

FOLDER = Path(__file__).resolve().parents[2] / "figures" / "train_compare" / "nqa_fp32"
STAGE2 = FOLDER / "stage2"
FIRST = FOLDER / "confirmatory"
RUNS = sorted(STAGE2.glob("runs/*/seed_*"))


def test_the_card_is_the_first_stages_with_the_second_stages_seeds():
    card, first = json.loads((STAGE2 / "compare.json").read_text()), json.loads((FIRST / "compare.json").read_text())
    assert card["seeds"] == list(range(22))
    assert card["config"] == first["config"] and card["steps"] == first["steps"] == 60
    assert set(card["data"]) == {"train", "test"} and all(len(d["sha256"]) == 64 for d in card["data"].values())


def test_only_planned_arm_seeds_landed():
    assert RUNS, "no stage-2 run landed"
    for run in RUNS:
        arm, seed = run.parent.name, int(run.name.removeprefix("seed_"))
        assert arm in ("none", "bot_rd") and 13 <= seed <= 21, run


@pytest.mark.parametrize("run", RUNS, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_each_run_is_the_first_stages_protocol_finished_and_controlled(run):
    arm, seed = run.parent.name, int(run.name.removeprefix("seed_"))
    control = STAGE2 / "nopassage" / f"{arm}_seed_{seed}_step_60.predictions.parquet"
    check_landed_run(run, FIRST / "runs" / arm / "seed_0", control, {"seed"}, {"seed": seed})


def test_the_training_page_names_the_landed_seeds():
    page = " ".join((FOLDER.parents[2] / "docs" / "results" / "training.md").read_text(encoding="utf-8").split())
    stage2 = sorted({int(p.name.removeprefix("seed_")) for p in RUNS})
    complete = [s for s in stage2 if all((STAGE2 / "runs" / arm / f"seed_{s}").is_dir() for arm in ("none", "bot_rd"))]
    dose = sorted(int(p.name.removeprefix("seed_")) for p in (FOLDER / "dose").glob("runs/bot_rd-alpha10/seed_*"))
    assert complete == stage2, "a stage-2 seed landed in one arm only"
    seeds = ", ".join(map(str, complete))
    assert f"stage 2, seed{'s' if len(complete) > 1 else ''} {seeds} of both arms" in page
    assert f"the dose arm, seed{'s' if len(dose) > 1 else ''} {', '.join(map(str, dose))}" in page


def test_both_arms_of_a_seed_ran_on_one_machine_and_the_readme_names_it():
    """A seed's two arms round alike only on one processor (the plan's first amendment): where
    run.json records it, both arms name the same ``cpu_signature``, and the stage's README names
    each seed under its machine."""
    import re

    readme = " ".join((STAGE2 / "README.md").read_text(encoding="utf-8").split())
    named: dict[str, set[int]] = {}
    for seeds, signature in re.findall(
        r'seeds? ([\d, and]+?) (?:ran on a processor of `cpu_signature` |on )"([^"]+)"', readme
    ):
        named.setdefault(signature, set()).update(int(s) for s in re.findall(r"\d+", seeds))
    machines: dict[int, set[str]] = {}
    for run in RUNS:
        environment = json.loads((run / "run.json").read_text())["environment"]
        if "cpu_signature" in environment:
            machines.setdefault(int(run.name.removeprefix("seed_")), set()).add(environment["cpu_signature"])
    assert machines, "no landed run records its machine"
    for seed, signatures in machines.items():
        assert len(signatures) == 1, f"seed {seed}: its arms ran on {sorted(signatures)}"
        assert seed in named.get(signatures.pop(), set()), f"the README does not name seed {seed}'s machine"
