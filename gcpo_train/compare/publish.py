"""``gcpo compare publish SOURCE DEST``: copy what a ``gcpo compare`` folder has finished into a
folder meant for git (a comparison can be committed as its arm-seeds land, across sessions):

    gcpo compare publish runs/nqa_fp32_pilot figures/train_compare/nqa_fp32/confirmatory

What is copied: the comparison's record and report (compare.json, base/, results.parquet,
summary.md/csv, control.csv, coupling.csv, figures/, plan.md, gate.md, nopassage/, and any other
Markdown file at its top, such as a plan written with ``gcpo compare --plan --plan_file``) and, of every arm-seed run
with a ``done.json`` (finished and evaluated), its done.json, run.json, log.jsonl, eval/ and
rollouts/. Never copied: checkpoints (tens of MB a run; the no-passage control reads them in the
source folder), locks and owner files (``.gcpo*``), and unfinished runs (a half-trained run is
not a result).

The copied report describes exactly the copied runs, or nothing is copied: a report
(results.parquet) that holds evaluations of a run without a done.json (still training: its
numbers would be in the copy's report, its run not in the copy), or that lacks a finished run (a
report older than the runs), or a summary.csv whose seeds per arm are not the finished runs', is
refused naming the runs; publish once they finish, or after ``gcpo compare ... --report_only``.

The destination must be new or an earlier copy of the same comparison: its
compare.json equal in every field that defines the comparison (the config, steps, eval_every,
eval_n, split_seed, ... as ``Comparison._check_spec`` compares them), its arms and seeds among the
source's (a comparison grows, it never loses one); files of the destination that the source no
longer has are left. A finished run is copied only from the folder gcpo compare names it
(``runs/<arm folder>/seed_<s>``): a copy such as ``seed_0.bak`` or a folder of no arm is refused
by name (copied, it would be counted as a run). A symbolic link in what would be copied (it would
bring in what lies outside the comparison), or where the copy would write (it would write outside
the copy), is refused by name, as is a file where the copy needs a folder: every check is made
before the first write, so a refusal leaves the destination as it was. Each file is written to a
temporary file beside its place and renamed into it (``outputs.atomic_write``), so a file of the
destination hard-linked elsewhere (``cp -al``, a note linked in) is replaced, never written through.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gcpo_train.compare.layout import COMPARISON_FILES

TOP = (*COMPARISON_FILES, "plan.md")
TOP_FOLDERS = ("base", "figures", "nopassage")
RUN_FILES = ("done.json", "run.json", "log.jsonl")
RUN_FOLDERS = ("eval", "rollouts")


# compare.json's fields that do not define the comparison: the arms and seeds grow as runs are
# added (checked as sets below), the backend is in the config, common_random_numbers follows it
NOT_IDENTITY = ("modulators", "seeds", "backend", "common_random_numbers")


def _spec(folder: Path) -> dict:
    from gcpo_train.compare.record import read_record

    path = folder / "compare.json"
    try:
        return read_record(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: not a gcpo compare record ({type(e).__name__}: {e})") from None


def identity_differences(
    source: dict, dest: dict, names: tuple[str, str] = ("the copy", "the source"), either_older: bool = False
) -> list[str]:
    """The fields of compare.json, arms and seeds aside, in which ``dest``'s comparison is another
    than ``source``'s: two cards without differences trained every arm-seed with the same
    settings, data and evaluation. A field recorded only by later versions may be absent from
    ``dest`` (an earlier copy), or from either card with ``either_older``."""
    from gcpo_train.compare.run import RECORDED_SINCE_FP32_PROTOCOL

    old, new = dest.get("config", {}), source.get("config", {})
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    diffs = [f"config ({', '.join(keys)})"] if keys else []
    for field in sorted((set(source) | set(dest)) - {"config", *NOT_IDENTITY}):
        missing = field not in dest or (either_older and field not in source)
        if (field in RECORDED_SINCE_FP32_PROTOCOL or field == "data") and missing:
            continue
        if source.get(field) != dest.get(field):
            diffs.append(f"{field}: {dest.get(field)!r} in {names[0]} vs {source.get(field)!r} in {names[1]}")
    return diffs


def _differences(source: dict, dest: dict) -> list[str]:
    """What makes the destination's comparison another than the source's: a field of compare.json
    that differs (``identity_differences``), or an arm or seed of the destination that the source
    lacks. The config alone was compared: a comparison of other steps or eval_n with an equal
    config was copied over, leaving a mix of the two."""
    diffs = identity_differences(source, dest)
    for field, what in (("modulators", "arm"), ("seeds", "seed")):
        lost = [x for x in dest.get(field, []) if x not in source.get(field, [])]
        if lost:
            diffs.append(f"the copy's {what}(s) {lost} are not the source's")
    return diffs


def _skip(name: str) -> bool:
    return name.startswith(".gcpo") or name == "checkpoints"


def _plain(path: Path, where: str) -> None:
    """Refuse ``path`` when it is a symbolic link (whatever it points to, or nothing) or neither a
    regular file nor a folder: a link would copy from, or write to, a place outside the folders."""
    if path.is_symlink():
        why = {
            "source": "a link is not copied (it would bring in what lies outside the comparison)",
            "destination": "a link is never written through (it would write outside the copy)",
        }[where]
        raise SystemExit(
            f"{path} is a symbolic link (to {path.readlink()}) in the {where}: {why}; put the file or folder "
            "itself there, or remove the link. Nothing was written"
        )
    if path.exists() and not (path.is_file() or path.is_dir()):
        raise SystemExit(f"{path} is neither a regular file nor a folder, in the {where}: nothing was written")


def _tree(source: Path, rel: Path, entries: list[tuple[Path, bool]]) -> None:
    """Add folder ``source/rel`` and, depth first, everything in it but checkpoints and locks to
    ``entries`` as (path relative to ``source``, is a folder), refusing a link anywhere."""
    entries.append((rel, True))
    for child in sorted((source / rel).iterdir()):
        if _skip(child.name):
            continue
        _plain(child, "source")
        if child.is_dir():
            _tree(source, rel / child.name, entries)
        else:
            entries.append((rel / child.name, False))


def _entries(source: Path, rel: Path, files: tuple[str, ...], folders: tuple[str, ...]) -> list[tuple[Path, bool]]:
    """What is copied of ``source/rel``: its ``files`` and ``folders`` that exist, each checked."""
    entries: list[tuple[Path, bool]] = [(rel, True)]
    for name in files:
        _plain(source / rel / name, "source")
        if (source / rel / name).is_file():
            entries.append((rel / name, False))
    for name in folders:
        _plain(source / rel / name, "source")
        if (source / rel / name).is_dir():
            _tree(source, rel / name, entries)
    return entries


def _check_run_folder(run: Path, folders: list[str]) -> None:
    """A finished run in a folder gcpo compare names (``layout.arm_seed_folder``: ``folders`` are
    its arms' folder names), or refused by name."""
    from gcpo_train.compare.layout import SEED_FOLDER

    if SEED_FOLDER.fullmatch(run.name) is None or run.parent.name not in folders:
        raise SystemExit(
            f"{run} has a done.json but is not a run of the comparison (gcpo compare names a run's folder "
            f"runs/<arm>/seed_<s>, arms {', '.join(folders)}, e.g. seed_0): a copy there would be counted "
            f"as a run; move it out of {run.parent.parent}. Nothing was written"
        )


def _plan(source: Path, arms: list[str]) -> tuple[list[Path], list[tuple[Path, bool]]]:
    """The finished runs and every file and folder to copy (relative to ``source``, parents first),
    once each is known to be a plain file or folder of the comparison: no link is followed."""
    from gcpo_analysis.measures.shuffled import arm_folder_name
    from gcpo_train.compare.layout import finished_runs

    try:
        folders = [arm_folder_name(arm) for arm in arms]
    except ValueError as err:
        raise SystemExit(f"{source / 'compare.json'}: field 'modulators': {err}") from None
    # plans written by --plan --plan_file NAME.md (any name but the comparison's own files) go too
    notes = sorted(p.name for p in source.glob("*.md") if p.name not in TOP)
    entries = _entries(source, Path("."), (*TOP, *notes), TOP_FOLDERS)
    runs = []
    for run in finished_runs(source):
        _check_run_folder(run, folders)
        rel = run.relative_to(source)
        for part in reversed(rel.parents[:-1]):  # runs/, runs/<arm>/: a linked one is outside the comparison
            _plain(source / part, "source")
        _plain(run, "source")
        runs.append(rel)
        entries += [(rel.parent, True), *_entries(source, rel, RUN_FILES, RUN_FOLDERS)]
    return runs, entries


def check_report_matches_runs(source: Path, runs: list[Path]) -> None:
    """Refuse, naming the runs, a report of ``source`` that does not describe exactly its finished
    ``runs`` (what is copied): results.parquet with rows of a run that is not copied or without
    rows of one that is, or a summary.csv whose seeds per arm differ from the copied runs'."""
    import pandas as pd

    from gcpo_analysis.measures.shuffled import arm_folder_name

    results_path = source / "results.parquet"
    if not results_path.is_file():
        return  # no report of the runs to disagree with them
    try:
        results = pd.read_parquet(results_path, columns=["arm", "seed"]).drop_duplicates()
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(
            f"{results_path}: not a readable comparison results file ({err}); nothing was written"
        ) from None
    copied = {(run.parent.name, run.name) for run in runs}
    trained = results[results["arm"] != "base"]
    reported = {
        (arm_folder_name(str(a)), f"seed_{int(s)}"): (str(a), int(s)) for a, s in trained.itertuples(index=False)
    }
    unfinished = sorted(f"runs/{f}/{s}" for f, s in set(reported) - copied)
    unreported = sorted(f"runs/{f}/{s}" for f, s in copied - set(reported))
    advice = "publish once they finish (or after gcpo compare ... --report_only on the source); nothing was written"
    if unfinished:
        raise SystemExit(
            f"{results_path} holds evaluations of run(s) that have not finished (no done.json), which are not "
            f"copied: {', '.join(unfinished)}; the copy's report would hold numbers of runs it lacks. {advice}"
        )
    if unreported:
        raise SystemExit(
            f"{results_path} is older than the finished run(s) {', '.join(unreported)}: the copy's report would "
            f"leave them out; rerun gcpo compare ... --report_only on {source} first. Nothing was written"
        )
    summary = source / "summary.csv"
    if summary.is_file():
        table = pd.read_csv(summary)
        if {"arm", "seeds"} <= set(table.columns):
            counts = trained.groupby("arm")["seed"].nunique().to_dict()
            differ = [
                f"{arm}: {seeds} in summary.csv vs {counts.get(arm, 0)} finished"
                for arm, seeds in zip(table["arm"], table["seeds"])
                if seeds == seeds and int(seeds) != counts.get(arm, 0)
            ]
            if differ:
                raise SystemExit(
                    f"{summary} describes other runs than the finished ones ({'; '.join(differ)}): rerun gcpo "
                    f"compare ... --report_only on {source} first. Nothing was written"
                )


def _check_dest(dest: Path, entries: list[tuple[Path, bool]]) -> None:
    """Refuse, before anything is written, a destination where the copy would write through a link
    or meet a file where it needs a folder (or a folder where it needs a file)."""
    _plain(dest, "destination")
    # the destination, or where it would be made: the nearest path above it that is there
    there = next(p for p in [dest, *dest.absolute().parents] if p.exists() or p.is_symlink())
    if not there.is_dir():
        raise SystemExit(
            f"{there} is not a folder: a comparison is copied into a folder of its own; nothing was written"
        )
    seen = set()
    for rel, folder in entries:
        for part in [*reversed(rel.parents[:-1]), rel]:
            path = dest / part
            if path in seen:
                continue
            seen.add(path)
            _plain(path, "destination")
            if not path.exists():
                continue
            if (part != rel or folder) and not path.is_dir():
                raise SystemExit(f"{path} is not a folder but the copy puts one there: nothing was written")
            if part == rel and not folder and not path.is_file():
                raise SystemExit(f"{path} is not a file but the copy puts one there: nothing was written")


def publish(source: Path, dest: Path) -> list[Path]:
    """Copy ``source``'s finished results into ``dest``; the finished run folders copied. Every
    check (no link in what is copied or where it goes, the destination's kind, its comparison)
    is made before the first write, so a refusal leaves the destination as it was."""
    from gcpo_analysis.outputs import atomic_write

    source, dest = Path(source), Path(dest)
    spec = _spec(source)
    if dest.resolve() == source.resolve() or source.resolve() in dest.resolve().parents:
        raise SystemExit(f"{dest} is {source} or inside it: copy a comparison to a folder of its own")
    runs, entries = _plan(source, spec.get("modulators", []))
    check_report_matches_runs(source, [source / rel for rel in runs])
    _check_dest(dest, entries)
    if dest.exists() and any(dest.iterdir()):
        if not (dest / "compare.json").is_file():
            raise SystemExit(f"{dest} holds something other than a copy of {source}'s comparison: not written")
        diffs = _differences(spec, _spec(dest))
        if diffs:
            raise SystemExit(
                f"{dest} holds something other than a copy of {source}'s comparison ({'; '.join(diffs)}): "
                "not written; copy it to a folder of its own"
            )
    for rel, folder in entries:
        if folder:
            (dest / rel).mkdir(parents=True, exist_ok=True)
        else:  # a new file renamed into place: a hard link at dest / rel is replaced, not written through
            atomic_write(dest / rel, lambda tmp, rel=rel: shutil.copy2(source / rel, tmp, follow_symlinks=False))
    return [dest / rel for rel in runs]
