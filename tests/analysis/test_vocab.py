"""One vocabulary (gcpo_analysis/vocab.py): each shared name and default is defined once, and the
threshold's old name ``threshold`` still works, with a warning, wherever it was accepted."""

import ast
from pathlib import Path

import pytest
from helpers.embedders import HashEmbedder
from helpers.source_trees import parsed

from gcpo_analysis import vocab
from gcpo_analysis.frames import read_frame
from gcpo_analysis.measures.modulators import MODULATORS
from gcpo_analysis.measures.score import MEASURES, score_groups
from gcpo_analysis.study import StudyConfig
from gcpo_analysis.study.run import _ROLLOUT_KEYS, _rollout_settings, _settings_hash

ROOT = Path(__file__).resolve().parents[2]
CODE = [p for d in ("gcpo_analysis", "gcpo_train", "bench") for p in sorted((ROOT / d).rglob("*.py"))]
VOCAB = ROOT / "gcpo_analysis" / "vocab.py"
EXAMPLE = ROOT / "examples" / "rollouts_small.jsonl"


def _trees():
    for path in CODE:
        if path != VOCAB:
            yield path.relative_to(ROOT), parsed(path)


def _named_defaults(tree):
    """(name, default node) of parameters, dataclass fields (``x: float = field(default=...)``
    or ``_f(value, ...)``) and argparse flags."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            positional = a.posonlyargs + a.args
            yield from ((arg.arg, d) for arg, d in zip(positional[len(positional) - len(a.defaults) :], a.defaults))
            yield from ((arg.arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Call):
                value = {k.arg: k.value for k in value.keywords}.get("default", value.args[0] if value.args else None)
            if value is not None:
                yield node.target.id, value
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            default = {k.arg: k.value for k in node.keywords}.get("default")
            if flags and default is not None:
                yield flags[0].lstrip("-").replace("-", "_"), default


def test_the_paper_defaults_are_names_not_literals():
    found = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and type(node.value) is float and node.value == vocab.NLI_THRESHOLD:
                found.append(f"{path}:{node.lineno} the literal {node.value}")
        for name, default in _named_defaults(tree):
            if not (isinstance(default, ast.Constant) and type(default.value) in (int, float)):
                continue
            if (
                ("alpha" in name and default.value == vocab.ALPHA_BASE)
                or "threshold" in name
                or name in ("r_min", "r_max")
            ):
                found.append(f"{path}:{default.lineno} {name} = {default.value}")
    assert not found, "use the names of gcpo_analysis/vocab.py: " + "; ".join(found)


def test_the_shared_names_are_assigned_only_in_vocab():
    names = {
        "DATASETS",
        "MATH_DATASETS",
        "ALPHA_BASE",
        "NLI_THRESHOLD",
        "THRESHOLD",
        "R_MIN",
        "R_MAX",
        "EMBEDDINGS",
        "CLUSTERS",
    }
    found = []
    for path, tree in _trees():
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name) and leaf.id in names:
                        found.append(f"{path}:{node.lineno} {leaf.id}")
    assert not found, found


@pytest.mark.slow
def test_no_second_list_of_datasets():
    found = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                named = {e.value for e in node.elts if isinstance(e, ast.Constant)} & set(vocab.DATASETS)
                if len(named) >= 2:
                    found.append(f"{path}:{node.lineno} {sorted(named)}")
    assert not found, "import DATASETS / MATH_DATASETS from gcpo_analysis.vocab: " + "; ".join(found)


def test_measures_and_modulators_name_their_needs_alike():
    measure_needs = set().union(*MEASURES.values())
    modulator_needs = set().union(*(m.needs for m in MODULATORS.values()))
    assert measure_needs == {vocab.EMBEDDINGS, vocab.CLUSTERS} and measure_needs <= modulator_needs


def test_configs_and_study_use_the_vocabulary():
    from gcpo_train.config import TrainConfig

    cfg = TrainConfig()
    assert (cfg.alpha_base, cfg.nli_threshold, cfg.r_min, cfg.r_max) == (
        vocab.ALPHA_BASE,
        vocab.NLI_THRESHOLD,
        vocab.R_MIN,
        vocab.R_MAX,
    )
    assert StudyConfig().nli_threshold == vocab.NLI_THRESHOLD
    with pytest.raises(ValueError, match="dataset must be one of " + ", ".join(vocab.DATASETS) + ", got 'nope'"):
        TrainConfig(dataset="nope")


# ----------------------------------------------------------------------------- the old name
@pytest.fixture(scope="module")
def rollouts():
    return read_frame(EXAMPLE)


def _scored(rollouts, **kw):
    return score_groups(rollouts, "se,bot", embedder=HashEmbedder(), judge="lexical", progress=False, **kw)


def test_the_study_settings_hash_is_unchanged():
    # a killed run restarts when parts/settings.json holds the same hash
    # (max_int_answer, added later, is hashed only when set)
    assert _settings_hash(_rollout_settings(StudyConfig())) == "43d2c4e779ed2d4a"
    assert set(_rollout_settings(StudyConfig())) == set(_ROLLOUT_KEYS)


def test_field_kinds_read_type_hints_not_strings():
    """The configs' type coercion reads typing.get_type_hints: the annotations are strings under
    `from __future__ import annotations`, and `int | None` must count as int, `list[str] | None` as list."""
    import dataclasses

    from gcpo_analysis.cli import build_parser
    from gcpo_analysis.study.config import StudyConfig
    from gcpo_analysis.vocab import field_kinds
    from gcpo_train.config import TrainConfig

    # why get_type_hints is needed: the class bodies' annotations are strings (read from the class, as
    # the inherited Field objects are shared with GCPOConfig, whose HfArgumentParser resolves their .type)
    assert all(isinstance(a, str) for cls in TrainConfig.__mro__ for a in vars(cls).get("__annotations__", {}).values())
    kinds = field_kinds(TrainConfig)
    assert set(kinds) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert (kinds["n_train"], kinds["alpha_base"], kinds["use_lora"], kinds["model"]) == (int, float, bool, str)
    assert kinds["lora_target_modules"] is list and kinds["modulator_params"] is dict
    assert kinds["track_gradvar"] is None  # bool | str: checked by validate, not by the coercion
    with pytest.raises(ValueError, match="n_train must be an integer"):
        TrainConfig(n_train="3")
    with pytest.raises(ValueError, match="lora_target_modules must be a list"):
        TrainConfig(lora_target_modules="q_proj")
    assert TrainConfig(learning_rate="1e-4").learning_rate == 1e-4

    study = field_kinds(StudyConfig)
    assert (study["max_int_answer"], study["temperature"], study["data_path"]) == (int, float, str)
    args = build_parser().parse_args(["study", "--max-int-answer", "5", "--temperature", "0.5", "--model", "m"])
    assert (args.max_int_answer, args.temperature, args.model) == (5, 0.5, "m")
    assert type(args.max_int_answer) is int and type(args.temperature) is float
