"""The ``gcpo pilot`` command: ``gcpo pilot NAME ARGS``, the pilot's own arguments after its name
(``gcpo pilot span-gate --help``)."""

from __future__ import annotations

import importlib

# the pilots, by command name: the module whose ``command(argv)`` runs it
PILOTS = {
    "boolq-as-qa": "gcpo_train.pilots.boolq_as_qa",
    "choice-as-qa": "gcpo_train.pilots.choice_as_qa",
    "choice-gate": "gcpo_train.pilots.choice_gate",
    "span-gate": "gcpo_train.pilots.span_gate",
}


def add_parser(subparsers):
    import argparse

    from gcpo_train import pilots

    p = subparsers.add_parser(
        "pilot",
        help="the pilots behind committed results: data written as QA, the learning gates",
        description=pilots.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("name", choices=sorted(PILOTS), help="the pilot")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments (gcpo pilot NAME --help)")
    p.set_defaults(func=run_pilot, _parser=p)
    return p


def run_pilot(args) -> int:
    """The pilot's ``command`` on its arguments; a refusal (SystemExit with a message) becomes the
    one-line error of the command line, a usage error or --help keeps argparse's exit."""
    command = importlib.import_module(PILOTS[args.name]).command
    try:
        return int(command(list(args.args)) or 0)
    except SystemExit as stop:
        if isinstance(stop.code, str):
            raise ValueError(stop.code) from None
        raise
