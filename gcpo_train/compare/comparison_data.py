"""A comparison folder read once: ``load_comparison`` checks and loads everything its report, plan
and tables read (the record, the results, which runs finished, each finished run's rollouts and
gradient norms) into one ``ComparisonData``; the report, the plan and the effective treatment are
then pure functions of it (``compare.report.report_of``, ``compare.plan.plan_of``,
``compare.treatment``).

Every file is read as untrusted, with the checks of its own reader (``evaluations.check_results``
for the results, ``layout.finished_seeds`` for the run folders, ``treatment.read_rollouts`` and
``treatment.grad_norms`` for rollouts and logs), so an error names the file as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from gcpo_train.compare.evaluations import check_results
from gcpo_train.compare.layout import arm_seed_folder, finished_seeds
from gcpo_train.compare.record import read_spec

# a run's rollouts, one (path, frame) per step file in step order: the path names the file in errors
Rollouts = list[tuple[Path, pd.DataFrame]]


@dataclass(frozen=True)
class ComparisonData:
    """What one comparison folder holds, checked. ``finished`` maps each arm to its finished seeds
    (done.json); ``rollouts`` and ``grad_norms`` hold those runs' files, keyed by (arm, seed)
    (empty when loaded with ``rollouts=False``; a run without a log has no ``grad_norms`` entry)."""

    folder: Path
    spec: dict
    results: pd.DataFrame
    arms: list[str]
    finished: dict[str, list[int]]
    rollouts: dict[tuple[str, int], Rollouts] = field(default_factory=dict)
    grad_norms: dict[tuple[str, int], list[float]] = field(default_factory=dict)

    @property
    def eps(self) -> float | None:
        """The config's eps (what the trainer made Ã with); None: the trainer's default."""
        return self.spec.get("config", {}).get("eps")

    @property
    def max_grad_norm(self) -> float:
        return float(self.spec.get("config", {}).get("max_grad_norm", 1.0) or 0.0)

    @property
    def margin(self) -> float:
        """The equivalence margin as a share of the reference's held-out mean (compare.json)."""
        return float(self.spec.get("equivalence_margin", 0.1))

    @property
    def steps(self) -> int | None:
        return self.spec.get("steps")

    def finished_pairs(self) -> set[tuple[str, int]]:
        return {(arm, seed) for arm, seeds in self.finished.items() for seed in seeds}


def load_comparison(out, results: pd.DataFrame | None = None, arms=None, rollouts: bool = True) -> ComparisonData:
    """The comparison folder ``out`` as one checked ``ComparisonData``: compare.json, the results
    (``results``, or ``out/results.parquet``; refused by that file's name when they are not a
    comparison's), ``arms`` (default: compare.json's and the results' trained arms), each arm's
    finished seeds, and (``rollouts``) each finished run's rollouts and gradient norms."""
    from gcpo_train.compare.treatment import ROLLOUT_COLUMNS, grad_norms, read_rollouts

    out = Path(out)
    source = out / "results.parquet"
    if results is None:
        try:
            results = pd.read_parquet(source)
        except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
            raise ValueError(f"{source}: not a readable results file ({type(err).__name__}: {err})") from None
    check_results(results, source)
    spec = read_spec(out)
    if arms is None:  # every arm compare.json lists, then any other the results hold
        arms = [*spec.get("modulators", []), *(a for a in dict.fromkeys(results["arm"]) if a != "base")]
    arms = list(dict.fromkeys(arms))
    finished = {arm: finished_seeds(out, arm) for arm in arms}
    data = ComparisonData(out, spec, results, arms, finished)
    if not rollouts:
        return data
    for arm, seeds in finished.items():
        for seed in seeds:
            folder = arm_seed_folder(out, arm, seed)
            files = sorted((folder / "rollouts").glob("step_*.parquet"))
            data.rollouts[arm, seed] = [
                (f, read_rollouts(f, ROLLOUT_COLUMNS, either=("weight", "advantage"))) for f in files
            ]
            if (folder / "log.jsonl").exists():
                data.grad_norms[arm, seed] = grad_norms(folder / "log.jsonl")
    return data
