"""What a comparison's arms actually did to the updates, read back from a comparison folder's
committed rollouts and logs:

* **ω per group** (``omega_groups``, ``omega_frame``): Ã = ω·A for a group-level modulator, so
  ω = Σ_i Ã_i A_i / Σ_i A_i² with A the plain GRPO advantages (groups whose rewards are all equal
  have A = 0 and no ω); a TRL run's rollouts carry ω as the column ``weight``. A is made with the
  comparison's own ``eps`` (its config's, as the trainer made Ã), so plain GRPO reads ω = 1.
* **Effective treatment** (``effective_treatment``): AdamW normalises a uniform rescaling of a
  step's loss away (up to ε and gradient clipping; ``gcpo proofs``' Adam-invariance check), so
  what can reach the update is the within-step relative weight ω / mean_step(ω) (its p5–p95 over
  all groups of all seeds), and clipping: the share of steps whose pre-clip gradient norm exceeds
  ``max_grad_norm``. The mean ω is reported beside them.
* **Coupling** (``coupling``): the arms of one seed sample each group from the same seed
  (common random numbers), so at step 1 their completions are identical and later differences
  come from the updates alone. The share of identical completions (same step, query and rollout
  index) per step, averaged over seeds, says how long a pair stays paired; ``first_below`` gives
  the first step at which it falls below a level (90%, 50%).

The rollouts and logs are read as untrusted (``read_rollouts``, ``grad_norms``): a file that is
not what the trainer wrote (a missing or mistyped column, a row twice, another step's rows, a
non-finite advantage or gradient norm) is refused naming the file and the row, never turned into
a ω, a clipped share or a coupling curve that is silently wrong.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from gcpo_analysis.vocab import EPS
from gcpo_train.compare.layout import arm_seed_folder, finished_seeds

ROLLOUT_FILE = re.compile(r"step_(\d+)\.parquet")
KEY = ["step", "query_id", "rollout_id"]  # one rollout: the trainer writes each once
ROLLOUT_COLUMNS = ["reward", "completion"]  # what ω and the coupling read, beside the weight or advantage
# what the trainers write (``loop.step_data``, ``compare.trl_arm``): ids and steps as integers,
# query ids and completions as text, rewards, advantages and weights as numbers
COLUMN_KIND = {
    "step": "integer",
    "rollout_id": "integer",
    "query_id": "text",
    "completion": "text",
    "reward": "number",
    "advantage": "number",
    "weight": "number",
}


def rollout_step(path: Path) -> int:
    """The step of a rollouts file as the trainer names it (``step_000012.parquet``); any other
    ``step_*.parquet`` name in a run's rollouts/ is refused: a stray copy would count its groups
    twice in ω, and step_12 would never pair with the reference arm's step_000012."""
    m = ROLLOUT_FILE.fullmatch(path.name)
    if m is None or path.name != f"step_{int(m[1]):06d}.parquet":
        raise ValueError(
            f"{path}: not a rollouts file of the run (the trainer writes rollouts/step_NNNNNN.parquet); "
            f"move it out of {path.parent}"
        )
    return int(m[1])


def read_rollouts(path: Path, columns: list[str], either: tuple[str, ...] = ()) -> pd.DataFrame:
    """``columns`` (with the key step, query_id, rollout_id) and the first of ``either`` the file
    has, of one rollouts file, checked: each column there, of its type (``COLUMN_KIND``) and never
    null, every row of the step the file is named for, and each rollout once. Anything else is a
    ValueError naming the file and the column or row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    step = rollout_step(path)
    try:
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        if either and not set(either) & set(names):
            raise ValueError(f"{path}: no column {' or '.join(map(repr, either))} (columns: {', '.join(names)})")
        wanted = list(dict.fromkeys(KEY + columns + [c for c in either if c in names][:1]))
        missing = [c for c in wanted if c not in names]
        if missing:
            raise ValueError(f"{path}: no column {', '.join(map(repr, missing))} (columns: {', '.join(names)})")
        table = parquet.read(columns=wanted)
    except (OSError, pa.ArrowException) as err:  # not a Parquet file, or a truncated one
        raise ValueError(f"{path}: not a readable rollouts file ({type(err).__name__}: {err})") from None
    if table.num_rows == 0:
        raise ValueError(f"{path}: the file holds no rollouts")
    for name in wanted:
        _check_type(path, name, table.column(name).type)
    nulls = [name for name in wanted if table.column(name).null_count]  # pandas writes a float NaN as null
    if nulls:
        frame = table.to_pandas()
        row = int(np.flatnonzero(frame[nulls[0]].isna().to_numpy())[0])
        raise ValueError(f"{path}: row {row} ({_row_name(frame, row)}) has no {nulls[0]} (null or NaN)")
    other = np.flatnonzero(table.column("step").to_numpy() != step)
    if other.size:
        raise ValueError(
            f"{path}: row {other[0]} is a rollout of step {table.column('step')[other[0]]}, not of step {step} "
            "(the file's name); a file copied under another step's name?"
        )
    _refuse_duplicates(zip(*(table.column(c).to_pylist() for c in KEY)), f"{path}: ")
    return table.to_pandas()


def _check_type(path: Path, name: str, t) -> None:
    """A column of the type the trainer writes (``COLUMN_KIND``): 1 and "1" would be two rollout
    ids to the merge, and a reward "3.0" a text."""
    import pyarrow as pa

    kind = COLUMN_KIND[name]
    if kind == "text":
        ok = pa.types.is_string(t) or pa.types.is_large_string(t)
    else:
        ok = pa.types.is_integer(t) or (kind == "number" and pa.types.is_floating(t))
    if not ok:
        raise ValueError(f"{path}: column {name!r} must hold {kind}s, it holds {t}")


def _row_name(frame: pd.DataFrame, row: int) -> str:
    """The 'step S, query Q' of a row, as much of it as the row has."""
    step, query = frame["step"].iloc[row], frame["query_id"].iloc[row]
    return (
        ", ".join([f"step {int(step)}"] * (not pd.isna(step)) + [f"query {query!r}"] * (not pd.isna(query)))
        or "no step, no query"
    )


def _refuse_duplicates(keys, prefix: str = "") -> None:
    """Each (step, query_id, rollout_id) of ``keys`` once: a copy would weigh its group twice in
    ω and pair with every copy of the other arm's in the coupling."""
    seen: set = set()
    for key in keys:
        if key in seen:
            step, query, rollout = key
            raise ValueError(f"{prefix}step {step}, query {query!r}: rollout {rollout} is there twice")
        seen.add(key)


def omega_groups(rollouts: pd.DataFrame, eps: float = EPS) -> pd.DataFrame:
    """(step, query_id, omega) of every group of a rollouts frame with unequal rewards: its
    ``weight`` column where it has one (TRL runs), else read back from ``advantage`` with the
    GRPO advantages of ``eps`` (the config's: the trainer's). A group that cannot give a ω (no
    query_id, a reward, advantage or weight that is not a finite number, a weight that varies
    within the group, a rollout twice where the frame has rollout_id) is a ValueError naming
    the step and the query: a ω read from it would be silently wrong or silently missing."""
    from gcpo_analysis.measures.advantages import grpo_advantages

    column = "weight" if "weight" in rollouts else "advantage"
    missing = [c for c in ("step", "query_id", "reward", column) if c not in rollouts]
    if missing:
        raise ValueError(f"no column {', '.join(map(repr, missing))} in the rollouts")
    for name in ("step", "query_id"):
        nulls = np.flatnonzero(rollouts[name].isna().to_numpy())
        if nulls.size:
            raise ValueError(f"step {rollouts['step'].iloc[nulls[0]]}: row {nulls[0]} has no {name}")
    for name in ("reward", column):
        if not pd.api.types.is_numeric_dtype(rollouts[name]) or pd.api.types.is_bool_dtype(rollouts[name]):
            raise ValueError(f"column {name!r} must hold numbers, it holds {rollouts[name].dtype}")
    if "rollout_id" in rollouts:
        _refuse_duplicates(zip(*(rollouts[c].tolist() for c in KEY)))
    rows = []
    for (step, query), g in rollouts.groupby(["step", "query_id"], sort=False):
        where = f"step {step}, query {query!r}"
        values = g[column].to_numpy(float)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise ValueError(f"{where}: {column} {values[bad[0]]} is not a finite number")
        if column == "weight" and np.any(values != values[0]):
            raise ValueError(
                f"{where}: weight varies within the group ({values.min()} to {values.max()}); a group has one ω"
            )
        try:
            A = grpo_advantages(g["reward"].to_numpy(float), eps)
        except ValueError as err:  # a NaN or infinite reward
            raise ValueError(f"{where}: {err}") from None
        if not np.any(A != 0):
            continue
        omega = float(values[0]) if column == "weight" else float(np.dot(values, A) / np.dot(A, A))
        rows.append((int(g["step"].iloc[0]), str(query), omega))
    return pd.DataFrame(rows, columns=["step", "query_id", "omega"])


def _rollout_files(out: Path, arm: str, seed: int) -> list[Path]:
    return sorted((arm_seed_folder(out, arm, seed) / "rollouts").glob("step_*.parquet"))


def _runs(out, arm: str, columns: list[str], either: tuple[str, ...] = ()) -> dict[int, list]:
    """{seed: [(path, rollouts frame), ...]} of the finished runs of ``arm`` in folder ``out``."""
    return {
        seed: [(f, read_rollouts(f, columns, either=either)) for f in _rollout_files(Path(out), arm, seed)]
        for seed in finished_seeds(out, arm)
    }


def check_eps(eps, out=None) -> float:
    """The config's eps as a number >= 0 (None: the trainer's default, ``TrainConfig.eps``)."""
    eps = EPS if eps is None else eps
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        where = f" (the config's eps in {Path(out) / 'compare.json'})" if out is not None else ""
        raise ValueError(f"eps must be a number >= 0{where}, got {eps!r}")
    return float(eps)


def omega_of(runs: dict[int, list], eps: float | None = None) -> pd.DataFrame:
    """(seed, step, query_id, omega) of every group of the runs ``{seed: [(path, rollouts), ...]}``
    (``ComparisonData.rollouts`` of one arm), with the GRPO advantages of ``eps``. Each error
    names the rollouts file."""
    eps = check_eps(eps)
    parts = []
    for seed in sorted(runs):
        for f, rollouts in runs[seed]:
            try:
                frame = omega_groups(rollouts, eps)
            except ValueError as err:
                raise ValueError(f"{f}: {err}") from None
            parts.append(frame.assign(seed=seed))
    if not parts:
        return pd.DataFrame(columns=["seed", "step", "query_id", "omega"])
    return pd.concat(parts, ignore_index=True)[["seed", "step", "query_id", "omega"]]


def omega_frame(out, arm: str, eps: float | None = None) -> pd.DataFrame:
    """``omega_of`` the finished runs of ``arm`` in folder ``out``, with the comparison config's
    eps (compare.json's config.eps, what the trainer used); None is the trainer's default
    (``TrainConfig.eps``), what a config without an eps trained with."""
    check_eps(eps, out)
    return omega_of(_runs(out, arm, ["reward"], either=("weight", "advantage")), eps)


def relative_weights(omega: pd.DataFrame) -> np.ndarray:
    """ω / mean_step(ω) of every group, the mean over that seed's step's groups with an ω."""
    if omega.empty:
        return np.array([])
    mean = omega.groupby(["seed", "step"])["omega"].transform("mean")
    return (omega["omega"] / mean).to_numpy(float)


def grad_norms(log: Path) -> list[float]:
    """The pre-clip gradient norm of every row of a run's ``log.jsonl`` (``runlog.read_log``),
    each a number ≥ 0: a row without one, a NaN or a text ("3.0") is refused naming the file and
    line, since it would otherwise leave the clipped share's denominator or count as not clipped.
    +inf is kept (it counts as clipped): HF's Trainer logs it, unchecked, on a step an fp16
    GradScaler skipped for overflow."""
    from gcpo_train.runfiles.runlog import read_log

    rows = read_log(log)
    # read_log keeps one row per non-blank line, in order (dropping at most a partial last one)
    lines = [
        k for k, line in enumerate(log.read_text(encoding="utf-8", errors="replace").splitlines(), 1) if line.strip()
    ]
    norms = []
    for line, row in zip(lines, rows):
        v = row.get("grad_norm")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or v < 0:
            what = "no grad_norm (the trainer logs one every step)" if "grad_norm" not in row else f"grad_norm {v!r}"
            raise ValueError(f"{log}: line {line} (step {row['step']}) has {what}, not a number >= 0")
        norms.append(float(v))
    return norms


def clipped_share_of(norms: list[float], max_grad_norm: float) -> float:
    """Share of the gradient norms ``norms`` (every logged step of an arm) above ``max_grad_norm``;
    NaN where there is none or no clipping (max_grad_norm ≤ 0)."""
    if max_grad_norm is not None and math.isnan(max_grad_norm):  # every norm > NaN is False: 0% clipped
        raise ValueError("max_grad_norm is NaN; the config's max_grad_norm is a number (≤ 0: no clipping)")
    if not norms or not max_grad_norm or max_grad_norm <= 0:
        return float("nan")
    return float(np.mean(np.asarray(norms, float) > max_grad_norm))


def clipped_share(out, arm: str, max_grad_norm: float) -> float:
    """``clipped_share_of`` the logs of the finished runs of ``arm`` in folder ``out``."""
    return clipped_share_of(_logged_norms(out, arm), max_grad_norm)


def _logged_norms(out, arm: str) -> list[float]:
    """The gradient norms of every finished run of ``arm`` in folder ``out`` with a log, in seed order."""
    norms: list[float] = []
    for seed in finished_seeds(out, arm):
        log = arm_seed_folder(out, arm, seed) / "log.jsonl"
        if log.exists():
            norms += grad_norms(log)
    return norms


def treatment_of(omega: pd.DataFrame, norms: list[float], max_grad_norm: float) -> dict:
    """{"omega_mean", "rel_omega_p5", "rel_omega_p95", "clipped_share"} of one arm from its ω
    frame (``omega_of``) and its runs' gradient norms."""
    rel = relative_weights(omega)
    return {
        "omega_mean": float(omega["omega"].mean()) if len(omega) else float("nan"),
        "rel_omega_p5": float(np.quantile(rel, 0.05)) if rel.size else float("nan"),
        "rel_omega_p95": float(np.quantile(rel, 0.95)) if rel.size else float("nan"),
        "clipped_share": clipped_share_of(norms, max_grad_norm),
    }


def effective_treatment(out, arm: str, omega: pd.DataFrame, max_grad_norm: float) -> dict:
    """``treatment_of`` one arm of folder ``out``, its gradient norms read from the runs' logs."""
    return treatment_of(omega, _logged_norms(out, arm), max_grad_norm)


def identical_share(a: pd.DataFrame, b: pd.DataFrame) -> pd.Series:
    """Per step, the share of (query_id, rollout_id) whose completions are identical in the two
    rollouts frames (the rows both have; each rollout once in each frame)."""
    both = a[KEY + ["completion"]].merge(b[KEY + ["completion"]], on=KEY, suffixes=("_a", "_b"), validate="one_to_one")
    same = both["completion_a"] == both["completion_b"]
    return same.groupby(both["step"]).mean().rename("identical")


def coupling_of(arm_runs: dict[int, list], reference_runs: dict[int, list]) -> pd.DataFrame:
    """(step, identical, seeds), by step: the share of identical completions between two arms'
    runs ``{seed: [(path, rollouts), ...]}`` at each step, averaged over the seeds both have (a
    step one seed lacks is averaged over the others)."""
    curves = []
    for seed in sorted(set(arm_runs) & set(reference_runs)):
        files = {rollout_step(f): frame for f, frame in arm_runs[seed]}
        ref = {rollout_step(f): frame for f, frame in reference_runs[seed]}
        shared = sorted(set(files) & set(ref))
        if not shared:
            continue
        a = pd.concat([files[s] for s in shared], ignore_index=True)
        b = pd.concat([ref[s] for s in shared], ignore_index=True)
        curves.append(identical_share(a, b))
    if not curves:
        return pd.DataFrame(columns=["step", "identical", "seeds"])
    table = pd.concat(curves, axis=1).sort_index()  # the union of the seeds' steps, in step order
    return pd.DataFrame(
        {"step": table.index.astype(int), "identical": table.mean(axis=1).to_numpy(), "seeds": table.count(axis=1)}
    ).reset_index(drop=True)


def coupling(out, arm: str, reference: str) -> pd.DataFrame:
    """``coupling_of`` the finished runs of ``arm`` and ``reference`` in folder ``out``."""
    return coupling_of(_runs(out, arm, ["completion"]), _runs(out, reference, ["completion"]))


def first_below(curve: pd.DataFrame, level: float) -> int | None:
    """The first step whose share of identical completions is below ``level`` (None: never)."""
    below = curve[curve["identical"] < level]
    return int(below["step"].min()) if len(below) else None
