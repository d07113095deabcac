"""The numbers the guides quote from the code (a limit, a default, a constant) are the code's:
each row names the page, the sentence's pattern (read as one line: wrapping is not part of it)
and the value it must show, read from the package. A constant changed in the code but not on the
page, or the other way round, fails here. Measured numbers are not quoted in the guides: they
live in committed files (bench/results/, figures/) that the pages include."""

import math
import re
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from helpers.doc_pages import doc_pages

from gcpo_analysis import models, vocab
from gcpo_analysis.knobs import SHARED
from gcpo_analysis.measures import judges, prepare
from gcpo_analysis.measures.entropy import KLE_T
from gcpo_analysis.rewards.math.grading import MATH_REL_TOL
from gcpo_analysis.study.config import StudyConfig

ROOT = Path(__file__).resolve().parents[2]
NUM = r"(\d[\d,]*(?:\.\d+)?)"
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")


def _exponent(tol: Fraction) -> int:
    """k of a tolerance 10^-k."""
    assert tol.numerator == 1 and 10 ** round(math.log10(tol.denominator)) == tol.denominator
    return round(math.log10(tol.denominator))


def _judge_defaults() -> tuple[float, float]:
    import inspect

    params = inspect.signature(judges.EmbeddingJudge.__init__).parameters
    return params["low"].default, params["high"].default


def _cases():
    low, high = _judge_defaults()
    corpus = ROOT / "tests" / "data" / "math_corpus.jsonl"
    n_corpus = sum(1 for line in corpus.read_text().splitlines() if line.strip())
    import gcpo_train.config as train_config
    import gcpo_train.plot_train as plot_train

    shared_prompt_test = (ROOT / "tests" / "train" / "test_trl_shared_prompt.py").read_text()
    (close_rel,) = re.findall(r"def _close\(a, b, rel=(\S+)\):", shared_prompt_test)
    gradvar_config = yaml.safe_load((ROOT / "configs" / "cpu_gradvar.yaml").read_text())
    return [
        (
            "docs/guides/trl.md",
            r"every pass agree to 10⁻([⁰¹²³⁴⁵⁶⁷⁸⁹]+) relative \(the test's tolerance",
            [_exponent(Fraction(close_rel))],
        ),
        ("docs/guides/track_gradvar.md", rf"`share_prompt: false`, {NUM} steps\) records", [gradvar_config["steps"]]),
        (
            "docs/guides/hostile_input.md",
            rf"cut to {NUM} characters \(`measures.prepare.MAX_TEXT_CHARS`\)",
            [prepare.MAX_TEXT_CHARS],
        ),
        (
            "docs/guides/hostile_input.md",
            rf"more than {NUM} rollouts \(`measures.prepare.LARGE_GROUP`",
            [prepare.LARGE_GROUP],
        ),
        (
            "docs/guides/hostile_input.md",
            rf"more than {NUM} values \(`gcpo_train.config.YAML_NODE_LIMIT`\)",
            [train_config.YAML_NODE_LIMIT],
        ),
        (
            "docs/guides/hostile_input.md",
            rf"at most {NUM} points per curve \(`gcpo_train.plot_train.MAX_POINTS`\)",
            [plot_train.MAX_POINTS],
        ),
        ("docs/guides/hostile_input.md", rf"within {NUM} s \(`models.HUB_PROBE_SECONDS`\)", [models.HUB_PROBE_SECONDS]),
        (
            "docs/guides/hostile_input.md",
            r"tolerance of 10⁻([⁰¹²³⁴⁵⁶⁷⁸⁹]+) \(`grading.MATH_REL_TOL`\)",
            [_exponent(MATH_REL_TOL)],
        ),
        ("docs/guides/hostile_input.md", rf"math_corpus.jsonl` \({NUM} answer/reference pairs", [n_corpus]),
        ("docs/guides/measures.md", rf"`nli_threshold` \({NUM}\) everywhere", [vocab.NLI_THRESHOLD]),
        ("docs/guides/measures.md", rf"\(\$\\alpha_\\text\{{base\}} = {NUM}\$\)", [vocab.ALPHA_BASE]),  # maths
        ("docs/guides/measures.md", rf"{NUM}% by default \(the paper's 20 of 1,000\)", [100 * StudyConfig().trim]),
        ("docs/guides/measures.md", rf"t = {NUM}, entropy in nats", [KLE_T]),
        (
            "docs/guides/measures.md",
            rf"p = clip\(\(cos − {NUM}\)/{NUM}, 0, 1\), crossing {NUM} at cos ≈ {NUM}",
            [low, high - low, vocab.NLI_THRESHOLD, low + vocab.NLI_THRESHOLD * (high - low)],
        ),
        (
            "docs/guides/measures.md",
            rf"SE/ln G ∈ \[{NUM}, {NUM}\]",
            [SHARED["empo_low"].default, SHARED["empo_high"].default],
        ),
    ]


CASES = _cases()


@pytest.mark.parametrize("page, pattern, expected", CASES, ids=[f"{Path(c[0]).stem}-{i}" for i, c in enumerate(CASES)])
def test_the_guides_quote_the_codes_constants(page, pattern, expected):
    text = re.sub(r"\s+", " ", doc_pages()[page])
    found = re.findall(pattern, text)
    assert len(found) == 1, f"{page}: {len(found)} sentences match {pattern!r} (one expected)"
    shown = found[0] if isinstance(found[0], tuple) else (found[0],)
    assert [float(x.replace(",", "").translate(SUPERSCRIPT)) for x in shown] == pytest.approx(
        [float(e) for e in expected]
    ), page
