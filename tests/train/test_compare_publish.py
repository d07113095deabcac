"""gcpo compare publish (gcpo_train.compare.publish): a comparison's finished results go to git, without checkpoints,
locks or unfinished runs, and never over a folder that holds something else."""

import json
import re
import shutil
from pathlib import Path

import pytest

from gcpo_analysis.cli import main as gcpo
from gcpo_train.compare.publish import publish


def _comparison(folder: Path, lr: float = 1e-4) -> Path:
    (folder / "base").mkdir(parents=True)
    spec = {"config": {"learning_rate": lr}, "modulators": ["none", "bot_rd:shuffled"], "seeds": [0, 1], "steps": 10}
    (folder / "compare.json").write_text(json.dumps(spec))
    (folder / "summary.md").write_text("table\n")
    (folder / "base" / "all_seeds.json").write_text("{}")
    (folder / ".gcpo.lock").write_text("")
    for seed, finished in ((0, True), (1, False)):
        run = folder / "runs" / "bot_rd-shuffled" / f"seed_{seed}"
        for sub in ("eval", "rollouts", "checkpoints/step_000010"):
            (run / sub).mkdir(parents=True)
        (run / "log.jsonl").write_text("{}\n")
        (run / "eval" / "step_000010.json").write_text("{}")
        (run / "rollouts" / "step_000001.parquet").write_bytes(b"x")
        (run / "checkpoints" / "step_000010" / "trainable.pt").write_bytes(b"x" * 100)
        (run / ".gcpo.owner.json").write_text("{}")
        if finished:
            (run / "done.json").write_text("{}")
    return folder


def test_publish_copies_finished_runs_without_checkpoints_or_locks(tmp_path):
    src = _comparison(tmp_path / "src")
    dest = tmp_path / "figures" / "cmp"
    copied = publish(src, dest)
    assert copied == [dest / "runs" / "bot_rd-shuffled" / "seed_0"]
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == [
        "base/all_seeds.json",
        "compare.json",
        "runs/bot_rd-shuffled/seed_0/done.json",
        "runs/bot_rd-shuffled/seed_0/eval/step_000010.json",
        "runs/bot_rd-shuffled/seed_0/log.jsonl",
        "runs/bot_rd-shuffled/seed_0/rollouts/step_000001.parquet",
        "summary.md",
    ]
    (src / "summary.md").write_text("table, one more seed\n")
    publish(src, dest)  # an earlier copy of the same comparison is brought up to date
    assert (dest / "summary.md").read_text() == "table, one more seed\n"


def test_publish_never_writes_over_another_folder(tmp_path):
    src = _comparison(tmp_path / "src")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.md").write_text("mine")
    with pytest.raises(SystemExit, match="something other"):
        publish(src, other)
    assert sorted(p.name for p in other.iterdir()) == ["notes.md"]
    publish(_comparison(tmp_path / "a", lr=1e-3), tmp_path / "copy")
    with pytest.raises(SystemExit, match="something other"):  # another comparison's copy
        publish(src, tmp_path / "copy")
    for inside in (src, src / "copy"):
        with pytest.raises(SystemExit, match="or inside it"):
            publish(src, inside)
    with pytest.raises(SystemExit, match="not a gcpo compare record"):
        publish(tmp_path / "other", tmp_path / "new")


def _snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` (links as links, never followed) with its content or target."""
    if not folder.exists() and not folder.is_symlink():
        return {}
    if folder.is_symlink() or folder.is_file():
        return {".": str(folder.readlink()) if folder.is_symlink() else folder.read_text()}
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = "link " + str(p.readlink()) if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes().hex()
    return out


SOURCE_LINKS = [
    ("gate.md", "file"),  # a top-level file
    ("base/extra.json", "file"),  # a file inside a copied folder
    ("figures", "dir"),  # a whole copied folder
    ("base/sub", "dir"),  # a folder inside a copied folder
    ("base/gone.json", "dangling"),
    ("runs/bot_rd-shuffled/seed_0/eval", "dir"),  # a finished run's folder
    ("runs/bot_rd-shuffled/seed_0/eval/step_000020.json", "file"),
    ("runs/bot_rd-shuffled/seed_0/run.json", "file"),
    ("runs/bot_rd-shuffled/seed_0/rollouts/late.parquet", "dangling"),
    ("runs", "moved"),  # a finished run reached through a linked folder above it
    ("runs/bot_rd-shuffled", "moved"),
    ("runs/bot_rd-shuffled/seed_0", "moved"),
]


@pytest.mark.parametrize("rel, kind", SOURCE_LINKS)
@pytest.mark.parametrize("earlier_copy", [False, True])
def test_a_symlink_in_the_source_is_refused_before_anything_is_written(tmp_path, rel, kind, earlier_copy):
    """A link would copy what lies outside the comparison (or, dangling, stop the copy half-way):
    it is named and nothing is written, to a new destination or to an earlier copy."""
    src = _comparison(tmp_path / "src")
    dest = tmp_path / "dest"
    if earlier_copy:
        publish(src, dest)
        (src / "summary.md").write_text("a newer table\n")
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret").write_text("not the comparison's")
    (outside / "dir" / "secret").write_text("not the comparison's")
    link = src / rel
    target = {"file": outside / "secret", "dir": outside / "dir", "dangling": outside / "nothing"}.get(kind)
    if kind == "moved":
        target = Path(shutil.move(link, outside / "moved"))
    elif link.is_dir():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    before = _snapshot(dest)
    with pytest.raises(SystemExit, match=re.escape(str(link)) + ".*symbolic link"):
        publish(src, dest)
    assert _snapshot(dest) == before


def test_a_symlink_in_an_unfinished_run_or_checkpoint_is_not_copied_so_not_refused(tmp_path):
    src = _comparison(tmp_path / "src")
    (src / "runs/bot_rd-shuffled/seed_1/eval/x.json").symlink_to("/etc/hostname")
    (src / "runs/bot_rd-shuffled/seed_0/checkpoints/latest").symlink_to("step_000010")
    assert publish(src, tmp_path / "dest") == [tmp_path / "dest" / "runs" / "bot_rd-shuffled" / "seed_0"]
    assert not (tmp_path / "dest/runs/bot_rd-shuffled/seed_0/checkpoints").exists()


DEST_LINKS = [
    ("summary.md", "file"),
    ("base", "dir"),
    ("base/all_seeds.json", "file"),
    ("runs", "dir"),
    ("runs/bot_rd-shuffled/seed_0/log.jsonl", "file"),
    ("runs/bot_rd-shuffled/seed_0/eval/step_000010.json", "dangling"),
    (".", "dir"),  # the destination itself
]


@pytest.mark.parametrize("rel, kind", DEST_LINKS)
def test_a_symlink_in_the_destination_is_never_written_through(tmp_path, rel, kind):
    """An earlier copy in which a file or folder the copy writes is now a link (or the destination
    itself is one): the link is named, and nothing is written, in the copy or where it points."""
    src = _comparison(tmp_path / "src")
    dest = tmp_path / "dest"
    outside = tmp_path / "outside"
    if rel == ".":  # the destination links to an earlier copy
        publish(src, outside)
        link, target = dest, outside
    else:
        publish(src, dest)
        (outside / "dir").mkdir(parents=True)
        (outside / "secret").write_text("not the copy's")
        link = dest / rel
        shutil.rmtree(link) if link.is_dir() else link.unlink()
        target = {"file": outside / "secret", "dir": outside / "dir", "dangling": outside / "nothing"}[kind]
    link.symlink_to(target)
    (src / "summary.md").write_text("a newer table\n")
    before = (_snapshot(dest), _snapshot(outside))
    with pytest.raises(SystemExit, match=re.escape(str(link)) + ".*symbolic link"):
        publish(src, dest)
    assert (_snapshot(dest), _snapshot(outside)) == before


def test_a_destination_that_is_a_file_is_refused(tmp_path):
    src = _comparison(tmp_path / "src")
    dest = tmp_path / "notes.md"
    dest.write_text("mine")
    with pytest.raises(SystemExit, match=re.escape(str(dest)) + ".*not a folder"):
        publish(src, dest)
    with pytest.raises(SystemExit, match=re.escape(str(dest)) + ".*not a folder"):  # a file above it
        publish(src, dest / "cmp")
    assert dest.read_text() == "mine"


def test_a_file_where_the_copy_needs_a_folder_is_refused_before_anything_is_written(tmp_path):
    src = _comparison(tmp_path / "src")
    dest = tmp_path / "dest"
    publish(src, dest)
    (src / "summary.md").write_text("a newer table\n")
    shutil.rmtree(dest / "runs/bot_rd-shuffled/seed_0/eval")
    (dest / "runs/bot_rd-shuffled/seed_0/eval").write_text("a file")
    before = _snapshot(dest)
    with pytest.raises(SystemExit, match=re.escape(str(dest / "runs/bot_rd-shuffled/seed_0/eval")) + ".*not a folder"):
        publish(src, dest)
    assert _snapshot(dest) == before
    (dest / "runs/bot_rd-shuffled/seed_0/eval").unlink()
    (dest / "summary.md").unlink()
    (dest / "summary.md").mkdir()
    before = _snapshot(dest)
    with pytest.raises(SystemExit, match=re.escape(str(dest / "summary.md")) + ".*not a file"):
        publish(src, dest)
    assert _snapshot(dest) == before


def test_main_refuses_without_a_traceback(tmp_path, capsys):
    src = _comparison(tmp_path / "src")
    (src / "gate.md").symlink_to("/etc/hostname")
    assert gcpo(["compare", "publish", str(src), str(tmp_path / "dest")]) == 2
    assert str(src / "gate.md") in capsys.readouterr().err and not (tmp_path / "dest").exists()


def _respec(folder: Path, **fields) -> Path:
    spec = json.loads((folder / "compare.json").read_text())
    (folder / "compare.json").write_text(json.dumps({**spec, **fields}))
    return folder


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"steps": 20}, "steps: 10 in the copy vs 20"),
        ({"eval_n": 3}, "eval_n: None in the copy vs 3"),
        ({"eval_every": 5}, "eval_every"),
        ({"split_seed": 1}, "split_seed"),
        ({"seeds": [0]}, r"the copy's seed\(s\) \[1\] are not the source's"),
        ({"modulators": ["bot_rd:shuffled"]}, r"the copy's arm\(s\) \['none'\] are not the source's"),
    ],
)
def test_a_copy_of_another_comparison_with_the_same_config_is_refused(tmp_path, fields, named):
    """Only compare.json's config was compared: a comparison of other steps, eval_n or seeds with an
    equal config was copied over the earlier one, leaving a mix of the two comparisons' runs."""
    dest = tmp_path / "dest"
    publish(_comparison(tmp_path / "a"), dest)
    other = _respec(_comparison(tmp_path / "b"), **fields)
    (other / "summary.md").write_text("another comparison's table\n")
    before = _snapshot(dest)
    with pytest.raises(SystemExit, match="something other than a copy .*" + named):
        publish(other, dest)
    assert _snapshot(dest) == before


def test_an_earlier_copy_of_a_grown_comparison_is_brought_up_to_date(tmp_path):
    """More seeds and arms in the source, or a field recorded since the coupled fp32 protocol that the earlier copy
    lacks, are the same comparison."""
    dest = tmp_path / "dest"
    publish(_comparison(tmp_path / "a"), dest)
    grown = _respec(_comparison(tmp_path / "b"), seeds=[0, 1, 2], modulators=["none", "bot_rd:shuffled", "bot_rd"])
    _respec(grown, bf16_sampling=False)
    publish(grown, dest)
    assert json.loads((dest / "compare.json").read_text())["seeds"] == [0, 1, 2]


@pytest.mark.parametrize("folder", ["bot_rd-shuffled/seed_0.bak", "bot_rd-shuffled/seed_00", "old/seed_0"])
def test_a_finished_run_outside_the_folders_gcpo_compare_names_is_refused(tmp_path, folder):
    """A backup runs/<arm>/seed_0.bak with its done.json was published, and counted as a run."""
    src = _comparison(tmp_path / "src")
    shutil.copytree(src / "runs" / "bot_rd-shuffled" / "seed_0", src / "runs" / folder)
    with pytest.raises(SystemExit, match=re.escape(str(src / "runs" / folder)) + " has a done.json but is not a run"):
        publish(src, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_hard_link_in_the_destination_is_replaced_not_written_through(tmp_path):
    """dest/summary.md hard-linked to a note outside the copy had the note overwritten; a copy made
    with `cp -al SOURCE DEST` stopped half-way on shutil.SameFileError."""
    import os

    src = _comparison(tmp_path / "src")
    dest = tmp_path / "dest"
    publish(src, dest)
    notes = tmp_path / "my_notes.md"
    notes.write_text("my own notes\n")
    (dest / "summary.md").unlink()
    os.link(notes, dest / "summary.md")
    (src / "summary.md").write_text("a newer table\n")
    publish(src, dest)
    assert notes.read_text() == "my own notes\n" and (dest / "summary.md").read_text() == "a newer table\n"
    linked = tmp_path / "linked"
    shutil.copytree(src, linked, copy_function=os.link)  # cp -al: every file the source's own
    source_files = _snapshot(src)
    publish(src, linked)
    assert _snapshot(src) == source_files
    assert os.stat(linked / "compare.json").st_ino != os.stat(src / "compare.json").st_ino
    assert (linked / "summary.md").read_text() == "a newer table\n"


def test_a_plan_written_with_plan_file_is_copied_a_linked_one_refused(tmp_path):
    """gcpo compare --plan --plan_file closing_plan.md writes beside plan.md; the committed copy
    must carry it (the closing reading cites it). A linked one would bring in a file from outside."""
    src = _comparison(tmp_path / "src")
    (src / "plan.md").write_text("the plan\n")
    (src / "closing_plan.md").write_text("tau after\n")
    dest = tmp_path / "figures" / "cmp"
    publish(src, dest)
    assert (dest / "plan.md").read_text() == "the plan\n"
    assert (dest / "closing_plan.md").read_text() == "tau after\n"
    (tmp_path / "outside.md").write_text("not the comparison's\n")
    (src / "linked.md").symlink_to(tmp_path / "outside.md")
    with pytest.raises(SystemExit, match="linked.md"):
        publish(src, dest)
    assert not (dest / "linked.md").exists()


def _results(folder: Path, runs, summary_seeds=None) -> None:
    """results.parquet of the base and of ``runs`` ((arm, seed) pairs), and a summary.csv saying
    ``summary_seeds`` seeds for the arm (none when None)."""
    import pandas as pd

    rows = [dict(arm="base", seed=0, step=0, query_id="q0", score=1.0)]
    rows += [dict(arm=arm, seed=seed, step=10, query_id="q0", score=2.0) for arm, seed in runs]
    pd.DataFrame(rows).to_parquet(folder / "results.parquet")
    if summary_seeds is not None:
        pd.DataFrame({"arm": ["bot_rd:shuffled"], "seeds": [summary_seeds]}).to_csv(folder / "summary.csv", index=False)


def test_a_report_with_numbers_of_a_run_still_training_is_refused(tmp_path):
    # before: seed 1 (no done.json) was left out of the copy, its numbers stayed in the copied report
    src = _comparison(tmp_path / "src")
    _results(src, [("bot_rd:shuffled", 0), ("bot_rd:shuffled", 1)])
    with pytest.raises(
        SystemExit, match=r"evaluations of run\(s\) that have not finished .*runs/bot_rd-shuffled/seed_1"
    ):
        publish(src, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_report_older_than_the_finished_runs_is_refused(tmp_path):
    src = _comparison(tmp_path / "src")
    _results(src, [])
    with pytest.raises(SystemExit, match=r"older than the finished run\(s\) runs/bot_rd-shuffled/seed_0"):
        publish(src, tmp_path / "dest")
    _results(src, [("bot_rd:shuffled", 0)], summary_seeds=2)
    with pytest.raises(SystemExit, match=r"summary.csv describes other runs .*bot_rd:shuffled: 2 in summary.csv vs 1"):
        publish(src, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_report_of_exactly_the_finished_runs_is_copied(tmp_path):
    src = _comparison(tmp_path / "src")
    _results(src, [("bot_rd:shuffled", 0)], summary_seeds=1)
    assert publish(src, tmp_path / "dest") == [tmp_path / "dest" / "runs" / "bot_rd-shuffled" / "seed_0"]
    assert (tmp_path / "dest" / "results.parquet").read_bytes() == (src / "results.parquet").read_bytes()


def test_an_earlier_copy_without_the_data_record_is_still_the_same_comparison(tmp_path):
    src = _comparison(tmp_path / "src")
    publish(src, tmp_path / "dest")
    _respec(src, data={"test": {"file": "data/test.jsonl", "sha256": "ab" * 32}})
    publish(src, tmp_path / "dest")  # the source recorded its data since; the copy had no record
    _respec(tmp_path / "dest", data={"test": {"file": "data/test.jsonl", "sha256": "cd" * 32}})
    with pytest.raises(SystemExit, match="data:"):
        publish(src, tmp_path / "dest")
