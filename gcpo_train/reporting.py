"""Where a training run's log rows go besides ``log.jsonl``: TensorBoard, Weights & Biases,
trackio (``TrainConfig.report_to``). A backend that is asked for but not installed is an error
at validation, before any model loads — never a silent skip."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

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


class Reporter:
    """Sends each log row to every requested backend (main process only)."""

    def __init__(self, names, out_dir, config: dict, run_name: str):
        self.sinks: list[tuple[Callable[..., Any], Callable[[], Any]]] = []
        for name in names:
            if name == "tensorboard":
                from torch.utils.tensorboard import SummaryWriter

                writer = SummaryWriter(str(out_dir / "tensorboard"))
                self.sinks.append(
                    (lambda row, step, w=writer: [w.add_scalar(k, v, step) for k, v in row.items()], writer.close)
                )
            else:  # wandb and trackio share the init / log / finish API
                module = importlib.import_module(name)
                run = module.init(project="gcpo", name=run_name, config=config)
                self.sinks.append(
                    (
                        lambda row, step, m=module: m.log(row, step=step),
                        getattr(run, "finish", None) or getattr(module, "finish", None) or (lambda: None),
                    )
                )

    def log(self, row: dict) -> None:
        scalars = {k: float(v) for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
        for log, _ in self.sinks:
            log(scalars, row["step"])

    def close(self) -> None:
        for _, close in self.sinks:
            close()
