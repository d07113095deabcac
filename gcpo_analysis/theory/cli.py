"""`gcpo proofs`: the paper's propositions checked on random instances, printed as a table and
written as CSV or JSON on request (``gcpo_analysis.theory.proofs``)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from ..knob import Knob, check_flags
from ..knobs import SHARED
from ..outputs import check_output, json_object_with

PROOFS_KNOBS = {
    "instances": Knob(2000, "Random instances per claim.", ge=1),
    "seed": dataclasses.replace(SHARED["seed"], default=0, help="Seed of the random instances."),
}


def add_parser(sub):
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
    out = Path(path)
    if path.endswith(("/", os.sep)) or out.is_dir():
        raise ValueError(f"{flag} {path!r} names a folder; give a file path")
    check_output(out, (), flag)
    if out.exists():
        if out.suffix == ".json":
            ours = json_object_with(out, {"settings", "claims"})
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
    from ..frames import write_text
    from .proofs import check_all, format_table

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
