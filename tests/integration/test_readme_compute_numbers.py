"""The README's GPU estimate of the paper's protocol, wherever it is quoted (README.md,
docs/**/*.md), against configs/compare/compute_estimate.md, the table
scripts/compute_estimate.py writes (tests/train/test_compute_estimate.py checks that the
committed table is the script's output): an edit that drifts fails here."""

from pathlib import Path

from helpers.doc_pages import doc_pages

ROOT = Path(__file__).resolve().parents[2]
ESTIMATE = ROOT / "configs" / "compare" / "compute_estimate.md"
ARMS = ["none", "se", "kle", "care", "cd_rd", "bot_rd"]


def _estimate() -> dict[str, dict[str, str]]:
    lines = [x for x in ESTIMATE.read_text().splitlines() if x.startswith("|")]
    head = [c.strip().strip("`") for c in lines[0].strip("|").split("|")]
    return {row[0]: dict(zip(head, row)) for row in ([c.strip() for c in x.strip("|").split("|")] for x in lines[2:])}


def _range(values: list[str]) -> str:
    lo, hi = min(values, key=float), max(values, key=float)
    return lo if lo == hi else f"{lo}–{hi}"


def test_readme_compute_estimate_table():
    estimate = _estimate()
    rows = []
    for page, text in doc_pages().items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("| benchmark (GPU estimate) |"):
                for r in lines[i + 2 :]:
                    if not r.startswith("|"):
                        break
                    rows.append((page, [c.strip() for c in r.strip().strip("|").split("|")]))
    assert rows, "no '| benchmark (GPU estimate) |' table in README.md or docs/"
    for page, (bench, step, per_run, total) in rows:
        e = estimate[bench]
        assert step == e["s / step"], (page, bench)
        assert per_run == _range([e[a] for a in ARMS]), (page, bench)
        assert total == e["all arms × seeds"], (page, bench)
