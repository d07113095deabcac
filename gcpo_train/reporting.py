"""Where a training run's log rows go besides ``log.jsonl``: TensorBoard, Weights & Biases,
trackio (``TrainConfig.report_to``), through Accelerate's trackers (``accelerate.tracking``) on
the ``Accelerator`` the gcpo loop builds. A backend that is asked for but not installed is an
error at validation, before any model loads — never a silent skip. (``--backend trl`` reports
through the transformers Trainer's own ``report_to``.)"""

from __future__ import annotations

import importlib.util

REPORTERS = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}  # name -> module to find


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def check_report_to(report_to) -> list[str]:
    """A checked list of backends, each once; refuses unknown names and backends that are not installed."""
    names = [] if report_to in (None, "none") else [report_to] if isinstance(report_to, str) else list(report_to)
    names = list(dict.fromkeys(names))
    for name in names:
        if name not in REPORTERS:
            raise ValueError(f"report_to: unknown backend {name!r}; choose from {', '.join(REPORTERS)} (or none)")
        if not installed(REPORTERS[name]):
            raise ValueError(f"report_to: {name!r} is not installed; `pip install {name}` or drop it from report_to")
    return names


def trackers(names, out_dir, config: dict, run_name: str) -> list:
    """Accelerate's trackers for the backends ``names`` (``check_report_to``'s), for the
    ``Accelerator`` the gcpo loop builds (``log_with``): TensorBoard into ``out_dir/tensorboard``,
    wandb and trackio as project "gcpo", run ``run_name``, with the run's config. A tracker opens
    nothing until ``Accelerator.init_trackers`` starts it (after the run folder is checked), and
    Accelerate logs on the main process only."""
    from accelerate.tracking import TensorBoardTracker, TrackioTracker, WandBTracker

    made = {
        "tensorboard": lambda: TensorBoardTracker("tensorboard", out_dir),  # SummaryWriter(out_dir/tensorboard)
        "wandb": lambda: WandBTracker("gcpo", name=run_name, config=config),
        "trackio": lambda: TrackioTracker("gcpo", name=run_name, config=config),
    }
    return [made[name]() for name in names]


def scalars(row: dict) -> dict[str, float]:
    """The numbers of a log row, as the trackers take them (the step is passed on its own)."""
    return {k: float(v) for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
