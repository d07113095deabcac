"""`gcpo score`: a rollouts frame in, the groups frame (measures and weights per query) out,
with a JSON sidecar naming the judge and embedder (README, "Score rollouts you already have")."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from ..knob import check_flags
from ..knobs import SHARED, check_reward_range
from ..outputs import check_output, json_object_with, staged_outputs
from ..provenance import environment
from ..vocab import full_completion

# the shared knobs that are `gcpo score` flags, with their types
SCORE_KNOBS = {
    "judge": str,
    "embedder": str | None,
    "nli_threshold": float,
    "alpha_base": float,
    "r_min": float,
    "r_max": float,
}


def add_parser(sub):
    from .registry import measure_help

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


def _run_score(args: argparse.Namespace) -> int:
    from ..frames import note_logprob_convention, write_frame, write_text
    from .registry import rollouts_columns, score_cli_measures
    from .score import parse_measures, score_groups

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
    meta = dict(
        groups.attrs.get("gcpo", {}), source=str(args.rollouts), **notes, environment=environment()
    )  # with the scores it concerns
    groups.attrs = {}
    with staged_outputs():  # the frame, its CSV and its sidecar replace the old ones together
        write_frame(groups, out)
        if args.csv:
            write_frame(groups, out.with_suffix(".csv"))
        write_text(out.with_suffix(".meta.json"), json.dumps(meta, indent=2, default=str))
    print(f"wrote {out} ({len(groups)} queries) and {out.with_suffix('.meta.json')}")
    return 0


def _refuse_foreign_sidecar(sidecar: Path) -> None:
    """-o names the groups frame; its sidecar beside it may replace an earlier `gcpo score`
    sidecar (a JSON object with "measures" and "source"), never another file of that name."""
    if sidecar.exists() and not json_object_with(sidecar, {"measures", "source"}):
        raise ValueError(
            f"-o: the sidecar {sidecar} exists and was not written by gcpo score; "
            "move it or choose another -o (it would be replaced)"
        )


def _defaults_for(rollouts: pd.DataFrame, measures: list[str], notes: dict, source: object) -> list[str]:
    """The default measures this frame can give: one that reads a column the frame lacks (token
    entropy from another tool's rollouts) is left out with a warning and in the sidecar's
    ``default_measures_left_out``; asking for it by --measures still gets the error naming the column."""
    import warnings

    from .registry import MEASURE_REGISTRY

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


def _refuse_unread(args: argparse.Namespace, measures: list[str]) -> None:
    """--judge, --nli-threshold and --embedder given to measures that do not read them are refused
    naming the measures and those that would read them (a silent no-op would let a user believe
    the judge changed RD)."""
    from ..vocab import CLUSTERS, EMBEDDINGS
    from .registry import MEASURE_REGISTRY

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
    from ..frames import ROLLOUT_REQUIRED, check_columns, map_rollout_columns, read_table, validate_rollouts
    from .score import MEASURES

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
