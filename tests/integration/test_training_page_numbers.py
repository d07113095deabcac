"""The numbers of docs/results/training.md against the committed files they come from: the
learning gate's table and reading against figures/train_compare/pilot_log.md (included whole at
the end of the page), the protocol against configs/cpu_compare.yaml, and the comparison's reading
against figures/train_compare/compare/ (results.parquet, summary.csv, compare.json). An edit that
drifts from them, or a rerun that changes them, fails here."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "results" / "training.md").read_text()
LOG = (ROOT / "figures" / "train_compare" / "pilot_log.md").read_text()
COMPARE = ROOT / "figures" / "train_compare" / "compare"
CONFIG = yaml.safe_load((ROOT / "configs" / "cpu_compare.yaml").read_text())
NUM = r"[+−-]?\d+(?:\.\d+)?"


def _f(text: str) -> float:
    return float(text.replace("−", "-").replace("+", "").rstrip("%"))


def _one(pattern: str, text: str = PAGE) -> tuple[str, ...]:
    """The groups of the one match of ``pattern`` in ``text`` read as one line (line breaks are
    where the prose wraps, not part of it)."""
    found = re.findall(pattern, re.sub(r"\s+", " ", text))
    assert len(found) == 1, f"{pattern!r}: {len(found)} matches in the page (one expected)"
    return found[0] if isinstance(found[0], tuple) else (found[0],)


def _table(text: str, header_start: str) -> dict[str, list[str]]:
    """{first cell: cells} of the markdown table whose header line starts with ``header_start``."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header_start))
    rows = {}
    for line in lines[i + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def test_the_protocol_is_the_frozen_config():
    """BoolQ's protocol, then SIQA's, then NarrativeQA spans', each against its frozen config."""
    found = re.findall(
        r"LoRA r = (\d+), G = (\d+), (\d+) queries a step, lr (\S+) \(constant\), "
        r"`loss_aggregation: dapo`, (\d+) steps",
        re.sub(r"\s+", " ", PAGE),
    )
    configs = [CONFIG] + [
        yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
        for name in ("cpu_compare_siqa", "cpu_compare_nqa_spans")
    ]
    assert len(found) == len(configs)
    for (lora_r, group, queries, lr, steps), config in zip(found, configs, strict=True):
        assert (int(lora_r), int(group), int(queries), float(lr), int(steps)) == (
            config["lora_r"],
            config["group_size"],
            config["queries_per_step"],
            config["learning_rate"],
            config["steps"],
        )
        assert config["lr_schedule"] == "constant" and config["loss_aggregation"] == "dapo"
    siqa = configs[1]
    n, tokens = _one(r"(\d+) held-out queries \(greedy, (\d+) new tokens\)")
    assert (int(n), int(tokens)) == (siqa["compare"]["eval_n"], siqa["eval_max_new_tokens"])
    n, tokens = _one(r"(\d+) held-out queries \(the same for both seeds\), greedy, (\d+) new tokens")
    assert (int(n), int(tokens)) == (CONFIG["eval_n"], CONFIG["eval_max_new_tokens"])
    assert int(_one(r"what GRPO taught in (\d+) steps")[0]) == CONFIG["steps"]
    spans = configs[2]
    n, tokens = _one(r"all (\d+) held-out questions \(greedy, (\d+) new tokens\)")
    assert (int(n), int(tokens)) == (spans["compare"]["eval_n"], spans["eval_max_new_tokens"])
    assert spans["learning_rate"] == 1e-4 and spans["sampling_kernels"] == "fused_bf16"


def test_the_gate_table_is_the_pilot_logs():
    page = _table(PAGE, "| seed | base F1 |")
    log = _table(LOG, "| seed | base F1 |")
    assert set(page) == {"0", "1"}
    for seed, cells in page.items():
        base, trained, delta, yes, accuracy, vs_yes = cells[1:]
        lbase, ltrained, ldelta, answers, laccuracy, lvs_yes = log[seed][1:]
        assert (base, trained, delta, accuracy, vs_yes) == (lbase, ltrained, ldelta, laccuracy, lvs_yes), seed
        assert yes == answers.split(" / ")[0], seed  # the log gives yes / no / other


def test_the_gates_reading_is_the_pilot_logs():
    page = _table(PAGE, "| seed | base F1 |")
    share = _one(r"nearly always \"yes\", the answer of (\d+)% of the held-out questions")[0]
    assert share == _one(r"\((\d+)% of the held-out references are \"yes\"\)", LOG)[0]
    deltas = _one(rf"\(Δ ({NUM}) and ({NUM}), CIs straddling 0\)")
    assert list(deltas) == [page[s][-1].split(" ")[0] for s in ("0", "1")]
    lr, steps = _one(r"A higher learning rate \((\S+)\) collapsed to \"yes\" within (\d+) steps")
    pilot3 = _table(LOG, "| # | data |")["3"]
    assert pilot3[3].startswith(f"{lr},") and pilot3[4] == steps


def test_the_comparisons_reading_is_the_committed_comparison():
    meta = json.loads((COMPARE / "compare.json").read_text())
    summary = pd.read_csv(COMPARE / "summary.csv").set_index("arm")
    final = pd.read_parquet(COMPARE / "results.parquet").query("step > 0")
    per_seed = final.groupby(["seed", "arm"])["score"].mean()
    n = int(_one(r"evaluated on the first (\d+) held-out queries")[0])
    assert n == meta["eval_n"] == int(final.groupby(["arm", "seed"]).size().unique().item())
    quoted = re.findall(rf"({NUM}) / ({NUM}) \(seed (\d)\)", PAGE)
    assert [int(s) for *_, s in quoted] == meta["seeds"] == [0, 1, 2]
    for none, bot_rd, seed in quoted:
        assert [_f(none), _f(bot_rd)] == [round(per_seed[(int(seed), a)], 1) for a in ("none", "bot_rd")], seed
    constant_no = _one(r"score of the constant answer \"no\" \((\d+\.\d)\)")[0]
    assert _f(constant_no) == round(per_seed[(2, "none")], 1)  # seed 2 answered "no" to every query
    lo, hi = _one(rf"ω of `bot_rd` stayed within about ({NUM})–({NUM})")
    s = summary.loc["bot_rd"]
    assert [_f(lo), _f(hi)] == [round(s.omega_p5, 2), round(s.omega_p95, 2)]
    up_lo, up_hi = _one(r"GRPO's scaled up by (\d+)–(\d+)%")
    assert [int(up_lo), int(up_hi)] == [round(100 * (_f(lo) - 1)), round(100 * (_f(hi) - 1))]
    delta = _one(rf"Δ\(bot_rd − none\) = ({NUM}) \[({NUM}), ({NUM})\]")
    assert [_f(x) for x in delta] == pytest.approx([round(s.delta, 2), round(s.delta_low, 2), round(s.delta_high, 2)])
    seeds, queries = _one(r"(\d+) seeds x (\d+) queries")
    assert (int(seeds), int(queries)) == (len(meta["seeds"]), n)


def test_the_siqa_reading_is_the_committed_comparison():
    """The SIQA reading's numbers and claims against figures/train_compare/siqa (summary.csv and
    gate.md, which test_pilot_log_choice.py recomputes from the predictions)."""
    folder = ROOT / "figures" / "train_compare" / "siqa"
    summary = pd.read_csv(folder / "summary.csv").set_index("arm")
    gate = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in (folder / "gate.md").read_text().splitlines()[2:]
        if not line.startswith("| base policy")
    ]
    ci = [tuple(_f(x) for x in re.findall(NUM, cells[col])[1:3]) for cells in gate for col in (5, 6)]
    vs_base, vs_best = ci[0::2], ci[1::2]
    assert len(gate) == 9 and all(lo > 0 for lo, _ in vs_base) and all(lo < 0 < hi for lo, hi in vs_best)
    assert _one(r"None of the (\w+) arm-seeds beats always answering the best option position")[0] == "nine"
    for arm, name in (("bot_rd", "BoT\\+RD"), ("se", "Seed-GRPO")):
        s = summary.loc[arm]
        d = _one(rf"({NUM}) \[({NUM}), ({NUM})\] for {name}")
        assert [_f(x) for x in d] == [round(s.delta, 2), round(s.delta_low, 2), round(s.delta_high, 2)], arm
        assert round(s.p_holm, 1) == 1.0
        lo, hi = _one(rf"{name}'s ω (?:stayed )?within ({NUM})–({NUM})")
        assert [_f(lo), _f(hi)] == [round(s.omega_p5, 2), round(s.omega_p95, 2)], arm
    up = _one(r"GRPO's updates scaled up by (\d+)–(\d+)%")
    s = summary.loc["bot_rd"]
    assert [int(x) for x in up] == [round(100 * (round(s.omega_p5, 2) - 1)), round(100 * (round(s.omega_p95, 2) - 1))]
    n = int(_one(r"beats the base policy on the (\d+) held-out queries")[0])
    assert n == json.loads((folder / "compare.json").read_text())["eval_n"]
    own = [tuple(_f(x) for x in re.findall(NUM, cells[7])[:3]) for cells in gate]
    assert _one(r"every one of the (\w+) copies the right option")[0] == "nine" and all(d > 0 for d, _, _ in own)
    lo, hi = _one(rf"\(Δ from ({NUM}) to\s+({NUM})\s+F1 points")
    assert [_f(lo), _f(hi)] == [min(d for d, _, _ in own), max(d for d, _, _ in own)]
    clear = _one(r"the CI clear of 0 in (\w+) of the nine")[0]
    assert clear == ["none", "one", "two", "three", "four", "five", "six"][sum(low > 0 for _, low, _ in own)]
    base = next(line for line in (folder / "gate.md").read_text().splitlines() if line.startswith("| base policy"))
    quoted = _one(rf"the base policy ({NUM}) \[({NUM}), ({NUM})\]\)")
    assert [_f(x) for x in quoted] == [_f(x) for x in re.findall(NUM, base.split("|")[8])[:3]]
