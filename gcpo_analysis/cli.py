"""The `gcpo` command: score, study, proofs, train, eval, export.

Each subcommand imports its heavy parts only when it runs, so `gcpo --help` is instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path

from .knob import Knob, check_flags
from .knobs import SHARED, check_reward_range
from .vocab import full_completion

# the shared knobs that are `gcpo score` flags, with their types
SCORE_KNOBS = {
    "judge": str,
    "embedder": str | None,
    "nli_threshold": float,
    "alpha_base": float,
    "r_min": float,
    "r_max": float,
}


def _add_score(sub):
    from .measures.registry import measure_help

    p = sub.add_parser(
        "score",
        help="score rollout groups: rollouts frame (Parquet/JSONL) -> groups frame",
        description="Read a rollouts frame, compute the requested measures and weights per query, "
        "write the groups frame (Parquet; CSV on request) and a JSON sidecar with the judge and "
        "embedder used.",
    )
    p.add_argument("rollouts", help="rollouts frame: .parquet, .jsonl or .csv")
    p.add_argument("-o", "--output", required=True, help="groups frame to write (.parquet)")
    p.add_argument(
        "--measures",
        default=None,
        help=measure_help() + "; default: the registry's defaults that need no logprob column "
        "(measures.registry.score_cli_measures, a plug-in's default measure included), less any whose "
        "column the frame lacks (said in a warning and in the sidecar)",
    )
    for name, annotation in SCORE_KNOBS.items():  # declared once, in gcpo_analysis.knobs
        spec = SHARED[name]
        flags = dict.fromkeys([f"--{name.replace('_', '-')}", f"--{name}"])
        kind = float if annotation is float else str
        # default None: a flag given is told from the default (_refuse_unread); check_flags fills it
        p.add_argument(*flags, dest=name, type=kind, default=None, help=spec.help_text())
    p.add_argument(
        "--full-completion",
        "--full_completion",
        action=argparse.BooleanOptionalAction,
        default=SHARED["use_full_completion"].default,
        help=SHARED["use_full_completion"].help_text(),
    )
    p.add_argument("--csv", action="store_true", help="also write a CSV next to the Parquet file")
    for name, what in (
        ("query", "the query id (e.g. 'prompt' in a TRL frame)"),
        ("rollout", "the rollout id (default: derived, the order within the query)"),
        ("completion", "the completion text"),
        ("answer", "the extracted answer (needed only by measures that read it)"),
        ("reward", "the reward"),
    ):
        p.add_argument(
            f"--{name}-col",
            f"--{name}_col",
            dest=f"{name}_col",
            default=None,
            metavar="COLUMN",
            help=f"the input column holding {what}",
        )
    p.set_defaults(func=_run_score, _parser=p)


def _run_score(args) -> int:
    from .frames import note_logprob_convention, write_frame, write_text
    from .measures.registry import rollouts_columns, score_cli_measures
    from .measures.score import parse_measures, score_groups

    # fail on a typo before any model loads; the default read now, after the plug-ins registered
    measures = parse_measures(args.measures if args.measures is not None else score_cli_measures())
    _refuse_unread(args, measures)
    for name in SCORE_KNOBS:
        if getattr(args, name) is None:
            setattr(args, name, SHARED[name].default)
    check_flags(args, SCORE_KNOBS, SHARED)
    check_reward_range(args.r_min, args.r_max, ("--r-min", "--r-max"))
    out = Path(args.output)
    if out.suffix.lower() not in (".parquet", ".jsonl", ".csv"):
        out = out.with_suffix(".parquet")
    source = Path(args.rollouts).resolve()
    from .outputs import check_output, staged_outputs

    written = [out, *([out.with_suffix(".csv")] if args.csv else []), out.with_suffix(".meta.json")]
    for target in written:  # the CSV beside -o only when --csv writes it (r.csv -o r.parquet is fine)
        if target.resolve() == source:
            raise ValueError(
                f"output {target} is the input rollouts file; choose another -o "
                f"(the groups frame would replace the rollouts)"
            )
        check_output(target, [source], "-o")  # not inside a checkpoint or a run's pruned folders
    _refuse_foreign_sidecar(out.with_suffix(".meta.json"))
    rollouts, full = _read_rollouts(args, measures)
    notes: dict = {}
    if args.measures is None:  # a default measure whose column this frame lacks is left out, said and recorded
        measures = _defaults_for(rollouts, measures, notes, args.rollouts)
    # token_entropy and logprob must be pi_theta's at temperature 1 in every row (docs/conventions.md)
    note_logprob_convention(rollouts, rollouts_columns(measures), notes, args.rollouts)
    groups = score_groups(
        rollouts,
        measures,
        embedder=args.embedder,
        judge=args.judge,
        nli_threshold=args.nli_threshold,
        use_full_completion=full,
        alpha_base=args.alpha_base,
        r_min=args.r_min,
        r_max=args.r_max,
        progress=True,
    )
    meta = dict(groups.attrs.get("gcpo", {}), source=str(args.rollouts), **notes)  # with the scores it concerns
    groups.attrs = {}
    with staged_outputs():  # the frame, its CSV and its sidecar replace the old ones together
        write_frame(groups, out)
        if args.csv:
            write_frame(groups, out.with_suffix(".csv"))
        write_text(out.with_suffix(".meta.json"), json.dumps(meta, indent=2, default=str))
    print(f"wrote {out} ({len(groups)} queries) and {out.with_suffix('.meta.json')}")
    return 0


def _json_object_with(path: Path, keys: set[str]) -> bool:
    """Whether ``path`` holds a JSON object with ``keys``: a file an earlier run of the command
    wrote, which it may replace (anything else is the user's)."""
    try:
        blob = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(blob, dict) and keys <= blob.keys()


def _refuse_foreign_sidecar(sidecar: Path) -> None:
    """-o names the groups frame; its sidecar beside it may replace an earlier `gcpo score`
    sidecar (a JSON object with "measures" and "source"), never another file of that name."""
    if sidecar.exists() and not _json_object_with(sidecar, {"measures", "source"}):
        raise ValueError(
            f"-o: the sidecar {sidecar} exists and was not written by gcpo score; "
            "move it or choose another -o (it would be replaced)"
        )


def _defaults_for(rollouts, measures: list[str], notes: dict, source) -> list[str]:
    """The default measures this frame can give: one that reads a column the frame lacks (token
    entropy from another tool's rollouts) is left out with a warning and in the sidecar's
    ``default_measures_left_out``; asking for it by --measures still gets the error naming the column."""
    import warnings

    from .measures.registry import MEASURE_REGISTRY

    lacking = {m: [c for c in MEASURE_REGISTRY[m].columns if c not in rollouts.columns] for m in measures}
    lacking = {m: cols for m, cols in lacking.items() if cols}
    if not lacking:
        return measures
    kept = [m for m in measures if m not in lacking]
    said = "; ".join(f"{m} (no {', '.join(map(repr, cols))} column)" for m, cols in lacking.items())
    if not kept:
        raise ValueError(f"{source}: no default measure can be scored: {said}; choose some with --measures")
    warnings.warn(f"{source}: default measures left out: {said}; scoring {', '.join(kept)}", stacklevel=2)
    notes["default_measures_left_out"] = {m: cols for m, cols in lacking.items()}
    return kept


def _refuse_unread(args, measures: list[str]) -> None:
    """--judge, --nli-threshold and --embedder given to measures that do not read them are refused
    naming the measures and those that would read them (a silent no-op would let a user believe
    the judge changed RD)."""
    from .measures.registry import MEASURE_REGISTRY
    from .vocab import CLUSTERS, EMBEDDINGS

    def readers(need: str) -> str:
        return ", ".join(name for name, m in MEASURE_REGISTRY.items() if need in m.needs)

    needs = set().union(*(MEASURE_REGISTRY[m].needs for m in measures))
    judge = args.judge if args.judge is not None else SHARED["judge"].default
    unread = []  # (flag, the measures that read it)
    if CLUSTERS not in needs:
        for flag, name in (("--judge", "judge"), ("--nli-threshold", "nli_threshold")):
            if getattr(args, name) is not None:
                unread.append((flag, readers(CLUSTERS)))
    embeds = EMBEDDINGS in needs or (CLUSTERS in needs and str(judge).strip().lower() == "embedding")
    if not embeds and args.embedder is not None:
        unread.append(("--embedder", readers(EMBEDDINGS) + "; or clustering ones with --judge embedding"))
    if unread:
        flags = ", ".join(flag for flag, _ in unread)
        fixes = "; ".join(f"{flag} is read by {by}" for flag, by in dict(unread).items())
        raise ValueError(
            f"--measures {','.join(measures)} do not read {flags}: drop "
            f"{'them' if len(unread) > 1 else 'it'}, or add a measure that does ({fixes})"
        )


def _read_rollouts(args, measures):
    """(the input as a rollouts frame, use_full_completion resolved): mapped columns renamed,
    rollout_id derived when absent, and an ``answer`` column required only when a measure reads
    the answers (auto reads the frame's ``dataset`` column, vocab.full_completion)."""
    from .frames import ROLLOUT_REQUIRED, check_columns, map_rollout_columns, read_table, validate_rollouts
    from .measures.score import MEASURES

    mapping = {
        "query_id": args.query_col,
        "rollout_id": args.rollout_col,
        "completion": args.completion_col,
        "answer": args.answer_col,
        "reward": args.reward_col,
    }
    text_cols = [args.query_col, args.rollout_col, args.completion_col, args.answer_col]
    raw = read_table(args.rollouts, text_columns=[c for c in text_cols if c])
    df = map_rollout_columns(raw, mapping, source=str(args.rollouts))
    # the columns a user must give; the error lists the file's own columns, not a derived
    # rollout_id or answer
    given = [c for c in ROLLOUT_REQUIRED if c not in ("rollout_id", "answer")]
    check_columns(df, given, "rollouts", str(args.rollouts), has=raw.columns)
    full = full_completion(args.full_completion, df.get("dataset"))
    reads_answers = not full and any(MEASURES[m] for m in measures)
    if "answer" not in df.columns:
        if reads_answers:
            raise ValueError(
                f"{args.rollouts}: measures {[m for m in measures if MEASURES[m]]} read the answers, "
                f"and there is no 'answer' column: name one with --answer-col, or score the full "
                f"completions with --full-completion"
            )
        df = df.assign(answer=df["completion"] if "completion" in df.columns else "")
    return validate_rollouts(df, source=str(args.rollouts)), full


PROOFS_KNOBS = {
    "instances": Knob(2000, "Random instances per claim.", ge=1),
    "seed": dataclasses.replace(SHARED["seed"], default=0, help="Seed of the random instances."),
}


def _add_proofs(sub):
    p = sub.add_parser("proofs", help="check the paper's propositions numerically and print the table")
    p.add_argument(
        "--instances", type=int, default=PROOFS_KNOBS["instances"].default, help=PROOFS_KNOBS["instances"].help_text()
    )
    p.add_argument("--seed", type=int, default=PROOFS_KNOBS["seed"].default, help=PROOFS_KNOBS["seed"].help_text())
    p.add_argument("-o", "--output", default=None, help="also write the table as CSV")
    p.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help="also write the table as JSON (settings and one record per claim; the README quotes it)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when any claim fails (the paper's literal BoT constant does: see its note)",
    )
    p.set_defaults(func=_run_proofs, _parser=p)


def _check_proofs_output(path: str, flag: str) -> None:
    """Before the checks run: ``path`` names a file (not a folder, no trailing slash) where
    writing destroys nothing (``check_output``), and an existing file there is a table this
    command wrote (its JSON has "settings" and "claims"; its CSV starts with the claim header),
    which it may replace; any other file is the user's, refused."""
    from .outputs import check_output

    out = Path(path)
    if path.endswith(("/", os.sep)) or out.is_dir():
        raise ValueError(f"{flag} {path!r} names a folder; give a file path")
    check_output(out, (), flag)
    if out.exists():
        if out.suffix == ".json":
            ours = _json_object_with(out, {"settings", "claims"})
        else:
            with open(out, "rb") as fh:
                ours = fh.read(len(PROOFS_CSV_HEADER)).decode("utf-8", errors="replace") == PROOFS_CSV_HEADER
        if not ours:
            raise ValueError(
                f"{flag} {path}: the file exists and is not a table gcpo proofs wrote; choose another path "
                "(it replaces only its own earlier output)"
            )


PROOFS_CSV_HEADER = "claim,where,instances,worst_violation,holds,note"


def _run_proofs(args) -> int:
    from .frames import write_text
    from .theory.proofs import check_all, format_table

    check_flags(args, {"instances": int, "seed": int}, PROOFS_KNOBS)
    for path, flag in ((args.output, "-o"), (args.json, "--json")):
        if path:
            _check_proofs_output(path, flag)
    table = check_all(n_instances=args.instances, seed=args.seed)
    print(format_table(table))
    if args.output:
        write_text(args.output, table.to_csv(index=False))
    if args.json:
        blob = {
            "settings": {"instances": args.instances, "seed": args.seed},
            "claims": json.loads(table.to_json(orient="records")),
        }
        write_text(args.json, json.dumps(blob, indent=2) + "\n")
    return 1 if args.strict and not bool(table["holds"].all()) else 0


# The one table of subcommands: name -> "module:function" that adds its parser, imported only
# when the parser is built. The gcpo_train entries are the only gcpo_analysis -> gcpo_train edge
# (docs/architecture.md; tests/integration/test_import_graph.py holds this table to it).
SUBCOMMANDS = {
    "study": "gcpo_analysis.study.cli:add_parser",
    "score": "gcpo_analysis.cli:_add_score",
    "proofs": "gcpo_analysis.cli:_add_proofs",
    "train": "gcpo_train.cli:add_train_parser",
    "eval": "gcpo_train.cli:add_eval_parser",
    "export": "gcpo_train.cli:add_export_parser",
    "compare": "gcpo_train.compare.cli:add_parser",
    "align": "gcpo_train.align.run:add_parser",
    "plot-train": "gcpo_train.plot_train:add_parser",
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
