"""The dataset registry: every registered dataset passes the same checks, as
scikit-learn's ``parametrize_with_checks`` does for estimators, and a toy dataset registered in
one file (tests/helpers/toy_dataset.py) reaches the configs' choices, the CLIs' choices and help,
the loaders and the reward with no other edit."""

import importlib
import json
import math
import sys

import pytest

from gcpo_analysis import vocab
from gcpo_analysis.data import QUERY_COLUMNS, load_queries
from gcpo_analysis.datasets import DATASET_REGISTRY, TASKS, Example, get_dataset, register_dataset, unregister_dataset
from gcpo_analysis.rewards import REWARD_OF_TASK, dataset_reward


def _write(path, record):
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


def check_parses_its_example(name, tmp_path):
    spec = get_dataset(name)
    df = load_queries(name, path=_write(tmp_path / "one.jsonl", spec.example.record))
    assert list(df.columns) == list(QUERY_COLUMNS) and len(df) >= 1
    row = df.iloc[0]
    assert row["dataset"] == name and row["task"] == spec.task and row["split"] == "test"
    assert row["query_id"].startswith(f"{name}/test/")
    assert isinstance(row["question"], str) and row["question"].strip()
    assert list(row["references"]) == list(spec.example.references)


def check_refuses_a_missing_field(name, tmp_path):
    """Each required top-level field removed: a ValueError naming the record (line 1) and the field."""
    record = get_dataset(name).example.record
    required = [k for k in record if k not in get_dataset(name).example.optional]
    assert required, f"{name}: the example names no required field"
    for key in required:
        path = _write(tmp_path / f"no_{key}.jsonl", {k: v for k, v in record.items() if k != key})
        with pytest.raises(ValueError) as err:
            load_queries(name, path=path)
        assert f"{path} line 1" in str(err.value) and repr(key) in str(err.value), (key, str(err.value))
    path = _write(tmp_path / "not_an_object.jsonl", ["a", "list"])
    with pytest.raises(ValueError, match=r"line 1: .*(object|missing field)"):
        load_queries(name, path=path)


def check_reward_of_its_example(name):
    """The worked example's reward, computed by hand at the registration, is what the dataset's
    reward gives, and lies in [0, REWARD_MAX]; so does an empty completion's."""
    ex = get_dataset(name).example
    r = dataset_reward(name, ex.completion, list(ex.references))
    assert 0.0 <= r <= vocab.REWARD_MAX
    assert math.isclose(r, ex.reward, rel_tol=0, abs_tol=1e-12), (name, r, ex.reward)
    assert 0.0 <= dataset_reward(name, "", list(ex.references)) <= vocab.REWARD_MAX


@pytest.mark.parametrize("name", list(DATASET_REGISTRY))
def test_every_registered_dataset_conforms(name, tmp_path):
    check_parses_its_example(name, tmp_path)
    check_refuses_a_missing_field(name, tmp_path)
    check_reward_of_its_example(name)


def test_every_task_has_its_reward_and_prompt_and_the_views_follow_the_registry():
    from gcpo_analysis.prompts import PROMPT_TEMPLATES
    from gcpo_analysis.rewards import task_metrics

    assert set(REWARD_OF_TASK) == set(TASKS) and set(TASKS) <= set(PROMPT_TEMPLATES)
    for task in TASKS:
        assert task_metrics(task, ["2"], [["2"]])["n"] == 1
    assert vocab.DATASETS == tuple(DATASET_REGISTRY)
    assert vocab.MATH_DATASETS == tuple(n for n, d in DATASET_REGISTRY.items() if d.task == "math")
    assert vocab.TASK_OF_DATASET == {n: d.task for n, d in DATASET_REGISTRY.items()}
    # the paper's seven benchmarks, and their reward tasks (Appendix E)
    assert vocab.TASK_OF_DATASET == {
        "narrativeqa": "qa_f1",
        "qasper": "qa_f1",
        "hotpotqa": "hotpot",
        "math500": "math",
        "aime24": "math",
        "olympiadbench": "math",
        "asdiv": "math",
    }


def test_the_study_presets_name_registered_datasets():
    from gcpo_analysis.study.config import PRESETS, StudyConfig

    for name, preset in PRESETS.items():
        config = StudyConfig(**preset)  # checked against the registry's choices when made
        assert config.dataset in DATASET_REGISTRY, name


def test_a_registration_is_checked():
    ex = Example(record={"q": "x"}, references=("x",), completion="x", reward=2.0)
    with pytest.raises(ValueError, match="unknown task 'f1'; expected one of qa_f1, hotpot, math"):
        register_dataset("toy_bad", task="f1", source="toy", example=ex)
    with pytest.raises(ValueError, match="registered already"):
        register_dataset("asdiv", task="math", source="toy", example=ex)(lambda rec, where: iter(()))
    with pytest.raises(ValueError, match="unknown dataset 'nope'; choices: narrativeqa, qasper"):
        load_queries("nope")
    assert "toy_bad" not in DATASET_REGISTRY


@pytest.fixture
def toy_dataset():
    sys.modules.pop("helpers.toy_dataset", None)
    importlib.import_module("helpers.toy_dataset")
    yield "toy_echo"
    unregister_dataset("toy_echo")


def _subparser(name):
    from gcpo_analysis.cli import build_parser

    return build_parser()._subparsers._group_actions[0].choices[name]


def test_a_toy_dataset_reaches_the_configs_the_clis_and_the_loaders(toy_dataset, tmp_path):
    from gcpo_analysis.prompts import build_messages
    from gcpo_analysis.study.config import StudyConfig

    check_parses_its_example(toy_dataset, tmp_path)
    check_refuses_a_missing_field(toy_dataset, tmp_path)
    check_reward_of_its_example(toy_dataset)
    assert toy_dataset in vocab.DATASETS and toy_dataset not in vocab.MATH_DATASETS
    assert vocab.full_completion(None, toy_dataset) is False

    assert StudyConfig(dataset=toy_dataset).dataset == toy_dataset
    assert toy_dataset in _subparser("study").format_help()
    eval_dataset = next(a for a in _subparser("eval")._actions if a.dest == "dataset")
    assert toy_dataset in eval_dataset.choices
    assert toy_dataset in _subparser("train").format_help()

    path = tmp_path / "toy.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Say {w}.", "target": w}) + "\n" for w in "abcd"))
    df = load_queries(toy_dataset, path=path)
    assert list(df["references"]) == [["a"], ["b"], ["c"], ["d"]] and set(df["task"]) == {"qa_f1"}
    assert "Say a." in build_messages(df.iloc[0], tokenizer=None)[0]["content"]

    from gcpo_train.config import TrainConfig
    from gcpo_train.evaluation.splits import load_split

    cfg = TrainConfig(dataset=toy_dataset, data_path=str(path), split_from_single=True, train_frac=0.5)
    assert not cfg.task_is_math
    train, test = load_split(cfg, cfg.train_split), load_split(cfg, cfg.eval_split)
    assert len(train) == len(test) == 2 and set(train["query_id"]).isdisjoint(test["query_id"])


def test_an_unregistered_dataset_is_refused_by_the_configs():
    from gcpo_analysis.study.config import StudyConfig

    assert "toy_echo" not in DATASET_REGISTRY
    with pytest.raises(ValueError, match="dataset must be one of narrativeqa.*asdiv, got 'toy_echo'"):
        StudyConfig(dataset="toy_echo")


def test_the_guide_s_dataset_example_runs_as_written(tmp_path):
    import re
    from pathlib import Path

    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "extending.md"
    block = next(b for b in re.findall(r"```python\n(.*?)```", guide.read_text(), re.S) if "register_dataset" in b)
    try:
        exec(block, {})
        check_parses_its_example("toy_echo", tmp_path)
        check_refuses_a_missing_field("toy_echo", tmp_path)
        check_reward_of_its_example("toy_echo")
    finally:
        DATASET_REGISTRY.pop("toy_echo", None)


def test_the_registry_and_vocab_import_with_the_standard_library_alone():
    """vocab reads the registry at import: neither may pull numpy, pandas or torch in."""
    import subprocess

    code = (
        "import sys, gcpo_analysis.vocab as v, gcpo_analysis.datasets\n"
        "assert len(v.DATASETS) >= 7\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pandas', 'torch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
