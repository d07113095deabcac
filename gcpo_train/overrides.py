"""One override syntax for every command that builds a ``TrainConfig``: ``gcpo train``,
``gcpo compare`` and ``bench/train_step.py``.

Two spellings of the same thing, both on every such command:

* ``--<field> VALUE``: one flag per TrainConfig field, generated from the dataclass with its help
  (``--learning_rate 1e-4 --use_lora false``; ``--group-size`` also works; a boolean flag
  alone means true: ``--resume``);
* ``--set FIELD=VALUE ...``: several at once (``--set learning_rate=1e-4 use_lora=false``); a
  repeated ``--set`` adds to the earlier ones, and a field given twice is refused.

Values are parsed as YAML scalars (true/false, null, numbers, ``[q_proj, v_proj]``). They win
over the ``--config`` file, which wins over the defaults. An unknown field is refused with close
matches (``config.load_config``), and a field given both ways is refused. A command whose own
flag has a field's name (``gcpo compare --eval_every``: the comparison's schedule) keeps its
flag; the field is then reached through ``--set``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable
from typing import Any

from gcpo_analysis.knob import cli_help
from gcpo_analysis.vocab import field_kinds
from gcpo_train.config import TrainConfig, check_given, parse_overrides, safe_yaml

FIELD_PREFIX = "cfg_"  # the dest of a --<field> flag
SET_DEST = "set_overrides"


def _yaml_value(text: str):
    """A flag's value as a YAML scalar or list; a value YAML cannot read is argparse's error,
    naming the flag with the reason (argparse alone would print the whole value)."""
    try:
        return safe_yaml(text, "its value")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_override_flags(parser: argparse.ArgumentParser, skip: Iterable[str] = ()) -> None:
    """Add ``--set FIELD=VALUE ...`` and one ``--<field> VALUE`` per TrainConfig field, except the
    fields in ``skip`` (the command's own flags of the same name)."""
    parser.add_argument(
        "--set",
        nargs="*",
        action="extend",  # --set a=1 --set b=2 is --set a=1 b=2 (argparse would keep only the last)
        default=[],
        dest=SET_DEST,
        metavar="FIELD=VALUE",
        help="TrainConfig fields, several at once (values as YAML scalars); the same as --<field> VALUE",
    )
    skip = set(skip)
    kinds = field_kinds(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        if f.name in skip:
            continue
        kwargs: dict[str, Any] = dict(
            dest=f"{FIELD_PREFIX}{f.name}",
            default=argparse.SUPPRESS,
            type=_yaml_value,
            help=f"{cli_help(f)} (default: {f.default!r})",
            metavar="V",
        )
        if kinds[f.name] is bool:
            kwargs.update(nargs="?", const=True)
        spellings = dict.fromkeys([f"--{f.name}", f"--{f.name.replace('_', '-')}"])  # --group_size or --group-size
        parser.add_argument(*spellings, **kwargs)


def overrides_from(args: argparse.Namespace) -> dict:
    """The fields given on the command line, by ``--set`` and by ``--<field>`` flags, each value
    checked against its field naming how it was given (``--set steps=nan``, ``--steps``);
    ``load_config`` refuses unknown fields. A field given both ways is refused."""
    flags = {k[len(FIELD_PREFIX) :]: v for k, v in vars(args).items() if k.startswith(FIELD_PREFIX)}
    raw = getattr(args, SET_DEST, None) or []
    pairs = parse_overrides(raw)
    both = sorted(set(flags) & set(pairs))
    if both:
        raise ValueError(f"{', '.join(both)} given both as --<field> and in --set: give each once")
    source = {**{p.split("=", 1)[0].strip(): f"--set {p}" for p in raw}, **{k: f"--{k}" for k in flags}}
    check_given({**pairs, **flags}, source)
    return {**pairs, **flags}
