"""The README's table of findings: one row per result, its headline numbers with their 95% CIs,
each recomputed here from the committed file it is rounded from. Every row must have a check
(``CHECKS``, keyed by the start of its first cell): a row added without one fails, so a new
finding cannot reach the README unchecked. A check returns the numbers of the row, in order."""

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIG = ROOT / "figures"
HEADER = "| result | headline (95% CI) | page |"
NUM = r"[+−-]?\d+(?:\.\d+)?%?"


def _rows() -> dict[str, list[str]]:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert HEADER in lines, f"the README has no findings table ({HEADER!r})"
    rows = {}
    for line in lines[lines.index(HEADER) + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def _nums(cell: str) -> list[str]:
    # names with digits in them are no results: L², SmolLM2-135M, Table 4, App. C, F1
    cell = re.sub(r"SmolLM2-135M|Table 4|2?L²|App\. \w|±|\bF1\b", " ", cell)
    cell = re.sub(r"(\d),(\d{3})\b", r"\1\2", cell)  # a thousands separator: 20,000 is one number
    return [x.replace("−", "-") for x in re.findall(NUM, cell)]


def _tri(estimate, low, high, fmt="{:.2f}", sign=False) -> list[str]:
    f = (lambda x: fmt.replace("{:", "{:+").format(x)) if sign else fmt.format
    return [f(x) for x in (estimate, low, high)]


def _v_pos(run: str, name: str) -> pd.DataFrame:
    t = pd.read_csv(FIG / run / "tables" / f"{name}.csv")
    return t[(t.frame == "trimmed") & (t.subset == "v_pos")].set_index("statistic")


def _v_parts() -> list[str]:
    t = _v_pos("cpu_large", "v_parts")
    share, rho = t.loc["share_C_over_V_median"], t.loc["rho(V, grad_var_norm)"]
    pct = [f"{100 * x:.1f}%" for x in (share.estimate, share.ci_low, share.ci_high)]
    return pct + _tri(rho.estimate, rho.ci_low, rho.ci_high) + [str(int(share.n)), "0"]


def _confirmatory() -> list[str]:
    c = pd.read_csv(FIG / "cpu_large" / "tables" / "confirmatory.csv")
    r = c[(c.frame == "trimmed") & (c.target == "grad_var") & (c.contrast == "bot - se")].iloc[0]
    return _tri(r.estimate, r.ci_low, r.ci_high) + [f"{r.p_holm:.2f}", str(int(r.n))]


def _spearman(run: str, measure: str) -> pd.Series:
    return pd.read_csv(FIG / run / "tables" / "spearman.csv").set_index("measure").loc[measure]


def _table4() -> list[str]:
    bot = _spearman("cpu_math", "bot")
    return _tri(bot.rho, bot.ci_low, bot.ci_high) + ["0.610"]  # the paper's Table 4, as quoted on the studies page


def _narrativeqa() -> list[str]:
    bot, rd = _spearman("cpu_large", "bot"), _spearman("cpu_large", "rd")
    assert bot.n == rd.n
    return _tri(bot.rho, bot.ci_low, bot.ci_high) + _tri(rd.rho, rd.ci_low, rd.ci_high) + [str(int(bot.n))]


def _lipschitz() -> list[str]:
    r = pd.read_csv(FIG / "cpu_large" / "tables" / "lipschitz.csv").set_index("statistic").loc["mean_rho"]
    return _tri(r.estimate, r.ci_low, r.ci_high)


def _train_gradvar() -> list[str]:
    sp = pd.read_csv(FIG / "train_gradvar" / "tables" / "pooled" / "spearman.csv").set_index("measure")
    steps = json.loads((FIG / "train_gradvar" / "run" / "run.json").read_text())["config"]["steps"]
    rd, bot = sp.loc["rd"], sp.loc["bot"]
    semantic = sp.drop(index="rd")  # a non-detection, stated with what its intervals exclude
    assert (semantic.ci_low < 0).all()
    excluded = f"{math.ceil(100 * semantic.ci_high.max()) / 100:.2f}"
    return _tri(rd.rho, rd.ci_low, rd.ci_high) + _tri(bot.rho, bot.ci_low, bot.ci_high) + [excluded, str(steps)]


def _training_comparison() -> list[str]:
    s = pd.read_csv(FIG / "train_compare" / "nqa_fp32" / "confirmatory" / "summary.csv").set_index("arm")
    r = s.loc["bot_rd"]
    assert r.verdict == "inconclusive"
    first = _tri(r.delta, r.delta_low, r.delta_high, sign=True) + [str(int(r.seeds)), str(int(r.df)), f"{r.margin:.2f}"]
    # the planned second stage: its seeds and its fixed margin, as its plan states them
    plan = " ".join((FIG / "train_compare" / "nqa_fp32" / "stage2_plan.md").read_text(encoding="utf-8").split())
    planned = re.search(r"a paired t test of (\d+) seeds", plan).group(1)
    margin = re.search(r"\*\*δ = ([0-9.]+) F1\*\*", plan).group(1)
    return first + [planned, margin]


def _update_alignment() -> list[str]:
    """The cells of figures/update_alignment/headline.md (bot_rd at the last snapshot; the lowest
    and highest in-sample and cross-fitted oracle estimates), as that committed table writes
    them, and the plan's margin and batch count."""
    lines = (FIG / "update_alignment" / "headline.md").read_text().splitlines()
    cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.strip("|").split("|")[1:]] for ln in lines[2:]}
    last = re.findall(NUM, cells["bot_rd"][-1])
    step = re.search(r"step(\d+)", lines[0].split("|")[-2]).group(1)

    def extremes(row: str) -> list[str]:
        est = [float(re.findall(NUM, c)[0]) for c in cells[row]]
        return [f"{min(est):+.3f}", f"{max(est):+.3f}"]

    card = json.loads((FIG / "update_alignment" / "card.json").read_text())["restat"]
    reading = (FIG / "update_alignment" / "reading.md").read_text()
    paper = ("se", "kle", "care", "rd", "cd", "bot", "cd_rd", "bot_rd")
    for excluded in re.findall(r"Gains of 0.01 or more are excluded for ([^;]+);", reading):
        assert set(paper) <= {m.strip() for m in excluded.split(",")}, excluded
    return (
        [step, *last, str(card["n_batches"]), "0.01"]
        + extremes("*oracle, in-sample (fits the reference that scores it)*")
        + extremes("*oracle, cross-fitted*")
    )


def _adam_metric() -> list[str]:
    """figures/update_alignment/adam/metric.parquet: bot_rd at the last DAPO snapshot in Adam's
    metric, the Holm family's size and its snapshots, nothing clearing 0, and every paper
    measure's CI excluding the margin."""
    import pandas as pd

    m = pd.read_parquet(FIG / "update_alignment" / "adam" / "metric.parquet")
    dapo = m[(m["kind"] == "modulator") & (m["family"] == "dapo")]
    steps = sorted(int(re.search(r"step(\d+)", s).group(1)) for s in dapo["snapshot"].unique())
    last = dapo[(dapo["snapshot"] == f"fp32_step{steps[-1]}") & (dapo["weighting"] == "bot_rd")].iloc[0]
    assert not (m["reading"] == "clears 0 after Holm").any()
    paper = dapo[dapo["weighting"].isin(["se", "kle", "care", "rd", "cd", "bot", "cd_rd", "bot_rd"])]
    assert (paper["adam_hi"] < 0.01).all()
    return [
        str(steps[-1]),
        *(f"{last[c]:+.4f}" for c in ("adam_dcos", "adam_lo", "adam_hi")),
        str(len(dapo)),
        *map(str, steps),
        "0",
        "0.01",
    ]


def _bot_bound() -> list[str]:
    claims = json.loads((FIG / "proofs.json").read_text())["claims"]
    c = next(c for c in claims if c["claim"].startswith("BoT bound"))
    return [f"{c['worst_ratio']:.3f}", f"{c['median']:.3f}", str(c["instances"]), f"{100 * c['worst_violation']:.1f}%"]


CHECKS = {
    "V is almost all gradient norm": _v_parts,
    "The confirmatory contrast": _confirmatory,
    "The paper's Table 4": _table4,
    "On NarrativeQA only RD": _narrativeqa,
    "Gradients follow the answer embedding": _lipschitz,
    "On a training run": _train_gradvar,
    "GCPO against GRPO, trained": _training_comparison,
    "No weighting is seen to point the update": _update_alignment,
    "In Adam's metric too": _adam_metric,
    "The App. C BoT bound": _bot_bound,
}


def _check_for(name: str):
    found = [check for key, check in CHECKS.items() if name.startswith(key)]
    assert len(found) == 1, f"README findings row {name!r} has no check in {__file__} (CHECKS)"
    return found[0]


@pytest.mark.parametrize("name", sorted(_rows()))
def test_each_findings_row_quotes_its_committed_numbers(name):
    cells = _rows()[name]
    expect = [x.replace("−", "-") for x in _check_for(name)()]
    assert _nums(" ".join(cells[:2])) == expect, (name, cells[1])


def test_each_row_links_a_results_page():
    for name, cells in _rows().items():
        link = re.fullmatch(r"\[[^]]+\]\((docs/[^)#]+)(#[^)]*)?\)", cells[2])
        assert link and (ROOT / link.group(1)).exists(), (name, cells[2])


def test_the_table_is_the_findings_of_every_results_page():
    pages = {re.search(r"\((docs/[^)#]+)", cells[2]).group(1) for cells in _rows().values()}
    for page in ("studies", "training", "update_alignment", "train_gradvar"):
        assert f"docs/results/{page}.md" in pages, page
