"""`gcpo study --from-training RUN`: the gap study on a training run's own groups.

A run trained with ``track_gradvar: true`` (``gcpo_train``) writes, for every step, the step's
rollouts frame with per-group columns: V_train (``grad_var``), ``grad_norm2_mean``,
``adv_all_zero`` and the modulator's measures (docs/conventions.md, "Gradient variance during
training"). This module turns those frames into a groups frame (one row per (step, query)
group, id ``s000012:<query_id>``, so a query drawn at two steps is two groups), scores the
study's measures on the same rollouts (``measures.score.score_groups``), and runs
``stats.gap_study`` with target V_train:

- pooled over all steps, and per training phase (the steps split in three equal runs: early,
  middle, late), each with the V = 0 decomposition and the held-out regression ``gap_study``
  carries;
- Spearman ρ(u, V_train) in windows of consecutive steps with percentile-bootstrap CIs, and
  its figure over training (``plots.rho_over_training``).

With β > 0 the KL term keeps V_train of a group with all-zero advantages above 0, so the
study's V = 0 split (our decomposition) is also run on ``grad_var_pg``: V_train with those
groups set to 0 (``decomposition_pg``); how small their V_train was is in the run card.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..frames import note_logprob_convention, write_frame, write_json, write_table, write_text
from ..measures.registry import default_measures, rollouts_columns
from ..provenance import environment, library_versions
from ..vocab import JUDGE, full_completion

log = logging.getLogger(__name__)

PHASES = ("early", "middle", "late")
TRAIN_GROUP_COLUMNS = ("grad_var", "grad_norm2_mean", "adv_all_zero")


def _check_run_folder(run) -> Path:
    run = Path(run)
    if not run.is_dir():
        what = "a file" if run.exists() else "no such folder"
        raise ValueError(f"--from-training {run}: {what}; give the output_dir of a gcpo train run")
    return run


def read_training_run(run) -> tuple[pd.DataFrame, list[str], dict]:
    """All tracked steps' rollouts of a run folder, with group ids ``s<step>:<query_id>``.

    Returns (rollouts, the per-group columns the trainer wrote, notes). A step without
    ``grad_var`` (tracking was off for it) is left out and counted in the notes."""
    run = _check_run_folder(run)
    files = sorted((run / "rollouts").glob("step_*.parquet"))
    if not files:
        raise ValueError(f"{run}/rollouts holds no step_*.parquet: train with save_rollouts and track_gradvar on")
    frames, untracked = [], []
    for f in files:
        frame = pd.read_parquet(f)
        if "grad_var" not in frame.columns:
            untracked.append(f.name)
            continue
        frames.append(frame)
    if not frames:
        raise ValueError(f"no step of {run} has a grad_var column: train with track_gradvar: true")
    if untracked:
        warnings.warn(f"{len(untracked)} step(s) of {run} were trained without track_gradvar; left out", stacklevel=2)
    rollouts = pd.concat(frames, ignore_index=True)
    rollouts["train_query_id"] = rollouts["query_id"].astype(str)
    rollouts["query_id"] = [f"s{int(s):06d}:{q}" for s, q in zip(rollouts["step"], rollouts["train_query_id"])]
    base = {
        "query_id",
        "rollout_id",
        "completion",
        "answer",
        "reward",
        "references",
        "token_entropy",
        "logprob",
        "temperature",
        "n_tokens",
        "advantage",
        "reward_failed",
        "dataset",
        "success",
        "ratio_var",
        "train_query_id",
    }
    extra = [c for c in rollouts.columns if c not in base]
    per_group = rollouts.groupby("query_id", sort=False)[extra].nunique(dropna=False).max() <= 1
    group_cols = [c for c in extra if bool(per_group[c])]
    missing = [c for c in TRAIN_GROUP_COLUMNS if c not in group_cols]
    if missing:
        raise ValueError(f"the rollouts frames of {run} lack the per-group column(s) {missing}")
    notes = {"n_step_files": len(files), "untracked_steps": untracked}
    return rollouts, group_cols, notes


def phase_of(steps: pd.Series) -> pd.Series:
    """early / middle / late: the run's distinct steps split in three equal consecutive runs."""
    distinct = np.sort(steps.unique())
    label = {}
    for name, part in zip(PHASES, np.array_split(distinct, len(PHASES))):
        label.update({int(s): name for s in part})
    return steps.map(lambda s: label[int(s)])


def training_groups(rollouts: pd.DataFrame, group_cols: list[str], measures, **score_kw) -> pd.DataFrame:
    """One row per training group: the study's measures (``score_groups`` on the group's
    rollouts), the trainer's columns (modulator measures prefixed ``train_``), step and phase."""
    from ..measures.score import score_groups

    scored = score_groups(rollouts, measures, **score_kw)
    scored.attrs = {}
    first = rollouts.groupby("query_id", sort=False).first()
    rename = {c: c if c in TRAIN_GROUP_COLUMNS or c == "step" else f"train_{c}" for c in group_cols}
    extra = first[group_cols].rename(columns=rename)
    extra["train_query_id"] = first["train_query_id"]
    groups = scored.merge(extra, left_on="query_id", right_index=True, how="left")
    groups["adv_all_zero"] = groups["adv_all_zero"].astype(bool)
    groups["grad_var_pg"] = np.where(groups["adv_all_zero"], 0.0, groups["grad_var"])
    groups["phase"] = phase_of(groups["step"])
    return groups


def rho_windows(
    groups: pd.DataFrame,
    measures,
    target: str = "grad_var",
    n_windows: int = 10,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Spearman ρ(u, target) in ``n_windows`` runs of consecutive steps, with percentile
    bootstrap CIs (groups resampled with replacement, one draw shared by all measures)."""
    from ..stats.rank import _draw_idx, _percentile_ci, bootstrap_rhos

    distinct = np.sort(groups["step"].unique())
    rows, rng = [], np.random.default_rng(seed)
    for w, steps in enumerate(np.array_split(distinct, min(n_windows, len(distinct)))):
        part = groups[groups["step"].isin(steps)]
        X = part[list(measures)].to_numpy(float)
        y = part[target].to_numpy(float)
        point = bootstrap_rhos(X, y, np.arange(len(y))[None])[0]
        boots = bootstrap_rhos(X, y, _draw_idx(len(y), n_boot, rng))
        for m, name in enumerate(measures):
            lo, hi = _percentile_ci(boots[:, m], level)
            rows.append(
                {
                    "window": w,
                    "step_first": int(steps[0]),
                    "step_last": int(steps[-1]),
                    "step_mid": float(np.mean(steps)),
                    "n_groups": len(part),
                    "measure": name,
                    "rho": float(point[m]),
                    "ci_low": lo,
                    "ci_high": hi,
                }
            )
    return pd.DataFrame(rows)


def _write_tables(result, folder: Path, dataset: str) -> None:
    """The paper-layout tables (named for the run's domain: Table 4's name only for math) and the
    decomposition, beside ``result.save``'s tables -- the writer ``study`` uses."""
    from .output import _write_paper_tables

    _write_paper_tables(result, folder, dataset)


def run_training_study(
    run,
    output=None,
    *,
    measures=None,
    reference: str = "bot",
    trim=0.02,
    n_boot: int = 10_000,
    k_folds: int = 5,
    seed: int = 0,
    embedder=None,
    judge: str = JUDGE,
    nli_threshold=None,
    n_windows: int = 10,
) -> dict:
    """The whole ``--from-training`` analysis into ``output`` (default RUN/training_study)."""
    t0 = time.perf_counter()
    run = _check_run_folder(run)  # before anything is created under it
    out = Path(output) if output else run / "training_study"
    out.mkdir(parents=True, exist_ok=True)
    measures = list(measures or default_measures())
    rollouts, group_cols, notes = read_training_run(run)
    info = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    dataset = info.get("config", {}).get("dataset", "narrativeqa")
    # the text the run itself embedded: its own use_full_completion, else auto by its dataset
    full = full_completion(info.get("config", {}).get("use_full_completion"), dataset)
    score_kw = dict(embedder=embedder, judge=judge, progress=False, use_full_completion=full)
    if nli_threshold is not None:
        score_kw["nli_threshold"] = nli_threshold
    groups = training_groups(rollouts, group_cols, measures, **score_kw)
    write_frame(groups, out / "groups.parquet")
    write_frame(rollouts, out / "rollouts.parquet")

    study_kw = dict(
        measures=measures, target="grad_var", reference=reference, trim=trim, n_boot=n_boot, k_folds=k_folds, seed=seed
    )
    card = {"run": run.name, "settings": {**study_kw, "judge": judge, "n_windows": n_windows}, **notes}
    # a run of gcpo <= 0.1.0 wrote the sampler's (tempered) token_entropy and logprob
    note_logprob_convention(rollouts, rollouts_columns(measures), card, run)
    card["max_new_tokens"] = info.get("config", {}).get("max_new_tokens")
    card["dataset"] = dataset
    training_statistics(groups, rollouts, out, card)
    card["seconds"] = round(time.perf_counter() - t0, 1)
    card["versions"] = library_versions()
    card["environment"] = environment()
    write_json(out / "run_card.json", card, default=float)
    log.info("--from-training: %d groups from %s; wrote %s/", len(groups), run, out)
    return card


def with_training_covariates(groups: pd.DataFrame, rollouts: pd.DataFrame, max_new_tokens) -> pd.DataFrame:
    """The size controls without the advantages: the completion length and the share at
    the token cap (``study.covariates``; V_train has no Gram here, so no N and C), and
    ``grad_var_unmod`` = V_train / omega^2, omega = w_BoT * w_RD the run's modulator weight of the
    group (its modulated advantage is omega A_i, so V_train carries omega^2; RD's rho with V_train is
    partly that). Groups with omega = 0 get NaN (left out with a warning by the statistics)."""
    from .covariates import with_covariates

    out = with_covariates(groups, rollouts, None, max_new_tokens)
    if "train_w_bot" in out.columns and "train_w_rd" in out.columns:
        w = (out["train_w_bot"] * out["train_w_rd"]).to_numpy(float)
        out["omega"] = w
        out["grad_var_unmod"] = np.where(w != 0, out["grad_var"].to_numpy(float) / np.where(w != 0, w, 1) ** 2, np.nan)
    return out


def training_statistics(
    groups: pd.DataFrame, rollouts: pd.DataFrame, out: Path, card: dict, *, figures: bool = True
) -> None:
    """Every table and figure of ``--from-training`` from the scored groups frame (also what
    ``gcpo study --restat`` re-runs on a training-study folder): per phase the gap study, the
    size controls with the completion length (trimmed and untrimmed, ``study.vtables``), the
    same on V_train / omega^2 (``unmodulated/``), both with V_pg's zeros (V_train set to 0 where
    the advantages are all zero, so V > 0 means what it means in the study), the N analysed (``n_analysed``), V_pg's
    decomposition and rho over training (its figure unless ``figures`` is False)."""
    from ..stats.gap import gap_study
    from .vtables import write_v_tables

    s = card["settings"]
    study_kw = {k: s[k] for k in ("measures", "target", "reference", "trim", "n_boot", "k_folds", "seed")}
    measures, k_folds, seed, n_windows = study_kw["measures"], study_kw["k_folds"], study_kw["seed"], s["n_windows"]
    dataset = card.get("dataset", "narrativeqa")
    groups = with_training_covariates(groups, rollouts, card.get("max_new_tokens"))

    phase_rho: dict = {}
    n_rows: list[dict] = []
    for name in ("pooled", *PHASES):
        part = groups if name == "pooled" else groups[groups["phase"] == name]
        k = min(k_folds, len(part) // 3)  # the held-out regression needs >= 3 groups per fold
        if k < 2:
            warnings.warn(f"phase {name!r} has {len(part)} groups, too few for the study; skipped", stacklevel=2)
            card[name] = {"n_groups": int(len(part)), "skipped": "too few groups"}
            continue
        if k < k_folds:
            card.setdefault("k_folds_reduced", {})[name] = k
        result = gap_study(part, name=name, **{**study_kw, "k_folds": k})
        result.save(out / "tables" / name)
        _write_tables(result, out / "tables" / name, dataset)
        # V_pg as V here: with beta > 0 the KL term keeps every V_train above 0, and V > 0 should
        # mean "the advantages are not all zero", as in the study
        pg_part = part.assign(grad_var=part["grad_var_pg"])
        note = write_v_tables(out / "tables" / name, pg_part, measures, study_kw["trim"], study_kw["n_boot"], seed)
        unmod = (
            part.assign(grad_var=np.where(part["adv_all_zero"], 0.0, part["grad_var_unmod"]))
            if "grad_var_unmod" in part.columns
            else None
        )
        if unmod is not None:
            write_v_tables(
                out / "tables" / name / "unmodulated", unmod, measures, study_kw["trim"], study_kw["n_boot"], seed
            )
        n_rows.append(
            dict(
                table=name,
                n_groups=len(part),
                n_trimmed=result.n_trimmed,
                n_analysed=result.n_queries,
                n_v_pos_trimmed=int(note["n_v_pos_removed"]),
            )
        )
        sp = result.spearman.set_index("measure")
        card[name] = {
            "n_groups": int(len(part)),
            "steps": [int(part["step"].min()), int(part["step"].max())],
            "spearman": {
                m: {"rho": float(sp.loc[m, "rho"]), "ci": [float(sp.loc[m, "ci_low"]), float(sp.loc[m, "ci_high"])]}
                for m in sp.index
            },
        }
        if name != "pooled":
            phase_rho[name] = (
                float(part["step"].mean()),
                {
                    m: (float(sp.loc[m, "rho"]), float(sp.loc[m, "ci_low"]), float(sp.loc[m, "ci_high"]))
                    for m in sp.index
                },
            )
    pg = gap_study(groups, name="pooled, V_pg", **{**study_kw, "target": "grad_var_pg"})
    if pg.decomposition is not None:
        write_table(pg.decomposition, out / "tables" / "decomposition_pg.csv")
        write_text(
            out / "tables" / "decomposition_pg.md",
            "V = 0 decomposition (our addition) with V_pg = V_train, set to 0 where the group's advantages are "
            "all zero (there V_train is the KL term's alone)\n\n"
            + pg.decomposition.to_markdown(index=False, floatfmt=".3f")
            + "\n",
        )
    write_table(pd.DataFrame(n_rows), out / "tables" / "n_analysed.csv")
    write_text(
        out / "tables" / "n_analysed.md",
        "The N analysed in every table: groups per table, removed by the trim, left (n_analysed).\n\n"
        + pd.DataFrame(n_rows).to_markdown(index=False)
        + "\n",
    )
    card["n_analysed"] = {r["table"]: r["n_analysed"] for r in n_rows}
    used = [m for m in measures if m in groups.columns]
    windows = rho_windows(groups, used, n_windows=n_windows, seed=seed)
    write_table(windows, out / "tables" / "rho_over_training.csv")
    if figures:
        (out / "figures").mkdir(exist_ok=True)
        from ..plots import rho_over_training

        rho_over_training(windows, phase_rho, out / "figures" / "rho_over_training")
    zero = groups["adv_all_zero"]
    card["groups"] = {
        "n": int(len(groups)),
        "frac_adv_all_zero": float(zero.mean()),
        "frac_grad_var_zero": float((groups["grad_var"] == 0).mean()),
        "grad_var_median_adv_nonzero": float(groups.loc[~zero, "grad_var"].median()) if (~zero).any() else None,
        "grad_var_max_adv_all_zero": float(groups.loc[zero, "grad_var"].max()) if zero.any() else None,
    }
    for m in used:  # the modulator's own measure against the study's recomputation of it
        if f"train_{m}" in groups.columns:
            card.setdefault("train_vs_rescored_max_abs_diff", {})[m] = float(
                np.nanmax(np.abs(groups[f"train_{m}"] - groups[m]))
            )


def is_training_folder(folder) -> bool:
    """Whether ``folder`` was written by ``--from-training`` (its card has the run and phases)."""
    card = Path(folder) / "run_card.json"
    if not card.exists():
        return False
    blob = json.loads(card.read_text())
    return "pooled" in blob and "run" in blob


def restat_training(folder, overrides: dict | None = None, *, figures: bool = True) -> dict:
    """``gcpo study --restat`` on a ``--from-training`` folder: every table from its committed
    groups.parquet and rollouts.parquet (no model, no re-scoring), with the card's settings and
    ``overrides`` (trim, n_boot, measures); ``figures`` False leaves figures/ as it is."""
    from ..frames import read_frame
    from ..measures.score import parse_measures

    folder = Path(folder)
    card = json.loads((folder / "run_card.json").read_text())
    over = dict(overrides or {})
    if "measures" in over:
        over["measures"] = parse_measures(over["measures"])
    card["settings"].update(over)
    if "max_new_tokens" not in card and (folder / "run" / "run.json").exists():  # a card of gcpo <= 0.1
        cfg = json.loads((folder / "run" / "run.json").read_text()).get("config", {})
        card["max_new_tokens"], card["dataset"] = cfg.get("max_new_tokens"), cfg.get("dataset", "narrativeqa")
    card["run"] = Path(str(card.get("run", folder.name))).name  # the run's name, not a machine's path
    groups = read_frame(folder / "groups.parquet", "groups")
    rollouts = pd.read_parquet(folder / "rollouts.parquet")
    t0 = time.perf_counter()
    training_statistics(groups, rollouts, folder, card, figures=figures)
    card["restat"] = {
        "seconds": round(time.perf_counter() - t0, 1),
        "overrides": over,
        "from": "groups.parquet, rollouts.parquet (no model)",
        "versions": library_versions(),
        "environment": environment(),
    }
    write_json(folder / "run_card.json", card, default=float)
    return card


def run_from_cli(args) -> int:
    """``gcpo study --from-training RUN``: the study flags that apply here, others ignored."""
    from ..measures.score import parse_measures

    kw = {
        k: getattr(args, k)
        for k in ("reference", "n_boot", "k_folds", "seed", "embedder", "judge", "nli_threshold")
        if getattr(args, k, None) is not None
    }
    if getattr(args, "measures", None):
        kw["measures"] = parse_measures(args.measures)
    if getattr(args, "trim", None) is not None:
        kw["trim"] = int(args.trim) if args.trim >= 1 else args.trim
    run_training_study(args.from_training, args.output, **kw)
    return 0
