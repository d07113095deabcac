"""One default per knob: the settings that TrainConfig, GCPOConfig, StudyConfig,
``score_groups`` and ``gcpo score`` share take their defaults from gcpo_analysis/vocab.py, and the
``packaged`` policy alias works wherever a model is named, through one resolver."""

import argparse
import inspect
import math
from dataclasses import fields

import pandas as pd
import pytest
from helpers.embedders import HashEmbedder

from gcpo_analysis import models, vocab
from gcpo_analysis.cli import build_parser, main
from gcpo_analysis.frames import read_frame
from gcpo_analysis.measures.judges import make_judge
from gcpo_analysis.measures.score import score_groups
from gcpo_analysis.study import StudyConfig
from gcpo_analysis.study.lipschitz import lipschitz_study
from gcpo_analysis.study.run import _rollout_settings, _settings_hash
from gcpo_train.config import TrainConfig

EXAMPLE = "examples/rollouts_small.jsonl"


def _field_default(cls, name):
    return {f.name: f.default for f in fields(cls)}[name]


def _score_flag(dest):
    """The default `gcpo score` runs with: a knob flag's parser default is None (so that a flag
    given is told from its default) and the run fills the knob's declared default."""
    from gcpo_analysis.knobs import SHARED
    from gcpo_analysis.measures.cli import SCORE_KNOBS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    default = next(a for a in sub.choices["score"]._actions if a.dest == dest).default
    if dest in SCORE_KNOBS:
        assert default is None
        return SHARED[dest].default
    return default


def _param_default(fn, name):
    return inspect.signature(fn).parameters[name].default


def test_the_judge_has_one_default():
    trl = pytest.importorskip("gcpo_train.trl")
    found = {
        "TrainConfig": TrainConfig().judge,
        "GCPOConfig": _field_default(trl.GCPOConfig, "judge"),
        "StudyConfig": StudyConfig().judge,
        "score_groups": _param_default(score_groups, "judge"),
        "gcpo score": _score_flag("judge"),
        "lipschitz_study": _param_default(lipschitz_study, "judge"),
        "make_judge": _param_default(make_judge, "spec"),
    }
    assert found == dict.fromkeys(found, vocab.JUDGE) and vocab.JUDGE == "embedding"


def test_use_full_completion_has_one_default_and_trl_its_written_exception(tmp_path):
    trl = pytest.importorskip("gcpo_train.trl")
    found = {
        "TrainConfig": TrainConfig().use_full_completion,
        "score_groups": _param_default(score_groups, "use_full_completion"),
        "gcpo score": _score_flag("full_completion"),
        "lipschitz_study": _param_default(lipschitz_study, "use_full_completion"),
    }
    assert found == dict.fromkeys(found, vocab.USE_FULL_COMPLETION) and vocab.USE_FULL_COMPLETION is None
    # GCPOConfig cannot know the dataset: its field is the same declaration (auto), and auto resolves
    # to the named exception, with its reason in vocab
    assert _field_default(trl.GCPOConfig, "use_full_completion") is vocab.USE_FULL_COMPLETION
    made = trl.GCPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    assert made.use_full_completion is vocab.TRL_USE_FULL_COMPLETION is True
    assert (
        trl.GCPOConfig(
            output_dir=str(tmp_path), use_cpu=True, report_to=[], use_full_completion=False
        ).use_full_completion
        is False
    )
    assert _param_default(trl.group_weights, "use_full_completion") is vocab.TRL_USE_FULL_COMPLETION
    assert "TRL" in inspect.getsource(vocab) and "differs" in inspect.getsource(vocab)


def test_temperature_and_seed_of_training_and_the_study_agree():
    assert TrainConfig().temperature == StudyConfig().temperature == vocab.TEMPERATURE == 0.9
    assert TrainConfig().seed == StudyConfig().seed == vocab.SEED == 0
    assert TrainConfig().model == vocab.PAPER_POLICY
    from gcpo_analysis.study.config import PRESETS

    assert PRESETS["paper"]["judge"] == vocab.PAPER_JUDGE and PRESETS["paper"]["model"] == vocab.PAPER_POLICY


@pytest.mark.parametrize(
    "setting, datasets, expected",
    [
        (True, "narrativeqa", True),  # an explicit setting always wins
        (False, "math500", False),
        (None, "math500", True),  # auto: math embeds the completion (Appendix E)
        (None, "narrativeqa", False),
        (None, ["asdiv", "aime24"], True),
        (None, ["asdiv", "hotpotqa"], False),  # a mixed frame is not all math
        (None, [], False),
        (None, None, False),  # unknown dataset: the extracted answer
        (None, pd.Series(["math500", math.nan]), False),  # a missing name is not math
    ],
)
def test_full_completion_resolves_auto_by_dataset(setting, datasets, expected):
    assert vocab.full_completion(setting, datasets) is expected


def test_train_config_resolves_auto_as_the_resolver_does():
    for dataset in vocab.DATASETS:
        cfg = TrainConfig(dataset=dataset)
        assert cfg.full_completion is (dataset in vocab.MATH_DATASETS)
    assert TrainConfig(dataset="math500", use_full_completion=False).full_completion is False


@pytest.fixture(scope="module")
def rollouts():
    return read_frame(EXAMPLE)


def _cd(frame, **kw):
    return score_groups(frame, "cd", embedder=HashEmbedder(), progress=False, **kw)


def test_score_groups_auto_embeds_completions_of_a_math_frame(rollouts):
    math_frame = rollouts.assign(dataset="math500")
    auto = _cd(math_frame)
    assert auto.attrs["gcpo"]["text"] == "completion"
    assert auto.equals(_cd(math_frame, use_full_completion=True))
    answers = _cd(math_frame, use_full_completion=False)
    assert answers.attrs["gcpo"]["text"] == "answer" and not auto["cd"].equals(answers["cd"])
    # a QA frame, or one without a dataset column, keeps the extracted answers
    assert _cd(rollouts.assign(dataset="narrativeqa")).attrs["gcpo"]["text"] == "answer"
    assert _cd(rollouts).attrs["gcpo"]["text"] == "answer"


def test_gcpo_score_auto_and_both_flags(rollouts, tmp_path):
    src = tmp_path / "math.jsonl"
    rollouts.assign(dataset="math500").to_json(src, orient="records", lines=True)
    texts = {}
    for name, flags in (("auto", []), ("yes", ["--full-completion"]), ("no", ["--no-full-completion"])):
        out = tmp_path / f"{name}.parquet"
        assert main(["score", str(src), "-o", str(out), "--measures", "rd", *flags]) == 0
        texts[name] = pd.read_json(out.with_suffix(".meta.json"), typ="series")["text"]
    assert texts == {"auto": "completion", "yes": "completion", "no": "answer"}


# ----------------------------------------------------------------------------- the packaged alias
@pytest.mark.parametrize(
    "name, expected",
    [
        (None, None),
        ("", None),
        ("packaged", None),
        (" packaged ", None),
        (models.DEFAULT_POLICY, None),
        ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"),
        ("tiny:llama", "tiny:llama"),
        ("./packaged", "./packaged"),  # a path stays a path
    ],
)
def test_resolve_policy(name, expected):
    assert models.resolve_policy(name) == expected
    assert models.is_packaged_policy(name) is (expected is None)


class _ReachedThePackagedPolicy(Exception):
    pass


@pytest.fixture
def packaged_sentinel(monkeypatch):
    """Loading the packaged policy stops with a sentinel at the point where it would read the GGUF
    (so the test needs no model, and a hub lookup of the name 'packaged' would show as another error)."""

    def sentinel():
        raise _ReachedThePackagedPolicy

    monkeypatch.setattr(models, "packaged_policy_gguf", sentinel)
    monkeypatch.setattr(models, "offline_first", lambda name: pytest.fail(f"{name!r} went to the hub"))


@pytest.mark.parametrize("name", ["packaged", None, models.DEFAULT_POLICY])
def test_load_policy_and_describe_policy_accept_the_alias(packaged_sentinel, name):
    pytest.importorskip("transformers")
    with pytest.raises(_ReachedThePackagedPolicy):
        models.load_policy(name)
    with pytest.raises(_ReachedThePackagedPolicy):
        models.describe_policy(name)


def test_the_trainer_and_eval_loader_accept_the_alias(packaged_sentinel):
    pytest.importorskip("torch")
    from gcpo_train.model.policy import load_model_and_tokenizer

    with pytest.raises(_ReachedThePackagedPolicy):
        load_model_and_tokenizer("packaged")  # gcpo train --model packaged, gcpo eval packaged


def test_gcpo_study_model_packaged_is_the_default_policy(monkeypatch):
    from gcpo_analysis.study import run as study

    seen = []
    monkeypatch.setattr(study, "run_study", seen.append)
    main(["study", "--model", "packaged"])
    main(["study"])
    assert [c.model for c in seen] == [None, None]
    # the same settings, so a run started with either name resumes under the other
    assert _settings_hash(_rollout_settings(seen[0])) == _settings_hash(_rollout_settings(StudyConfig()))
    assert StudyConfig(model="Qwen/Qwen2.5-1.5B-Instruct").model == "Qwen/Qwen2.5-1.5B-Instruct"


@pytest.mark.parametrize(
    "argv",
    [
        [
            "eval",
            "packaged",
            "--dataset",
            "narrativeqa",
            "--n",
            "1",
        ],  # a dataset: eval checks its inputs before the model
        ["train", "--model", "packaged", "--steps", "1", "--device", "cpu", "--output_dir", "{tmp}/run"],
        ["study", "--model", "packaged", "--n-queries", "1", "--output", "{tmp}/study"],
    ],
    ids=["eval", "train", "study"],
)
def test_every_command_that_names_a_model_loads_the_packaged_policy(packaged_sentinel, tmp_path, argv):
    """`gcpo eval packaged`, `gcpo train --model packaged` and `gcpo study --model packaged` all
    reach the packaged GGUF (the sentinel), none asks the hub for a model called 'packaged'."""
    pytest.importorskip("torch")
    with pytest.raises(_ReachedThePackagedPolicy):
        main(["--traceback", *[a.format(tmp=tmp_path) for a in argv]])
