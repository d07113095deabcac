"""The update-alignment study's tables from its frames alone (``gcpo align --restat``).

A study folder holds, per snapshot, ``snapshots/<name>.groups.parquet`` (one row per group: role,
reward mean and spread, ‖g_q‖², ``w_<modulator>``), ``snapshots/<name>.gram.npy`` (the Gram of
the group gradients, rows in ``position`` order) and ``snapshots/<name>.card.json`` (how it was
made; ``gcpo_train.align``). ``restat`` reads them, draws the batches, computes every
weighting's statistics (``gcpo_analysis.stats.alignment``) and writes:

* ``batches.parquet``: one row per (snapshot, batch size, batch, weighting): cos, ĝ·r_B, ‖ĝ‖²;
* ``groups.parquet``: the snapshots' group frames together;
* ``summary.parquet`` and ``alignment.md``: per (snapshot, batch size, weighting) the mean cos,
  Δcos (and on the noise-corrected scale, against μ) and ΔSNR against ``none`` with
  group-bootstrap CIs; p and Holm over the modulators (the paper's, shuffled, and the field's
  weightings, ``FIELD``); the ceilings (in-sample and cross-fitted oracle, ideal room) with CIs
  and no test;
* ``bounds.parquet`` and ``ceilings.md``: the bounded and ordering ceilings of every modulator
  at the protocol's batch size (``alignment_bounds``);
* ``dose.parquet``, ``dose.md`` and ``dose.png``/``.svg``: the dose-response (``alignment_dose``);
* ``headline.md``: Δcos at the protocol's batch size (4) per weighting and snapshot, beside the
  ceilings, and ``reading.md``, the reading generated from the tables against the margins of
  ``plan.md`` (``alignment_tables``).

Point estimates use ``n_batches`` batches per (snapshot, batch size); each of the ``n_boot``
bootstrap replicates redraws ``n_boot_batches``. Everything is seeded from the snapshot's name and
the batch size, so a rerun writes the same bytes.
"""

from __future__ import annotations

import json
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gcpo_analysis.frames import FrameError, check_columns, write_frame, write_text
from gcpo_analysis.outputs import is_temporary, staged_outputs
from gcpo_analysis.stats.alignment import CEILINGS, alignment, batch_frame, bootstrap_p, deltas, group_bootstrap
from gcpo_analysis.stats.rank import _percentile_ci
from gcpo_analysis.stats.size_control import holm

BATCH_SIZES = (4, 8, 16)
N_BATCHES = 20_000  # per point estimate (plan.md)
N_BOOT = 1000  # p floor 2/(B + 1) = 0.002: times 26 modulators (Holm) it is 0.052, the reading says so
N_BOOT_BATCHES = 2_000  # batches redrawn in each bootstrap replicate at the protocol's batch size
N_BOOT_BATCHES_OTHER = 500  # ... and at the other batch sizes (plan.md's amendment: compute)
N_FRAME_BATCHES = 200  # batches.parquet keeps the first 200 batches of each block
from gcpo_analysis.study.alignment_settings import FIELD, HEADLINE, LEVEL, PROTOCOL_BATCH  # noqa: E402,F401

GROUP_COLUMNS = ("position", "role", "w_none")  # what the statistics read of a groups frame (and w_*)
STUDY_ENTRIES = ("work", "snapshots")  # a folder holding one of them is an update-alignment study


def snapshot_paths(out: Path, snapshot: str) -> dict[str, Path]:
    """Where a snapshot's frames live in the study folder ``out``."""
    base = Path(out) / "snapshots"
    return {
        "gram": base / f"{snapshot}.gram.npy",
        "groups": base / f"{snapshot}.groups.parquet",
        "card": base / f"{snapshot}.card.json",
    }


def snapshots(out: Path) -> list[str]:
    """The finished snapshots of a study folder (a groups frame and a Gram), sorted by name."""
    names = sorted(p.name[: -len(".groups.parquet")] for p in (Path(out) / "snapshots").glob("*.groups.parquet"))
    missing = [n for n in names if not snapshot_paths(out, n)["gram"].exists()]
    if missing:
        raise FileNotFoundError(f"{out}/snapshots: no Gram for {missing} (a .groups.parquet without its .gram.npy)")
    return names


def check_study_folder(out: Path, flag: str) -> None:
    """Refuse, naming ``flag``, a study folder that is a file, or a folder holding files but no
    study (``STUDY_ENTRIES``): the tables would replace a user's card.json or groups.parquet."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{flag} {out} is a file, not a study folder")
    held = sorted(p.name for p in out.iterdir() if not is_temporary(p.name)) if out.is_dir() else []
    if held and not any((out / name).is_dir() for name in STUDY_ENTRIES):
        raise ValueError(
            f"{flag} {out} holds files and no update-alignment study ({', '.join(held[:5])}"
            f"{', ...' if len(held) > 5 else ''}); give a new or empty folder, or a study folder"
        )


def check_snapshot(groups: pd.DataFrame, K: np.ndarray, source: str, gram: str) -> None:
    """Refuse a groups frame or Gram the statistics cannot read, naming the file, column and row:
    a missing column, a non-finite weight (its cosines would be NaN, unnamed), a non-finite or
    asymmetric Gram, a negative ‖g_q‖², a row that is not the Gram's (``alignment_match``), too few
    pool groups for the smallest batch."""
    check_columns(groups, list(GROUP_COLUMNS), "snapshot groups", source)
    for col in [c for c in groups.columns if c.startswith("w_")]:
        values = pd.to_numeric(groups[col], errors="coerce").to_numpy(float)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise FrameError(
                f"{source}: column {col!r} has a non-finite weight {values[bad[0]]} at position "
                f"{groups['position'].iloc[bad[0]]} "
                f"({bad.size} such row(s))"
            )
    if K.shape != (len(groups), len(groups)):
        raise ValueError(f"{gram}: a {K.shape} Gram for {len(groups)} groups in {source}")
    if not np.isfinite(K).all():
        i, j = np.argwhere(~np.isfinite(K))[0]
        raise ValueError(f"{gram}: the Gram has a non-finite entry {K[i, j]} at ({i}, {j})")
    if not np.allclose(K, K.T, rtol=1e-10, atol=0):
        raise ValueError(f"{gram} is not symmetric")
    if (np.diag(K) < 0).any():
        i = int(np.flatnonzero(np.diag(K) < 0)[0])
        raise ValueError(f"{gram}: a negative squared norm K[{i}, {i}] = {K[i, i]} (no Gram of gradients)")
    from gcpo_analysis.study.alignment_match import check_frame_matches_gram

    check_frame_matches_gram(groups, K, source, gram)  # each row the Gram's group
    n_pool = int((groups["role"] == "pool").sum())
    if n_pool <= min(BATCH_SIZES):
        raise ValueError(
            f"{source}: {n_pool} pool groups; the smallest batch ({min(BATCH_SIZES)}) needs at least "
            f"{min(BATCH_SIZES) + 1} (one outside the batch for the reference)"
        )


def _read(path: Path, load):
    """``load(path)``, or a ValueError naming the file when it is missing or unreadable."""
    try:
        return load(path)
    except Exception as err:  # noqa: BLE001 - numpy, pyarrow and json each raise their own kind
        raise ValueError(f"{path} is unreadable ({type(err).__name__}: {' '.join(str(err).split())})") from None


def load_snapshot(out: Path, name: str) -> tuple[pd.DataFrame, np.ndarray]:
    """(groups frame sorted by position, Gram) of one snapshot, checked against each other."""
    paths = snapshot_paths(out, name)
    groups = _read(paths["groups"], pd.read_parquet)
    if "position" in groups.columns:
        groups = groups.sort_values("position").reset_index(drop=True)
    K = _read(paths["gram"], lambda p: np.load(p, allow_pickle=False))
    check_snapshot(groups, K, str(paths["groups"]), str(paths["gram"]))
    return groups, K


def _seed(name: str, k: int) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(name.encode()), k, 36])


def pool_weights_of(groups: pd.DataFrame, pool: np.ndarray, card: dict) -> dict[str, np.ndarray]:
    """Every weighting of the pool: the frame's ``w_<modulator>`` columns, and the field's
    weightings computed from its ``reward_spread`` and ``grad_norm2`` (``field_weights``) where
    the frame has no column for them (frames written before they were registered)."""
    from gcpo_analysis.measures.field_weights import frame_weights

    weights = {c[2:]: groups.loc[pool, c].to_numpy(float) for c in groups.columns if c.startswith("w_")}
    missing = [c for c in ("reward_spread", "grad_norm2") if c not in groups.columns]
    if missing:
        if not all(name in weights for name in FIELD):
            warnings.warn(
                f"snapshot groups without {missing}: the field's weightings ({', '.join(FIELD)}) are left out",
                stacklevel=2,
            )
        return weights
    train = card.get("train_config", {})
    field = frame_weights(
        groups.loc[pool, "reward_spread"].to_numpy(float),
        groups.loc[pool, "grad_norm2"].to_numpy(float),
        float(train.get("r_min", 0.0)),
        float(train.get("r_max", 2.0)),
    )
    return {**weights, **{k: v for k, v in field.items() if k not in weights}}


def _kind(name: str) -> str:
    return "baseline" if name == "none" else "ceiling" if name in CEILINGS else "modulator"


def summary_rows(name, k, per_batch, snr, boot, n_pool, n_live) -> list[dict]:
    """One summary row per weighting of a (snapshot, batch size) block."""
    est = deltas(per_batch, snr)
    base = per_batch["none"]["cos"]
    rows = []
    for wname, stats in per_batch.items():
        cos = stats.get("cos")
        ok = np.isfinite(cos) & np.isfinite(base) if cos is not None else np.zeros(len(base), bool)
        row = dict(snapshot=name, batch_size=k, weighting=wname, kind=_kind(wname), n_pool=n_pool, n_live=n_live)
        row.update(
            n_batches=int(ok.sum()) if cos is not None else int(np.isfinite(stats.get("dcos", stats.get("q"))).sum()),
            cos=float(np.nanmean(cos)) if cos is not None and np.isfinite(cos).any() else float("nan"),
            frac_better=float((cos[ok] > base[ok]).mean()) if ok.any() else float("nan"),
            snr=snr[wname],
        )
        for stat in ("dcos", "dcos_mu", "dsnr"):
            lo, hi = _percentile_ci(boot[stat][wname], LEVEL)
            tested = row["kind"] == "modulator"
            row.update(
                {
                    stat: est[stat][wname],
                    f"{stat}_lo": lo,
                    f"{stat}_hi": hi,
                    f"{stat}_p": bootstrap_p(boot[stat][wname]) if tested and stat != "dcos_mu" else float("nan"),
                }
            )
        rows.append(row)
    return rows


def snapshot_tables(
    name: str,
    groups: pd.DataFrame,
    K: np.ndarray,
    n_batches: int = N_BATCHES,
    n_boot: int = N_BOOT,
    n_boot_batches: int = N_BOOT_BATCHES,
    card: dict | None = None,
    n_boot_batches_other: int = N_BOOT_BATCHES_OTHER,
) -> dict[str, pd.DataFrame]:
    """{batches, summary, bounds, dose} frames of one snapshot over ``BATCH_SIZES``: bootstrap
    replicates of ``n_boot_batches`` batches at the protocol's batch size, of
    ``n_boot_batches_other`` at the others."""
    from gcpo_analysis.study.alignment_bounds import bound_rows
    from gcpo_analysis.study.alignment_dose import dose_weights, split_name, within_batch_spread

    card = card or {}
    pool = (groups["role"] == "pool").to_numpy()
    ref = (groups["role"] == "reference").to_numpy()
    Kp = K[np.ix_(pool, pool)]
    b = K[np.ix_(pool, ref)].mean(1) if ref.any() else None
    ref_norm2 = float(K[np.ix_(ref, ref)].mean()) if ref.any() else None
    weights = pool_weights_of(groups, pool, card)
    n_pool, n_live = int(Kp.shape[0]), int((np.diag(Kp) > 0).sum())
    batches, rows, bounds, dose = [], [], [], []
    for k in BATCH_SIZES:
        if k >= Kp.shape[0]:
            continue
        rng = _seed(name, k)
        per_batch, snr, idx = alignment(Kp, weights, k, n_batches, rng, b=b, ref_norm2=ref_norm2)
        frame = batch_frame(per_batch, idx, k, N_FRAME_BATCHES)
        frame.insert(0, "snapshot", name)
        batches.append(frame)
        n_rep = n_boot_batches if k == PROTOCOL_BATCH else n_boot_batches_other
        boot = group_bootstrap(Kp, weights, k, n_rep, n_boot, rng, b=b, ref_norm2=ref_norm2)
        if not np.isfinite(per_batch["none"]["cos"]).any():
            warnings.warn(
                f"snapshot {name}, batch size {k}: no batch has a defined cosine ({n_live} of {n_pool} pool groups "
                f"have a gradient; a group whose rewards are all equal has none): its cos, Δcos and SNR are "
                f"undefined (–)",
                stacklevel=2,
            )
        rows += summary_rows(name, k, per_batch, snr, boot, n_pool, n_live)
        if k != PROTOCOL_BATCH or b is not None:
            continue
        bounds += bound_rows(name, Kp, {m: weights[m] for m in weights}, k, n_batches, _seed(name, 1000 + k))
        G = int(card.get("train_config", {}).get("group_size", 0))
        if G > 1 and {"w_rd", "w_bot", "w_se", "w_bot_rd", "live"} <= set(groups.columns):
            dw = dose_weights(groups.loc[pool].reset_index(drop=True), G, float(card["train_config"]["alpha_base"]))
            rng = _seed(name, k)  # the main table's batches: α at the run's value is its bot_rd row
            per_batch, snr, idx = alignment(Kp, dw, k, n_batches, rng, shuffled=False, ceilings=False)
            dboot = group_bootstrap(Kp, dw, k, n_boot_batches, n_boot, rng, shuffled=False, ceilings=False)
            live = np.diag(Kp)[idx] > 0
            for row in summary_rows(name, k, per_batch, snr, dboot, n_pool, n_live):
                if row["weighting"] == "none":
                    continue
                measure, level = split_name(row["weighting"])
                spread = within_batch_spread(dw[row["weighting"]][idx], live)
                dose.append(dict(measure=measure, dose=level, spread=spread, **row))
    summary = pd.DataFrame(rows)
    tested = summary["kind"] == "modulator"
    for stat in ("dcos", "dsnr"):  # Holm over the modulators of one batch size (no ceiling, no baseline)
        summary[f"{stat}_p_holm"] = np.nan
        summary.loc[tested, f"{stat}_p_holm"] = (
            summary[tested].groupby("batch_size")[f"{stat}_p"].transform(lambda p: holm(p.to_numpy()))
        )
    return dict(
        batches=pd.concat(batches, ignore_index=True),
        summary=summary,
        bounds=pd.DataFrame(bounds),
        dose=pd.DataFrame(dose),
    )


def _snapshot_job(args: tuple) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    out, name, sizes, card = args
    g, K = load_snapshot(out, name)
    return g, snapshot_tables(name, g, K, sizes[0], sizes[1], sizes[2], card, sizes[3])


def restat(
    out: Path,
    n_batches: int | None = None,
    n_boot: int | None = None,
    n_boot_batches: int | None = None,
    n_boot_batches_other: int | None = None,
    jobs: int = 1,
) -> None:
    """Rewrite ``out``'s batch frame, summary and tables from its snapshot frames (``jobs``
    snapshots at a time, in processes; each snapshot is seeded by its name, so the bytes are the
    same for any ``jobs``). A size left None is the module's (``N_BATCHES``, ``N_BOOT``, ...),
    read when called."""
    n_batches = N_BATCHES if n_batches is None else n_batches
    n_boot = N_BOOT if n_boot is None else n_boot
    n_boot_batches = N_BOOT_BATCHES if n_boot_batches is None else n_boot_batches
    n_boot_batches_other = N_BOOT_BATCHES_OTHER if n_boot_batches_other is None else n_boot_batches_other
    from concurrent.futures import ProcessPoolExecutor

    from gcpo_analysis.study.alignment_dose import dose_figure
    from gcpo_analysis.study.alignment_metric import adam_pairs, metric_markdown, metric_table
    from gcpo_analysis.study.alignment_tables import (
        alignment_markdown,
        ceilings_markdown,
        dose_markdown,
        headline_markdown,
        reading,
    )

    out = Path(out)
    names = snapshots(out)
    if not names:
        raise FileNotFoundError(f"{out}/snapshots holds no finished snapshot (*.groups.parquet)")
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    cards = {n: _read(snapshot_paths(out, n)["card"], lambda p: json.loads(p.read_text())) for n in names}
    sizes = (n_batches, n_boot, n_boot_batches, n_boot_batches_other)
    work = [(out, n, sizes, cards[n]) for n in names]
    if jobs == 1:
        results = [_snapshot_job(w) for w in work]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_snapshot_job, work))
    parts: dict[str, list] = {"batches": [], "summary": [], "bounds": [], "dose": [], "groups": []}
    for g, frames in results:
        for key, frame in frames.items():
            parts[key].append(frame)
        parts["groups"].append(g)
    tables = {key: pd.concat(frames, ignore_index=True) for key, frames in parts.items()}
    summary = tables["summary"]
    settings: dict[str, Any] = dict(
        batch_sizes=list(BATCH_SIZES),
        n_batches=n_batches,
        n_boot=n_boot,
        n_boot_batches=n_boot_batches,
        n_boot_batches_other=n_boot_batches_other,
        n_frame_batches=N_FRAME_BATCHES,
        level=LEVEL,
    )
    undefined = summary[(summary["weighting"] == "none") & (summary["n_batches"] == 0)]
    if len(undefined):  # (snapshot, batch size) blocks whose statistics are all undefined (warned)
        settings["no_defined_cosine"] = [
            [str(n), int(k)] for n, k in zip(undefined["snapshot"], undefined["batch_size"])
        ]
    with staged_outputs():  # every table replaced together, or none
        for key in ("batches", "groups", "summary", "bounds", "dose"):
            write_frame(tables[key], out / f"{key}.parquet")
        write_text(out / "alignment.md", alignment_markdown(summary, settings))
        write_text(out / "headline.md", headline_markdown(summary))
        write_text(out / "ceilings.md", ceilings_markdown(tables["bounds"]))
        write_text(out / "dose.md", dose_markdown(tables["dose"]))
        write_text(out / "reading.md", reading(summary, tables["bounds"], tables["dose"], settings))
        if adam_pairs(names):  # snapshots filed in Adam's metric: each beside its Euclidean twin
            losses = {n: cards[n].get("train_config", {}).get("loss_aggregation", "") for n in names}
            metric = metric_table(summary, tables["bounds"], family=losses)
            write_frame(metric, out / "metric.parquet")
            write_text(out / "metric.md", metric_markdown(metric))
        card = {"restat": settings, "snapshots": cards}
        write_text(out / "card.json", json.dumps(card, indent=1, sort_keys=True) + "\n")
    if len(tables["dose"]):
        dose_figure(tables["dose"], out / "dose")
