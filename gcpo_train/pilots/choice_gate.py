"""The learning gate on a multiple-choice benchmark written as QA (``gcpo pilot choice-as-qa``;
the training pilots' log). For each ``gcpo eval`` predictions file: token-F1 and accuracy (F1 > 0.5,
the qa_f1 task's), which option the answers copy (exactly, after SQuAD normalisation), the F1
of "always the k-th option" for each k (a policy that learned the format but reads nothing),
and three differences with 95% bootstrap CIs over queries: against the base policy (the gate as
the issue writes it) and against the best constant option (the bar a policy that reads must
clear), paired (``heldout.paired_gain``); and against a policy that copies each option as often
as this one does but at random (``choice_dependence``: whether which option it copies depends
on the query at all, whatever its position preferences).

    gcpo pilot choice-gate runs/siqa/test.jsonl base.predictions.parquet trained.predictions.parquet
    gcpo pilot choice-gate runs/siqa/test.jsonl --compare figures/train_compare/siqa
    gcpo pilot choice-gate runs/siqa/test.jsonl --curve RUN/log.jsonl base.predictions.parquet \
        s1_40.predictions.parquet s1_80.predictions.parquet ... [--figure STEM] [--versus OTHER_40... ...]

``--table BASE PRED...`` prints one markdown row per predictions file (against BASE).
``--compare`` prints one markdown row per arm and seed of a ``gcpo compare`` folder (the last
evaluated step of each finished run, a done.json, shown, against the folder's base policy; a run
still training is left out, named in a warning). ``--curve`` prints one row per
evaluated step of one run (the step is the number before ``.predictions.parquet`` in each
file's name) with the run's training reward and KL from its log (and ω's range from the
rollouts beside it), ``--versus`` adds Δ against another run's predictions at the same
steps, and ``--figure STEM`` draws held-out F1 against step beside the base policy and the best
option position. ``--output FILE`` (any mode) also writes the table to FILE, never over an input;
the table and the figure are written as one set (``gcpo_analysis.outputs.staged_outputs``).
Every option is judged, however many a question has (SIQA 3, OpenBookQA 4, CommonsenseQA 5);
a null or ill-typed answer, score or reference is refused naming its file and row.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.data import load_queries
from gcpo_analysis.rewards import token_f1
from gcpo_train.compare.evaluations import eval_step
from gcpo_train.evaluation.choices import choice_dependence, chosen, ci_text, options_of
from gcpo_train.evaluation.heldout import paired_gain, read_predictions


@functools.cache
def _questions(data: str) -> pd.Series:
    """The questions of the data file by query id, read once however many files are scored."""
    return load_queries("narrativeqa", path=data, split="test").set_index("query_id")["question"]


def _predictions(path, questions: pd.Series | None = None) -> pd.DataFrame:
    """A predictions file with every cell checked (``heldout.read_predictions``: a null or
    ill-typed answer, score or reference, a query scored twice or an empty file is refused naming
    the file and row) and, given the data's ``questions``, every query in them."""
    try:
        preds = read_predictions(path)
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(str(err)) from None
    if questions is not None:
        missing = sorted(set(preds["query_id"]) - set(questions.index))[:3]
        if missing:
            raise SystemExit(
                f"{path}: queries {missing} are not in the data's test split; give the data it was evaluated on"
            )
    return preds


def gate(data: str, path: str, base: pd.DataFrame | None) -> dict:
    questions = _questions(data)
    preds = _predictions(path, questions)
    options = preds["query_id"].map(lambda q: options_of(questions[q]))
    refs = preds["references"].map(list)
    width = int(options.map(len).max())
    constants = {
        k: preds[["query_id"]].assign(
            score=[100 * token_f1(o[k], r) if k < len(o) else 0.0 for o, r in zip(options, refs, strict=True)]
        )
        for k in range(width)
    }
    best = max(constants, key=lambda k: constants[k]["score"].mean())
    picked = [chosen(a, o) for a, o in zip(preds["answer"], options, strict=True)]
    picks = pd.Series(picked).value_counts(normalize=True)
    row = {
        "file": path,
        "n": len(preds),
        "F1": float(preds["score"].mean()),
        "Acc": 100 * float((preds["score"] > 50).mean()),
        "options": width,
        "copies option": " ".join(f"{k}:{v:.0%}" for k, v in sorted(picks.items(), key=_position)),
        **{f"F1 always #{k}": float(c["score"].mean()) for k, c in constants.items()},
    }
    on_k = np.array([[p == str(k) for k in range(width)] for p in picked], dtype=float)
    option_f1 = np.column_stack([c["score"].to_numpy(float) for c in constants.values()])
    row.update(choice_dependence(option_f1, on_k))
    vs_best = paired_gain(constants[best], preds)
    row.update({"Δ vs best constant": vs_best["diff"], "CI": ci_text(vs_best["ci_low"], vs_best["ci_high"])})
    if base is not None:
        vs_base = paired_gain(base, preds)
        row.update({"Δ vs base": vs_base["diff"], "CI base": ci_text(vs_base["ci_low"], vs_base["ci_high"])})
    return row


def _signed(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def _position(item) -> tuple:
    """Sort key of a (pick, share) pair: options by number (10 after 9), 'other' last."""
    pick = item[0]
    return (pick == "other", int(pick) if pick != "other" else 0)


def _copies_header(rows) -> str:
    """The answer-positions column's name for the widest question of ``rows`` (every option)."""
    width = max(int(r["options"]) for r in rows)
    return "copies option " + " / ".join(str(k + 1) for k in range(width)) + " / none"


def _cells(row: dict, width: int | None = None) -> str:
    """F1, accuracy, the two differences and the answer positions of a ``gate`` row, as table
    cells: the share of answers copying each of the ``width`` options (the row's own by default;
    CommonsenseQA has 5, OpenBookQA 4, SIQA 3), then none."""
    shares = dict(part.split(":") for part in row["copies option"].split())
    width = int(row["options"]) if width is None else width
    copies = " / ".join(shares.get(k, "0%") for k in [*map(str, range(width)), "other"])
    vs_base = f"{_signed(row['Δ vs base'])} {row['CI base'].replace('-', '−')}" if "Δ vs base" in row else ""
    vs_best = f"{_signed(row['Δ vs best constant'])} {row['CI'].replace('-', '−')}"
    vs_own = f"{_signed(row['Δ vs own positions'])} {row['CI own'].replace('-', '−')}"
    return f"{row['F1']:.1f} | {row['Acc']:.1f} | {vs_base} | {vs_best} | {vs_own} | {copies}"


def compare_runs(folder: str) -> list[tuple[str, str, int, Path]]:
    """(arm folder, seed, step, predictions file) of the last evaluation of each finished run
    (done.json) of a ``gcpo compare`` folder; a run still training is left out and named in a
    warning (``evaluations.finished_only``), its evaluations so far not being its result. An
    entry of ``runs/<arm>/`` that is not a seed folder, or a stray evaluation file, is refused."""
    from gcpo_train.compare.evaluations import finished_only
    from gcpo_train.compare.layout import SEED_FOLDER

    last: dict[Path, tuple[int, Path] | None] = {}
    runs = list(Path(folder).glob("runs/*/seed_*"))
    for run in runs:  # seed_old, seed_9.txt, seed_00: not a run (seed_00 would count seed 0 twice)
        if not (run.is_dir() and SEED_FOLDER.fullmatch(run.name)):
            raise SystemExit(
                f"{run}: not a run of the comparison (runs/<arm>/ holds folders seed_<digits>, no leading zero)"
            )
    for run in sorted(runs, key=lambda r: (r.parent.name, int(r.name[5:]))):  # seed 2 before seed 10
        try:  # by step, and a stray name refused: step_000060_old... sorted after step_000060 and won
            evals = sorted(run.glob("eval/step_*.predictions.parquet"), key=eval_step)
        except ValueError as err:
            raise SystemExit(str(err)) from None
        last[run] = (eval_step(evals[-1]), evals[-1]) if evals else None
    finished = finished_only(Path(folder), {run: e[0] if e else None for run, e in last.items()})
    return [(run.parent.name, run.name.split("_")[1], *e) for run in finished if (e := last[run])]


def compare_table(data: str, folder: str, runs: list | None = None) -> str:
    """The gate of every finished arm-seed of a ``gcpo compare`` folder (``compare_runs``, or
    ``runs`` as it returns them: its last evaluated step, shown, against the folder's base policy:
    ``base/all_seeds``, or the seed's own ``base/seed_N`` where the comparison evaluated the base
    once per seed, as it does for tiny test models), as a markdown table."""
    root = Path(folder)
    shared = root / "base" / "all_seeds.predictions.parquet"

    def base_of(seed: str) -> Path:
        path = shared if shared.exists() else root / "base" / f"seed_{seed}.predictions.parquet"
        if not path.exists():
            raise SystemExit(f"{folder}: no base-policy predictions ({shared.name} or {path.name} under base/)")
        return path

    runs = compare_runs(folder) if runs is None else runs
    if not runs:
        raise SystemExit(f"{folder}: no finished, evaluated run under runs/*/seed_* (a done.json and eval/step_*)")
    named, bases = [], set()  # (first cells, gate row): the header needs every row's options
    for arm, seed, step, path in runs:
        base_path = base_of(seed)
        bases.add((seed, base_path))
        named.append((f"| {arm} | {seed} | {step} |", gate(data, str(path), _predictions(base_path))))
    for seed, path in sorted(bases) if not shared.exists() else [("", shared)]:
        seed_cell = f" {seed} " if seed else " "  # the shared base's row keeps the committed table's spacing
        named.append((f"| base policy |{seed_cell}| 0 |", gate(data, str(path), None)))
    width = max(int(r["options"]) for _, r in named)
    lines = [
        "| arm | seed | step | F1 | accuracy | Δ vs base [95% CI] | Δ vs best option position [95% CI] "
        f"| Δ vs its own positions at random [95% CI] | {_copies_header([r for _, r in named])} |",
        "|---|---|---:|---|---|---|---|---|---|",
    ]
    lines += [f"{first} {_cells(row, width)} |" for first, row in named]
    return "\n".join(lines)


def _step_of(path: str) -> int:
    found = re.search(r"(\d+)\.predictions\.parquet$", str(path))
    if found is None:
        raise SystemExit(f"{path}: no step in the name (want ..._<step>.predictions.parquet)")
    return int(found.group(1))


def _omega_range(rollouts: Path, steps: range) -> str:
    """ω's 5th–95th percentile over the groups of ``steps`` (``compare_report.omega_per_group``:
    1.000–1.000 for GRPO), from the run's rollouts folder."""
    from gcpo_train.compare.report import omega_per_group

    files = [rollouts / f"step_{k:06d}.parquet" for k in steps]
    if not all(f.exists() for f in files):
        raise SystemExit(f"{rollouts}: the rollouts of steps {steps.start}-{steps.stop - 1} are not all there")
    columns = ["step", "query_id", "reward", "advantage"]
    w = np.concatenate([omega_per_group(pd.read_parquet(f, columns=columns)) for f in files])
    return "—" if not w.size else f"{np.quantile(w, 0.05):.2f}–{np.quantile(w, 0.95):.2f}"


def curve_rows(data: str, log: str, base_path: str, paths: list[str], versus: Sequence[str] = ()) -> list[dict]:
    """The gate of one run at each evaluated step (sorted by step), with the run's training
    reward averaged over the steps since the previous evaluated one, the KL of the step, ω's
    range over those steps (when the log's folder has its rollouts), and, for the steps that
    ``versus`` (another run's predictions files) also evaluated, Δ against that run, paired by
    query."""
    from gcpo_train.runfiles.runlog import read_log

    by_step = {r["step"]: r for r in read_log(log)}
    rollouts = Path(log).parent / "rollouts"
    other = {_step_of(p): p for p in versus}
    base = _predictions(base_path)
    rows, previous = [], 0
    for step, path in sorted((_step_of(p), p) for p in paths):
        missing = [k for k in range(previous + 1, step + 1) if k not in by_step]
        if missing:
            raise SystemExit(f"{log}: step(s) {', '.join(map(str, missing[:5]))} not logged (needed for {path})")
        window = [by_step[k]["reward_mean"] for k in range(previous + 1, step + 1)]
        row = {"step": step, "reward": sum(window) / len(window), "kl": by_step[step]["kl"]}
        if rollouts.is_dir():
            row["omega"] = _omega_range(rollouts, range(previous + 1, step + 1))
        row.update(gate(data, path, base))
        if step in other:
            d = paired_gain(_predictions(other[step]), _predictions(path))
            row["versus"] = f"{_signed(d['diff'])} {ci_text(d['ci_low'], d['ci_high'])}".replace("-", "−")
        rows.append(row)
        previous = step
    return rows


def curve_table(data: str, log: str, base_path: str, paths: list[str], versus: Sequence[str] = ()) -> str:
    """``curve_rows`` as a markdown table, the base policy first (step 0); the ω and "Δ vs the
    other run" columns appear when there is something to put in them."""
    rows = curve_rows(data, log, base_path, paths, versus)
    base_row = gate(data, base_path, None)
    width = max(int(r["options"]) for r in [base_row, *rows])
    extra = [c for c in ("omega", "versus") if any(c in r for r in rows)]
    names = {"omega": "ω p5–p95 since the previous row", "versus": "Δ vs the other run [95% CI]"}
    lines = [
        "| step | training reward since the previous row (0–2) | KL | F1 | accuracy | Δ vs base [95% CI] "
        "| Δ vs best option position [95% CI] | Δ vs its own positions at random [95% CI] "
        f"| {_copies_header([base_row, *rows])} |" + "".join(f" {names[c]} |" for c in extra),
        "|---:|---:|---:|---|---|---|---|---|---|" + "---|" * len(extra),
        f"| 0 (base) | | | {_cells(base_row, width)} |" + " |" * len(extra),
    ]
    for row in rows:
        cells = "".join(f" {row.get(c, '')} |" for c in extra)
        lines.append(f"| {row['step']} | {row['reward']:.2f} | {row['kl']:.2f} | {_cells(row, width)} |{cells}")
    return "\n".join(lines)


def files_table(data: str, base_path: str, paths: list[str]) -> str:
    """The gate of each predictions file against the base policy's (``base_path``), one markdown
    row each, named by the file."""
    base = _predictions(base_path)
    named = [(f"{Path(base_path).name} (base)", gate(data, base_path, None))]
    named += [(Path(p).name, gate(data, p, base)) for p in paths]
    width = max(int(r["options"]) for _, r in named)
    lines = [
        "| predictions | F1 | accuracy | Δ vs base [95% CI] | Δ vs best option position [95% CI] "
        f"| Δ vs its own positions at random [95% CI] | {_copies_header([r for _, r in named])} |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {name} | {_cells(row, width)} |" for name, row in named]
    return "\n".join(lines)


def _run_name(path: str) -> str:
    return re.sub(r"_?\d+\.predictions\.parquet$", "", Path(path).name)


def curve_figure(data: str, base_path: str, runs: list[list[str]], stem: str) -> list:
    """Held-out F1 against step for each run (a list of its predictions files, named by the
    files' common prefix), each step with its 95% CI (the paired CI of its Δ vs the base policy,
    shifted to the F1 scale), beside the base policy's F1 and the best option position's."""
    from gcpo_analysis.plots import plt, save_figure

    base_frame = _predictions(base_path)
    base = gate(data, base_path, None)
    best = max(v for k, v in base.items() if k.startswith("F1 always #"))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for k, paths in enumerate(runs):
        rows = sorted((_step_of(p), gate(data, p, base_frame)) for p in paths)
        steps, f1 = [0] + [s for s, _ in rows], [base["F1"]] + [r["F1"] for _, r in rows]
        bounds = [(0.0, 0.0)] + [tuple(float(x) for x in r["CI base"].strip("[]").split(",")) for _, r in rows]
        ax.fill_between(
            steps,
            [base["F1"] + lo for lo, _ in bounds],
            [base["F1"] + hi for _, hi in bounds],
            color=f"C{k}",
            alpha=0.15,
        )
        ax.plot(steps, f1, marker="o", color=f"C{k}", label=f"{_run_name(paths[0])} (95% CI paired with the base)")
    ax.axhline(best, color="C3", linestyle="--", label="always the best option position")
    ax.axhline(base["F1"], color="grey", linestyle=":", label="base policy")
    ax.set(xlabel="training step", ylabel="held-out token-F1 (greedy)")
    ax.legend(fontsize=7, loc="lower right")
    written = save_figure(fig, stem)
    plt.close(fig)
    return written


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (the module docstring), each mode's operands checked: a mode flag without
    them is a usage error, not an IndexError or an unpacking error met later."""
    p = argparse.ArgumentParser(
        prog="gcpo pilot choice-gate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("data", help="the test file that gcpo pilot choice-as-qa wrote (the predictions' questions)")
    p.add_argument("files", nargs="*", metavar="PRED", help="predictions files, the base policy's first (no mode)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--compare", metavar="FOLDER", help="every finished arm-seed of a gcpo compare folder")
    mode.add_argument("--table", nargs="+", metavar="FILE", help="BASE PRED ...: one row per predictions file")
    mode.add_argument("--curve", nargs="+", metavar="FILE", help="LOG BASE PRED ...: one row per evaluated step")
    p.add_argument("--versus", nargs="+", default=[], metavar="PRED", help="--curve: another run's predictions")
    p.add_argument("--figure", metavar="STEM", help="--curve: also draw held-out F1 against step (.png, .svg)")
    p.add_argument("--output", metavar="FILE", help="also write the table to FILE")
    args = p.parse_args(argv)
    flag = next((f for f in ("--compare", "--table", "--curve") if getattr(args, f[2:]) is not None), None)
    if flag is None and not args.files:
        p.error("give predictions files (the base policy's first), or --table, --curve or --compare")
    if flag is not None and args.files:
        p.error(f"{flag} takes no other predictions files ({args.files[0]}); put them after {flag}")
    if args.curve is not None and len(args.curve) < 2:
        p.error("--curve needs LOG BASE [PRED ...]: the run's log.jsonl, then the base policy's predictions")
    if args.curve is None and (args.versus or args.figure):
        p.error("--versus and --figure go with --curve")
    return args


def guard_outputs(args: argparse.Namespace, inputs: list) -> None:
    """Refuse, before anything is read or written, an --output (or a --figure file) that is one of
    the ``inputs`` (paths): ``--output trained.predictions.parquet`` replaced the predictions with
    a table, ``--output test.jsonl`` the data (``evaluate.guard_output_file``, as gcpo eval's)."""
    from gcpo_train.evaluation.evaluate import guard_output_file

    stem = Path(args.figure or "")
    stem = stem.with_suffix("") if stem.suffix in (".png", ".svg", ".pdf") else stem  # as save_figure names them
    targets = [("--output", args.output)] + [("--figure", stem.with_suffix(x)) for x in (".png", ".svg") if args.figure]
    try:
        for flag, target in [(f, t) for f, t in targets if t]:
            guard_output_file(target, [("file", p) for p in inputs], flag, flag)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def command(argv: list[str]) -> int:
    """The command line (the module docstring). Every table and figure is computed before any
    file is written; ``--output FILE`` (the table) and ``--figure STEM`` (its .png and .svg) are
    then written as one set through ``staged_outputs``: all of them replace the old ones, or none,
    and none may be an input (``guard_outputs``)."""
    from gcpo_analysis.frames import write_text
    from gcpo_analysis.outputs import staged_outputs

    args = parse_args(list(argv))
    data, figure = args.data, None
    runs = compare_runs(args.compare) if args.compare is not None else []
    read = [data, *args.files, *(args.table or []), *(args.curve or []), *args.versus, *(r[-1] for r in runs)]
    guard_outputs(args, read + (sorted(Path(args.compare).glob("base/*")) if args.compare else []))
    if args.compare is not None:
        text = compare_table(data, args.compare, runs)
    elif args.table is not None:
        text = files_table(data, args.table[0], args.table[1:])
    elif args.curve is not None:
        log, base_path, *paths = args.curve
        text = curve_table(data, log, base_path, paths, args.versus)
        if args.figure:
            curves = [paths, args.versus] if args.versus else [paths]
            figure = lambda: curve_figure(data, base_path, curves, args.figure)  # noqa: E731
    else:
        first, *rest = args.files
        base = _predictions(first)
        rows = [gate(data, first, None)] + [gate(data, p, base) for p in rest]
        text = pd.DataFrame(rows).round(2).T.to_string(header=False)
    with staged_outputs():  # the table and the figure replace the old files together, or none does
        written = [write_text(args.output, text + "\n")] if args.output else []
        if figure is not None:
            written += figure()
    print(text)
    if written:
        print("wrote", *written, file=sys.stderr)
    return 0
