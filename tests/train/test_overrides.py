"""One override syntax (gcpo_train/overrides.py): ``gcpo train``, ``gcpo compare`` and
``bench/train_step.py`` each take ``--<field> V`` and ``--set FIELD=V``, with the same meaning."""

import argparse
import importlib.util
from pathlib import Path

import pytest

from gcpo_train.config import load_config
from gcpo_train.overrides import overrides_from

ROOT = Path(__file__).resolve().parents[2]


def _train_parser():
    from gcpo_train.cli import add_train_parser

    return add_train_parser(argparse.ArgumentParser().add_subparsers())


def _compare_parser():
    from gcpo_train.compare.cli import add_parser

    return add_parser(argparse.ArgumentParser().add_subparsers())


def _bench_parser(monkeypatch):
    """bench/train_step.py's parser, caught as its main() builds it."""
    spec = importlib.util.spec_from_file_location("bench_train_step", ROOT / "bench" / "train_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    caught = {}

    def stop(self, argv=None):
        caught["parser"] = self
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    with pytest.raises(SystemExit):
        module.main([])
    monkeypatch.undo()
    return caught["parser"]


COMMANDS = {
    "train": lambda mp: (_train_parser(), []),
    "compare": lambda mp: (_compare_parser(), ["--config", "c.yaml", "--output", "o"]),
    "bench": lambda mp: (_bench_parser(mp), []),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_both_spellings_give_the_same_overrides(command, monkeypatch):
    parser, required = COMMANDS[command](monkeypatch)
    flags = overrides_from(
        parser.parse_args(required + ["--learning_rate", "0.0001", "--use_lora", "false", "--resume"])
    )
    pairs = overrides_from(
        parser.parse_args(required + ["--set", "learning_rate=0.0001", "use_lora=false", "resume=true"])
    )
    mixed = overrides_from(
        parser.parse_args(required + ["--learning-rate", "0.0001", "--set", "use_lora=false", "resume=true"])
    )
    assert flags == pairs == mixed == {"learning_rate": 0.0001, "use_lora": False, "resume": True}
    assert overrides_from(parser.parse_args(required)) == {}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_field_given_twice_or_unknown_is_refused(command, monkeypatch, tmp_path):
    parser, required = COMMANDS[command](monkeypatch)
    with pytest.raises(ValueError, match="learning_rate given both"):
        overrides_from(parser.parse_args(required + ["--learning_rate", "0.0001", "--set", "learning_rate=2e-4"]))
    with pytest.raises(ValueError, match="not of the form key=value"):
        overrides_from(parser.parse_args(required + ["--set", "learning_rate"]))
    with pytest.raises(ValueError, match="learning_rate"):  # close matches from load_config
        load_config(None, overrides_from(parser.parse_args(required + ["--set", "learning_rat=1e-4"])))


def test_a_commands_own_flag_keeps_its_name_and_the_field_goes_through_set():
    """compare's --eval_every is the comparison's schedule; the field is reached by --set."""
    args = _compare_parser().parse_args(
        ["--config", "c.yaml", "--output", "o", "--eval_every", "5", "--set", "eval_every=7"]
    )
    assert args.eval_every == 5 and overrides_from(args) == {"eval_every": 7}


@pytest.mark.parametrize("command", COMMANDS)
def test_repeated_set_flags_accumulate(command, monkeypatch):
    """argparse keeps only the last --set of nargs='*'; every --set counts."""
    parser, required = COMMANDS[command](monkeypatch)
    args = parser.parse_args(required + ["--set", "steps=1", "--set", "learning_rate=0.2", "use_lora=false"])
    assert overrides_from(args) == {"steps": 1, "learning_rate": 0.2, "use_lora": False}


@pytest.mark.parametrize("within", [True, False])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_key_repeated_in_set_is_refused_naming_it(command, monkeypatch, within):
    parser, required = COMMANDS[command](monkeypatch)
    given = ["--set", "steps=1", "steps=3"] if within else ["--set", "steps=1", "--set", "steps=3"]
    with pytest.raises(ValueError, match="--set: duplicate key 'steps'"):
        overrides_from(parser.parse_args(required + given))
