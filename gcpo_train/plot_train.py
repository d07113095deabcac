"""``gcpo plot-train RUN``: training curves from ``RUN/log.jsonl`` as PNG and SVG.

Four panels over the step: reward (mean, and the share of groups with equal rewards), the KL
to the reference and the loss, the modulator's weights (every ``w_*`` column), and the time per
phase (every ``time_*`` column). Written to ``RUN/plots/training.{png,svg}`` unless ``-o``.
"""

from __future__ import annotations

from pathlib import Path

from gcpo_train.runfiles.runlog import read_log

MAX_POINTS = 2000  # per curve: a 300k-step log would otherwise take a minute and a 200 MB SVG


def downsample(df, max_points: int = MAX_POINTS):
    """At most ``max_points`` rows, evenly spaced over the steps (first and last kept), with a
    warning naming the stride; a shorter log is returned as it is."""
    import warnings

    import numpy as np

    if len(df) <= max_points:
        return df
    keep = np.unique(np.linspace(0, len(df) - 1, max_points).round().astype(int))
    warnings.warn(
        f"plot-train: {len(df)} logged steps drawn as {len(keep)} evenly spaced points "
        f"(every ~{len(df) / len(keep):.0f}th step)",
        stacklevel=2,
    )
    return df.iloc[keep]


def check_outputs(stem: Path, log: Path) -> None:
    """The PNG and SVG of ``stem`` never over the log, inside a checkpoint, or in the parts of a
    run that gcpo train prunes and replaces (``outputs.check_output``), before anything is drawn."""
    from gcpo_analysis.outputs import check_output

    if stem.suffix in (".png", ".svg", ".pdf"):  # the names save_figure writes
        stem = stem.with_suffix("")
    for suffix in (".png", ".svg"):
        check_output(stem.with_suffix(suffix), [log], "-o")


def check_steps(rows, log: Path) -> None:
    """Every step fits int64 (numpy and matplotlib read it as one) and comes once (two rows of
    one step draw a curve that runs back on itself); the error names the log, the rows and the step."""
    from gcpo_analysis.knob import INT64

    first: dict[int, int] = {}
    for i, row in enumerate(rows, start=1):
        step = row["step"]
        if not INT64[0] <= step <= INT64[1]:
            raise ValueError(f"{log}: logged row {i} has step = {step}, beyond a 64-bit integer (up to 2^63 - 1)")
        if step in first:
            raise ValueError(
                f"{log}: logged rows {first[step]} and {i} have the same step = {step}; "
                "plot-train draws one row per step"
            )
        first[step] = i


def check_numbers(df, columns, log: Path) -> None:
    """Every value of the drawn columns is a number (or null or NaN, a gap in the curve) within
    float32's range (the training computes in float32); a string, a list, a boolean, an infinity
    or a number like 1e308 (matplotlib's axis overflows on it) is refused naming the log, the
    step and the key (matplotlib would draw strings as categories, or fail with a message that
    names neither)."""
    import math
    import numbers

    from gcpo_analysis.knob import FLOAT32_MAX, finite_number

    for c in columns:
        for i, v in enumerate(df[c]):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            where = f"{log}: logged row {i + 1} (step {df['step'].iloc[i]}) has {c} = {v!r}"
            if not isinstance(v, numbers.Real) or isinstance(v, bool):
                raise ValueError(f"{where}, not a number; plot-train draws {c} as a curve")
            try:
                x = finite_number(c, v)
            except ValueError:  # infinite, or an integer no float holds (10**400)
                x = math.inf
            if abs(x) > FLOAT32_MAX:
                raise ValueError(
                    f"{where}, not a finite number within float32's range (up to 3.4e+38 in magnitude, "
                    f"the training computes in float32); plot-train draws {c} as a curve"
                )


def plot_training(run_dir, output=None):
    """Draw the curves of a run folder; returns the two written paths."""
    import pandas as pd

    from gcpo_analysis.plots import plt, save_figure

    run_dir = Path(run_dir)
    log = run_dir / "log.jsonl" if run_dir.is_dir() else run_dir
    if not run_dir.exists():
        raise FileNotFoundError(f"{run_dir}: no such folder; give the output_dir of a gcpo train run")
    if not log.exists():
        raise FileNotFoundError(f"no log.jsonl in {run_dir}: it is not a gcpo train run folder, or no step has run")
    out = Path(output) if output else (log.parent / "plots" / "training")
    check_outputs(out, log)
    rows = read_log(log)
    if not rows:
        raise ValueError(f"{log} has no logged step")
    check_steps(rows, log)
    df = pd.DataFrame(rows)
    panels = [
        ("(a) reward", [c for c in ("reward_mean", "frac_zero_std") if c in df]),
        ("(b) KL to the reference and loss", [c for c in ("kl", "loss") if c in df]),
        ("(c) advantage weights (group means)", [c for c in df if c.startswith("w_")]),
        ("(d) seconds per phase", [c for c in df if c.startswith("time_")]),
    ]
    check_numbers(df, [c for _, cols in panels for c in cols], log)
    df = downsample(df)
    fig, ax = plt.subplots(1, 4, figsize=(18, 3.6))
    for a, (title, cols) in zip(ax, panels):
        for c in cols:
            a.plot(df["step"], df[c], marker="o" if len(df) <= 200 else None, ms=3, label=c)
        a.set(title=title, xlabel="step")
        if cols:
            a.legend(fontsize=7)
        else:
            a.text(0.5, 0.5, "not logged in this run", ha="center", va="center", transform=a.transAxes)
    fig.suptitle(f"training run {run_dir.name}", fontsize=11)
    fig.tight_layout()
    paths = save_figure(fig, out)
    plt.close(fig)
    return paths


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plot-train",
        help="draw a training run's curves (reward, KL, weights, timing) from log.jsonl",
        description=__doc__,
    )
    p.add_argument("run", help="run folder (holding log.jsonl) or the log.jsonl itself")
    p.add_argument("-o", "--output", default=None, help="file stem for the PNG and SVG (default: RUN/plots/training)")
    p.set_defaults(func=_run, _parser=p)


def _run(args) -> int:
    for path in plot_training(args.run, args.output):
        print(f"wrote {path}")
    return 0
