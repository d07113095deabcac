"""The update-alignment study's tables from its frames alone (issue 36; ``gcpo align --restat``).

A study folder holds, per snapshot, ``snapshots/<name>.groups.parquet`` (one row per group: role,
reward mean and spread, ‖g_q‖², ``w_<modulator>``), ``snapshots/<name>.gram.npy`` (the Gram of
the group gradients, rows in ``position`` order) and ``snapshots/<name>.card.json`` (how it was
made; ``gcpo_train.align``). ``restat`` reads them, draws the batches, computes every
weighting's statistics (``gcpo_analysis.stats.alignment``) and writes:

* ``batches.parquet``: one row per (snapshot, batch size, batch, weighting): cos, ĝ·r_B, ‖ĝ‖²;
* ``groups.parquet``: the snapshots' group frames together;
* ``summary.parquet`` and ``alignment.md``: per (snapshot, batch size, weighting) the mean cos,
  Δcos and ΔSNR against ``none`` with group-bootstrap CIs, p and Holm;
* ``headline.md``: Δcos at the protocol's batch size (4) per weighting and snapshot, beside the
  oracle ceiling (the README table), and ``reading.md``, the reading generated from it.

Everything is seeded from the snapshot's name and the batch size, so a rerun writes the same bytes.
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
from gcpo_analysis.stats.alignment import ORACLE, SHUFFLED, alignment, batch_frame, bootstrap_p, deltas, group_bootstrap
from gcpo_analysis.stats.rank import _percentile_ci
from gcpo_analysis.stats.size_control import holm

BATCH_SIZES = (4, 8, 16)
PROTOCOL_BATCH = 4  # queries_per_step of the NarrativeQA-spans protocol
N_BATCHES = 200
N_BOOT = 1000  # the p floor 2/(B + 1) = 0.002 passes Holm over the 19 weightings of a block at 0.05
LEVEL = 0.95
HEADLINE = ("se", "kle", "care", "rd", "cd_rd", "bot_rd", "q_hawkeye")
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


def snapshot_tables(
    name: str, groups: pd.DataFrame, K: np.ndarray, n_batches: int = N_BATCHES, n_boot: int = N_BOOT
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(batches, summary) frames of one snapshot over ``BATCH_SIZES``."""
    pool = (groups["role"] == "pool").to_numpy()
    ref = (groups["role"] == "reference").to_numpy()
    Kp = K[np.ix_(pool, pool)]
    b = K[np.ix_(pool, ref)].mean(1) if ref.any() else None
    ref_norm2 = float(K[np.ix_(ref, ref)].mean()) if ref.any() else None
    weights = {c[2:]: groups.loc[pool, c].to_numpy(float) for c in groups.columns if c.startswith("w_")}
    batches, rows = [], []
    for k in BATCH_SIZES:
        if k >= Kp.shape[0]:
            continue
        rng = _seed(name, k)
        per_batch, snr, idx = alignment(Kp, weights, k, n_batches, rng, b=b, ref_norm2=ref_norm2)
        frame = batch_frame(per_batch, idx, k)
        frame.insert(0, "snapshot", name)
        batches.append(frame)
        dcos, dsnr = deltas(per_batch, snr)
        boot_cos, boot_snr = group_bootstrap(Kp, weights, k, n_batches, n_boot, rng, b=b, ref_norm2=ref_norm2)
        base = per_batch["none"]["cos"]
        if not np.isfinite(base).any():
            warnings.warn(
                f"snapshot {name}, batch size {k}: no batch has a defined cosine ({int((np.diag(Kp) > 0).sum())} "
                f"of {Kp.shape[0]} pool groups have a gradient; a group whose rewards are all equal has none): "
                f"its cos, Δcos and SNR are undefined (–)",
                stacklevel=2,
            )
        for wname, stats in per_batch.items():
            ok = np.isfinite(stats["cos"]) & np.isfinite(base)
            lo_c, hi_c = _percentile_ci(boot_cos[wname], LEVEL)
            lo_s, hi_s = _percentile_ci(boot_snr[wname], LEVEL)
            rows.append(
                dict(
                    snapshot=name,
                    batch_size=k,
                    weighting=wname,
                    n_pool=int(Kp.shape[0]),
                    n_live=int((np.diag(Kp) > 0).sum()),
                    n_batches=int(ok.sum()),
                    cos=float(np.nanmean(stats["cos"])) if np.isfinite(stats["cos"]).any() else float("nan"),
                    dcos=dcos[wname],
                    dcos_lo=lo_c,
                    dcos_hi=hi_c,
                    dcos_p=bootstrap_p(boot_cos[wname]) if wname != "none" else float("nan"),
                    frac_better=float((stats["cos"][ok] > base[ok]).mean()) if ok.any() else float("nan"),
                    snr=snr[wname],
                    dsnr=dsnr[wname],
                    dsnr_lo=lo_s,
                    dsnr_hi=hi_s,
                    dsnr_p=bootstrap_p(boot_snr[wname]) if wname != "none" else float("nan"),
                )
            )
    summary = pd.DataFrame(rows)
    for stat in ("dcos", "dsnr"):  # Holm over the weightings of one batch size (the oracle included)
        summary[f"{stat}_p_holm"] = summary.groupby("batch_size")[f"{stat}_p"].transform(lambda p: holm(p.to_numpy()))
    return pd.concat(batches, ignore_index=True), summary


def _f(x: float, digits: int = 3) -> str:
    return "–" if not np.isfinite(x) else f"{x:+.{digits}f}"


def _ci(lo: float, hi: float, digits: int = 3) -> str:
    return "–" if not (np.isfinite(lo) and np.isfinite(hi)) else f"[{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _p(p: float) -> str:
    return "–" if not np.isfinite(p) else (f"{p:.3f}" if p < 0.01 else f"{p:.2f}")


def _records(summary: pd.DataFrame) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
    """(snapshot, batch size) -> weighting -> its summary row, as plain Python values."""
    out: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for row in summary.to_dict("records"):
        out.setdefault((str(row["snapshot"]), int(row["batch_size"])), {})[str(row["weighting"])] = {
            str(k): v for k, v in row.items()
        }
    return dict(sorted(out.items()))


def alignment_markdown(summary: pd.DataFrame) -> str:
    """Every (snapshot, batch size) block: cos, Δcos and ΔSNR with CI, p and Holm."""
    out = [
        "# The update-alignment study: every weighting against equal weights",
        "",
        "Generated by `gcpo align --restat` from this folder's frames (docs/results/update_alignment.md). cos: "
        "mean cosine of the weighted batch gradient with the leave-batch-out reference; Δcos: paired by batch, "
        "against `none`; better: the share of batches where the weighting's cosine is higher; SNR: "
        f"‖E ĝ‖² / E‖ĝ − E ĝ‖², weights normalised to mean 1 per batch. {int(LEVEL * 100)}% CIs and p from "
        f"{N_BOOT} group-bootstrap replicates; Holm over the weightings of one block.",
        "",
    ]
    for (snap, k), block in _records(summary).items():
        first = next(iter(block.values()))
        out += [
            f"## {snap}, batch size {k}",
            "",
            f"{first['n_pool']} pool groups ({first['n_live']} with a gradient), {N_BATCHES} batches "
            f"({first['n_batches']} with a defined cosine).",
            "",
            "| weighting | cos | Δcos | 95% CI | p (Holm) | better | SNR | ΔSNR | 95% CI | p (Holm) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, r in block.items():
            out.append(
                f"| {name} | {r['cos']:.3f} | {_f(r['dcos'])} | {_ci(r['dcos_lo'], r['dcos_hi'])} | "
                f"{_p(r['dcos_p_holm'])} | {r['frac_better']:.2f} | {r['snr']:.3f} | {_f(r['dsnr'])} | "
                f"{_ci(r['dsnr_lo'], r['dsnr_hi'])} | {_p(r['dsnr_p_holm'])} |"
            )
        out.append("")
    return "\n".join(out)


def headline_markdown(summary: pd.DataFrame) -> str:
    """Δcos at the protocol's batch size: one row per headline weighting and the oracle, one
    column per snapshot ("Δcos [CI]")."""
    blocks = {snap: b for (snap, k), b in _records(summary).items() if k == PROTOCOL_BATCH}
    names = [n for n in (*HEADLINE, ORACLE) if all(n in b for b in blocks.values())]
    lines = ["| Δcos vs none, batch of 4 | " + " | ".join(blocks) + " |", "|---" * (len(blocks) + 1) + "|"]
    for n in names:
        cells = [f"{_f(b[n]['dcos'])} {_ci(b[n]['dcos_lo'], b[n]['dcos_hi'])}" for b in blocks.values()]
        lines.append(f"| {'**oracle ceiling**' if n == ORACLE else n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def reading(summary: pd.DataFrame) -> str:
    """The reading, generated from the summary (whichever way it falls)."""
    out = []
    for (snap, k), s in _records(summary).items():
        if k != PROTOCOL_BATCH:
            continue
        mods = [n for n in s if n not in ("none", ORACLE) and not n.endswith(SHUFFLED)]
        up = [n for n in mods if s[n]["dcos_p_holm"] < 0.05 and s[n]["dcos"] > 0]
        down = [n for n in mods if s[n]["dcos_p_holm"] < 0.05 and s[n]["dcos"] < 0]
        best = max(mods, key=lambda n: float(s[n]["dcos"]) if np.isfinite(s[n]["dcos"]) else -np.inf)
        o, none = s[ORACLE], s["none"]
        text = f"**{snap}** (batch size {k}, {none['n_pool']} pool groups, {none['n_live']} with a gradient): "
        if none["n_batches"] == 0:
            out.append(text + "no batch has a defined cosine (a group whose rewards are all equal has no gradient).")
            continue
        text += (
            f"equal weights reach cos {none['cos']:.3f} with the reference; the oracle ceiling adds "
            f"{_f(o['dcos'])} {_ci(o['dcos_lo'], o['dcos_hi'])}"
        )
        text += f" ({o['dcos'] / none['cos']:+.0%} of it). " if none["cos"] > 0 else ". "
        if up:
            text += f"After Holm, {', '.join(up)} point the update closer than equal weights. "
        else:
            text += "After Holm, no modulator points the update closer than equal weights. "
        if down:
            text += f"{', '.join(down)} point it further away. "
        b = s[best]
        share = b["dcos"] / o["dcos"] if o["dcos"] > 0 else float("nan")
        text += f"The best modulator, {best}, gains {_f(b['dcos'])} {_ci(b['dcos_lo'], b['dcos_hi'])}"
        text += f", {share:.0%} of the ceiling." if np.isfinite(share) else "."
        out.append(text)
    return "\n\n".join(out) + "\n"


def restat(out: Path, n_batches: int = N_BATCHES, n_boot: int = N_BOOT) -> None:
    """Rewrite ``out``'s batch frame, summary and tables from its snapshot frames."""
    out = Path(out)
    names = snapshots(out)
    if not names:
        raise FileNotFoundError(f"{out}/snapshots holds no finished snapshot (*.groups.parquet)")
    batches, summaries, groups = [], [], []
    for name in names:
        g, K = load_snapshot(out, name)
        b, s = snapshot_tables(name, g, K, n_batches, n_boot)
        batches.append(b)
        summaries.append(s)
        groups.append(g)
    cards = {n: _read(snapshot_paths(out, n)["card"], lambda p: json.loads(p.read_text())) for n in names}
    summary = pd.concat(summaries, ignore_index=True)
    settings: dict[str, Any] = dict(batch_sizes=list(BATCH_SIZES), n_batches=n_batches, n_boot=n_boot, level=LEVEL)
    undefined = summary[(summary["weighting"] == "none") & (summary["n_batches"] == 0)]
    if len(undefined):  # (snapshot, batch size) blocks whose statistics are all undefined (warned)
        settings["no_defined_cosine"] = [
            [str(n), int(k)] for n, k in zip(undefined["snapshot"], undefined["batch_size"])
        ]
    with staged_outputs():  # every table replaced together, or none
        write_frame(pd.concat(batches, ignore_index=True), out / "batches.parquet")
        write_frame(pd.concat(groups, ignore_index=True), out / "groups.parquet")
        write_frame(summary, out / "summary.parquet")
        write_text(out / "alignment.md", alignment_markdown(summary))
        write_text(out / "headline.md", headline_markdown(summary))
        write_text(out / "reading.md", reading(summary))
        card = {"restat": settings, "snapshots": cards}
        write_text(out / "card.json", json.dumps(card, indent=1, sort_keys=True) + "\n")
