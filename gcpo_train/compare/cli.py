"""The ``gcpo compare`` command: its flags, and the run they start (gcpo_train.compare.run); and
its steps on a comparison folder: ``gcpo compare publish`` (compare.publish), ``gcpo compare
table`` (compare.table) and ``gcpo compare control`` (compare.control)."""

from __future__ import annotations

from gcpo_train.compare.run import Comparison
from gcpo_train.compare.settings import COMPARE_DEFAULTS, comma_items, load_compare_config, parse_seeds


def run_doc() -> str:
    """The command's description: the comparison's own docstring (folder layout, pairing, resume)."""
    from gcpo_train.compare import run

    return run.__doc__ or ""


def add_parser(subparsers):
    import argparse

    from gcpo_train.overrides import add_override_flags

    p = subparsers.add_parser(
        "compare",
        help="train arms (modulators) x seeds from one config and compare them with GRPO on held-out queries",
        description=run_doc(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "--config",
        default=None,  # required unless a step (publish, table, control) is named: run_cli says so
        help="training config YAML (gcpo train's fields), optionally with a compare: mapping whose "
        "modulators, seeds, eval_every, eval_n and split_seed are the defaults of these flags "
        "(configs/compare/*.yaml)",
    )
    p.add_argument(
        "--modulators",
        default=None,
        help="comma-separated arms; 'none' (plain GRPO) is the reference (default: the config's, else none,bot_rd)",
    )
    p.add_argument("--seeds", default=None, help="comma-separated training seeds (default: the config's, else 0,1,2)")
    p.add_argument(
        "--backend",
        default=None,
        choices=("gcpo", "trl"),
        help="training engine of every arm: gcpo's own loop or TRL's GRPOTrainer (default: the config's backend)",
    )
    p.add_argument("--output", default=None, help="comparison folder (created; rerun the command to resume)")
    p.add_argument(
        "--eval_every",
        "--eval-every",
        type=int,
        default=None,
        help="held-out evaluation every N steps (0 = only the base policy and the last step; default: the "
        "config's, else 0)",
    )
    p.add_argument(
        "--eval_n",
        "--eval-n",
        type=int,
        default=None,
        help="held-out queries (the first N of the split; default: the config's, else 200)",
    )
    p.add_argument(
        "--split_seed",
        "--split-seed",
        type=int,
        default=None,
        help="seed of the train/test split, the same for every seed (default: the compare: mapping's, else the "
        "config's split_seed, else 0)",
    )
    # the same overrides as gcpo train's (--<field> V and --set FIELD=V); the flags above keep their names
    add_override_flags(p, skip=("backend", "eval_every", "eval_n", "split_seed"))
    p.add_argument(
        "--report_only",
        "--report-only",
        action="store_true",
        help="train nothing: rewrite results, summary and figures from the runs finished so far "
        "(also while the comparison runs in another process)",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="train nothing: estimate τ and the query noise from the finished runs of --output (a pilot or a "
        "comparison), print the seeds needed for 80%% power at δ and the δ that --seeds' count detects, and write "
        "OUTPUT/plan.md (gcpo_train.compare.plan); an existing plan.md is kept unless --overwrite",
    )
    p.add_argument(
        "--plan_file",
        "--plan-file",
        default=None,  # None: not given, so run_cli can refuse it without --plan
        metavar="NAME",
        help="with --plan (refused without it): the file in OUTPUT it writes, e.g. closing_plan.md for a finished "
        "comparison's own τ and the δ its seeds detect, beside the plan fixed before it; never one of the files the "
        "comparison writes (summary.md, gate.md, ...) (default: plan.md)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="arm-seed runs trained at once, each in its own process with torch's threads // WORKERS threads "
        "(gcpo_train.compare.workers); at most the CPUs available; a folder keeps the thread count per run it "
        "started with (default: 1)",
    )
    p.add_argument("--no_progress", "--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(func=run_cli, _parser=p)
    add_steps(p)
    return p


def add_steps(p) -> None:
    """``gcpo compare publish|table|control|reading``: the steps on a comparison folder, besides training it."""
    from gcpo_train.compare import control, publish, stages, table

    steps = p.add_subparsers(dest="step", metavar="STEP", required=False)
    helps = {
        "publish": "copy a comparison's finished runs and its report into a folder meant for git (no checkpoints)",
        "table": "print a comparison's headline table (as the README quotes it) from its summary.csv",
        "control": "the no-passage control: the base and every finished arm-seed's final policy evaluated "
        "without passages",
        "reading": "a planned reading of one contrast at a margin fixed in score units, in one or two looks",
    }
    modules = {
        "publish": (publish, run_publish),
        "table": (table, run_table),
        "control": (control, run_control),
        "reading": (stages, run_reading),
    }
    pub, tab, ctl, rdg = (_step(steps, name, *modules[name], helps[name]) for name in modules)
    pub.add_argument("source", help="the gcpo compare folder (its --output)")
    pub.add_argument("dest", help="the folder to copy into (new, or an earlier copy of the same comparison)")
    tab.add_argument("folder", help="a comparison folder (its summary.csv)")
    tab.add_argument("--header", required=True, help="the first header cell, which names the table in the README")
    tab.add_argument("--score", default="held-out score", help="what the score column holds (e.g. held-out F1)")
    ctl.add_argument("folder", help="a gcpo compare folder")
    ctl.add_argument("data", help="the --no_passage folder of scripts/narrativeqa_spans.py (the same other options)")
    ctl.add_argument("--arms", default=None, help="comma-separated arms (default: every finished one)")
    ctl.add_argument("--no_progress", "--no-progress", action="store_true", help="no progress bar")
    rdg.add_argument("folder", help="a comparison folder (its results.parquet)")
    rdg.add_argument("--arm", required=True, help="the treated arm, e.g. bot_rd or bot_rd:alpha10")
    rdg.add_argument("--margin", required=True, type=float, help="δ in score units, fixed by the plan (e.g. 3.26)")
    rdg.add_argument("--reference", default="none", help="the reference arm (default: none)")
    rdg.add_argument(
        "--first_look", "--first-look", type=int, default=None, help="seeds in the first stage (two looks)"
    )
    rdg.add_argument("--planned", type=int, default=None, help="seeds planned in all (default: the seeds there)")
    rdg.add_argument(
        "--reference_folder",
        "--reference-folder",
        default=None,
        help="read the reference arm from this comparison folder instead (its card must differ in arms and seeds only)",
    )
    rdg.add_argument("--output", default=None, help="write the reading as Markdown here, and a strip plot beside it")


def _step(steps, name: str, module, run, help: str):
    """The parser of step ``name``: its help, the module's docstring as its description, ``run`` its function."""
    import argparse

    parser = steps.add_parser(
        name,
        help=help,
        description=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.set_defaults(func=run, _parser=parser)
    return parser


def _one_line(step):
    """The step's refusals (SystemExit with a message) as the ValueError the command line prints in one line."""
    try:
        return step()
    except SystemExit as stop:
        if isinstance(stop.code, str):
            raise ValueError(stop.code) from None
        raise


def run_publish(args) -> int:
    from pathlib import Path

    from gcpo_train.compare.publish import publish

    runs = _one_line(lambda: publish(Path(args.source), Path(args.dest)))
    print(f"{len(runs)} finished arm-seed run(s) copied to {args.dest}")
    return 0


def run_table(args) -> int:
    from pathlib import Path

    from gcpo_train.compare.table import table

    print(_one_line(lambda: table(Path(args.folder), args.header, args.score)))
    return 0


def run_control(args) -> int:
    from pathlib import Path

    from gcpo_train.compare.control import evaluate_blank

    arms = comma_items(args.arms, "--arms") if args.arms else None
    paths = _one_line(lambda: evaluate_blank(Path(args.folder), args.data, arms, progress=not args.no_progress))
    print(f"{len(paths)} no-passage evaluations in {Path(args.folder) / 'nopassage'}")
    return 0


def run_reading(args) -> int:
    from pathlib import Path

    import pandas as pd

    from gcpo_analysis.frames import write_text
    from gcpo_train.compare.stages import plot_deltas, reading, reading_markdown, with_reference_from

    other = None if args.reference_folder is None else Path(args.reference_folder)
    folders = [Path(args.folder)] + ([] if other is None else [other])
    for folder in folders:
        if not (folder / "results.parquet").is_file():
            raise FileNotFoundError(f"{folder} holds no results.parquet: run gcpo compare (or --report_only) first")
    if other is not None:
        check_same_card(folders[0], other)
    out = None if args.output is None else Path(args.output)
    if out is not None:  # before the reading: every file it would write, checked first
        if out.suffix != ".md" or any(out.resolve().is_relative_to(f.resolve()) for f in folders):  # any depth
            raise ValueError(f"--output {out}: a .md file outside the comparison folder(s), which compare writes")
        plots = [out.with_name(out.stem + "_deltas" + suffix) for suffix in (".png", ".svg")]
        for path in (out, *plots):
            if path.exists() or path.is_symlink():
                raise FileExistsError(f"--output {out}: {path} exists; a reading is not written over a file")
        above = next((p for p in out.parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise NotADirectoryError(f"--output {out}: {above} is a file, not a folder")
    results = pd.read_parquet(folders[0] / "results.parquet")
    if other is not None:
        results = with_reference_from(results, pd.read_parquet(other / "results.parquet"), args.reference)
    result = reading(results, args.arm, args.margin, args.reference, args.first_look, args.planned)
    if other is not None:
        result["reference_folder"] = str(other)
    text = reading_markdown(result)
    if out is not None:
        write_text(out, text)
        plot_deltas(result, out.with_name(out.stem + "_deltas"))
    print(text)
    return 0


def check_same_card(folder, reference_folder) -> None:
    """Two comparison folders whose arm-seeds may be paired: their compare.json equal in every field
    that defines a comparison (the config, steps, eval_n, the data's SHA-256, ...), arms and seeds
    aside; a ValueError names each field that differs."""
    from gcpo_train.compare.publish import identity_differences
    from gcpo_train.compare.record import read_record

    if folder.resolve() == reference_folder.resolve():
        raise ValueError(f"--reference_folder {reference_folder} is the comparison folder itself; leave it out")
    for f in (folder, reference_folder):
        if not (f / "compare.json").is_file():  # no card, nothing to say the runs may be paired
            raise FileNotFoundError(f"{f} holds no compare.json: the two comparisons cannot be checked for pairing")
    mine, theirs = (read_record(f / "compare.json") for f in (folder, reference_folder))
    diffs = identity_differences(mine, theirs, names=(str(reference_folder), str(folder)), either_older=True)
    if diffs:
        raise ValueError(
            f"--reference_folder {reference_folder} holds another comparison than {folder} "
            f"({'; '.join(diffs)}): its runs cannot be paired with this one's"
        )


def run_cli(args) -> int:
    from gcpo_train.compare.workers import check_workers
    from gcpo_train.overrides import overrides_from

    missing = [flag for flag in ("--config", "--output") if getattr(args, flag[2:]) is None]
    if missing:  # argparse's own words: the flags are required unless a step is named
        args._parser.error(f"the following arguments are required: {', '.join(missing)}")
    check_workers(args.workers)  # before anything is written or evaluated
    if args.plan_file is not None and not args.plan:  # ignored, it let the command train
        raise ValueError(
            f"--plan_file {args.plan_file!r} names the file --plan writes; add --plan (without it gcpo compare trains)"
        )
    overrides = overrides_from(args)
    if args.backend is not None:
        overrides["backend"] = args.backend
    given = [k for k in COMPARE_DEFAULTS if getattr(args, k, None) is not None]  # not every setting is a flag
    base, settings = load_compare_config(args.config, overrides, flags=given)
    seeds = settings["seeds"] if args.seeds is None else parse_seeds(args.seeds)
    if args.plan:
        from gcpo_train.compare.plan import write_plan

        n_seeds = None if args.seeds is None else len(seeds)
        if n_seeds is not None and n_seeds < 2:
            raise ValueError(f"--seeds {args.seeds!r}: --plan gives the δ that S >= 2 seeds detect (a paired t test)")
        overwrite = bool(overrides.get("overwrite"))
        text = write_plan(
            args.output,
            margin=settings["equivalence_margin"],
            seeds=n_seeds,
            overwrite=overwrite,
            name=args.plan_file or "plan.md",
        )
        print(text)
        return 0
    for key in ("eval_every", "eval_n", "split_seed"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    if settings["eval_n"] is not None and settings["eval_n"] < 1:
        raise ValueError(f"--eval_n must be >= 1, got {settings['eval_n']}")
    modulators = settings["modulators"] if args.modulators is None else comma_items(args.modulators, "--modulators")
    comparison = Comparison(
        base,
        args.output,
        [m.strip() for m in modulators if m.strip()],
        seeds,
        eval_every=settings["eval_every"],
        eval_n=settings["eval_n"],
        split_seed=settings["split_seed"],
        bf16_sampling=settings["bf16_sampling"],
        equivalence_margin=settings["equivalence_margin"],
    )
    if args.report_only:
        if not (comparison.out / "compare.json").exists():
            raise FileNotFoundError(f"{comparison.out} holds no comparison (no compare.json) to report on")
        summary = comparison.report()
    else:
        summary = comparison.run(progress=not args.no_progress, workers=args.workers)
    print(summary["markdown"])
    return 0
