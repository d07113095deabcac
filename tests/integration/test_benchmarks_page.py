"""docs/developer/benchmarks.md types no measurement by hand: its timings are the records
bench/record.py wrote (bench/results/*.md), included as committed (``--8<--``). Its own prose may
hold small counts ("step 1", "G − 1") and numbers inside code spans (a flag's value), nothing
else: a decimal, a number of 10 or more, or a number with a unit, ×, or % is a retyped result."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "developer" / "benchmarks.md"
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$')
RETYPED = re.compile(r"(?<![\w.\-/])(\d+\.\d+|\d{2,}|\d+ ?(?:%|×|s\b|ms\b|GB\b|MB\b|MiB\b|GiB\b|KB\b))")


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the page's own prose: not an include, a code block or a code span."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or INCLUDE.match(line):
            continue
        out.append((n, re.sub(r"`[^`]*`", "", re.sub(r"\]\([^)]*\)", "]", line))))
    return out


def test_every_timing_is_an_included_record():
    text = PAGE.read_text()
    includes = [m.group(1) for line in text.splitlines() if (m := INCLUDE.match(line))]
    assert includes, "the page includes no bench record"
    for path in includes:
        assert path.startswith("bench/results/"), path
        assert (ROOT / path).read_text().startswith("<!-- written by `python bench/record.py "), path
    retyped = [
        f"line {n}: {m.group(0)!r} in {line.strip()!r}" for n, line in _prose(text) for m in RETYPED.finditer(line)
    ]
    assert retyped == [], "numbers typed into the benchmarks page (record them with bench/record.py)"


def test_the_guard_sees_a_retyped_timing():
    assert RETYPED.search("a step took 7.08 s") and RETYPED.search("0.38× TRL's step") and RETYPED.search("45 min")
    assert RETYPED.search("peak 3,335 MiB") and RETYPED.search("up to 25%")
    assert not RETYPED.search("G − 1 passes; step 1; SmolLM2-135M; nqa512; bench/results/x.md")
