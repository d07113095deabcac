"""The `gcpo` command: score, study, proofs, diff, train, eval, export, compare, align, plot-train, pilot.

Each subcommand imports its heavy parts only when it runs, so `gcpo --help` is instant.
"""

from __future__ import annotations

import argparse
import logging
import sys

# when the parser is built. The gcpo_train entries are the only gcpo_analysis -> gcpo_train edge
# (docs/architecture.md; tests/integration/test_import_graph.py holds this table to it).
SUBCOMMANDS = {
    "study": "gcpo_analysis.study.cli:add_parser",
    "score": "gcpo_analysis.measures.cli:add_parser",
    "proofs": "gcpo_analysis.theory.cli:add_parser",
    "diff": "gcpo_analysis.diff.cli:add_parser",
    "train": "gcpo_train.cli:add_train_parser",
    "eval": "gcpo_train.cli:add_eval_parser",
    "export": "gcpo_train.cli:add_export_parser",
    "compare": "gcpo_train.compare.cli:add_parser",
    "align": "gcpo_train.align.run:add_parser",
    "plot-train": "gcpo_train.plot_train:add_parser",
    "pilot": "gcpo_train.pilots.cli:add_parser",
}


def _load(target: str):
    import importlib

    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gcpo",
        description="Uncertainty-calibrated GRPO: measures, the gap study, proofs, training.",
    )
    parser.add_argument("--version", action="version", version=f"gcpo {_version()}")
    parser.add_argument(
        "--traceback", action="store_true", help="on an error, show the full Python traceback instead of one line"
    )
    _add_plugin_flag(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, target in SUBCOMMANDS.items():
        try:
            add = _load(target)
        except ImportError as err:  # the trainer's extras may be absent in an analysis-only install
            msg = f"gcpo {name} is unavailable ({err}); install with `pip install 'gcpo[train]'`"
            p = sub.add_parser(name, help=f"(unavailable: {err})")
            p.set_defaults(func=lambda args, msg=msg: sys.exit(msg))
        else:
            add(sub)
        _add_plugin_flag(sub.choices[name])
    return parser


def _add_plugin_flag(parser: argparse.ArgumentParser) -> None:
    """``--plugin MODULE`` on the main parser and every subcommand. ``main`` has loaded the
    modules before the parser was built (``plugins.plugin_flags``); the parser only accepts them."""
    parser.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE",
        default=argparse.SUPPRESS,
        help="import this module first, to register its measures, modulators or datasets (repeatable; "
        "also the GCPO_PLUGINS variable, comma-separated, and installed `gcpo.plugins` entry points)",
    )


def _version() -> str:
    """The package's own ``__version__``: the one source (pyproject reads it at build time)."""
    from . import __version__

    return __version__


class _StderrHandler(logging.StreamHandler):
    """A handler on the *current* ``sys.stderr`` (looked up at each message, so a redirected or
    captured stderr gets the messages, as ``logging.lastResort`` does)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class _ShortName(logging.Formatter):
    """``[study] message`` for a record of ``gcpo_analysis.study.run``: the subpackage, as the
    progress lines have always been tagged."""

    def format(self, record: logging.LogRecord) -> str:
        parts = record.name.split(".")
        return f"[{parts[1] if len(parts) > 1 else parts[0]}] {record.getMessage()}"


def configure_logging(level: int = logging.INFO) -> None:
    """Show the library's log messages (progress, files written) on stderr, for the command
    line. The library itself only logs (``logging.getLogger(__name__)``), so that a notebook user
    silences it with ``logging.getLogger("gcpo_analysis").setLevel(logging.WARNING)``. Idempotent;
    a level a user already set on a package logger is kept."""
    for name in ("gcpo_analysis", "gcpo_train"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
            handler = _StderrHandler()
            handler.setFormatter(_ShortName())
            logger.addHandler(handler)
        if logger.level == logging.NOTSET:
            logger.setLevel(level)


def _load_plugins(argv: list[str]) -> int:
    from .plugins import load_plugins, plugin_flags

    load_plugins(plugin_flags(argv))
    return 0


def main(argv=None) -> int:
    configure_logging()
    from .errors import did_you_mean, run_one_line

    argv = sys.argv[1:] if argv is None else list(argv)
    # the plug-ins first: the parser's help and choices read the registries they fill
    failed = run_one_line(lambda: _load_plugins(argv), "gcpo", "--traceback" in argv)
    if failed:
        return failed
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)

    if extra:  # an unknown flag: name it with close matches
        sub = getattr(args, "_parser", None) or parser
        sub.error(f"unknown option {extra[0]!r}{did_you_mean(extra[0].split('=')[0], sub._option_string_actions)}")

    return run_one_line(lambda: int(args.func(args) or 0), f"gcpo {args.command}", args.traceback)


if __name__ == "__main__":
    sys.exit(main())
