"""One safe writer: every output goes through a temporary created
fresh beside it (never through an existing path or symlink), replaced atomically; a block of
outputs is replaced together or not at all; numbered folders are claimed atomically; a re-analysis
and an export never replace a user's files."""

import json
import os
import threading

import pandas as pd
import pytest

from gcpo_analysis import outputs
from gcpo_analysis.cli import main
from gcpo_analysis.frames import write_frame, write_text


def test_score_never_writes_through_a_symlink_at_the_old_temporary_name(rollouts_file, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "g.parquet"
    for name in ("g.parquet.tmp", "g.meta.json.tmp"):  # the fixed names of the old writer
        (tmp_path / name).symlink_to(victim)
    assert main(["score", str(rollouts_file), "-o", str(out), "--measures", "rd"]) == 0
    assert victim.read_text() == "precious"
    assert len(pd.read_parquet(out)) == 3 and json.loads(out.with_suffix(".meta.json").read_text())
    assert not list(tmp_path.glob("*.gcpo-tmp"))


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "out.txt").symlink_to(victim)
    write_text(tmp_path / "out.txt", "new")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "out.txt").is_symlink() and (tmp_path / "out.txt").read_text() == "new"


def test_concurrent_writers_of_one_output_never_share_a_temporary(tmp_path):
    """Two writers of one Parquet file: each writes its own temporary, so the file is always one
    of theirs, whole (with one fixed temporary name it was unreadable in 4 of 4 trials)."""
    out = tmp_path / "g.parquet"
    frames = [pd.DataFrame({"query_id": [str(k)] * 2000, "x": range(2000)}) for k in range(2)]
    errors = []

    def write(df):
        try:
            for _ in range(10):
                write_frame(df, out)
        except Exception as err:  # noqa: BLE001 - collected for the assertion
            errors.append(err)

    threads = [threading.Thread(target=write, args=(df,)) for df in frames]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = pd.read_parquet(out)
    assert any(got.equals(df) for df in frames)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.parquet"]


def test_outputs_keep_the_mode_open_would_give(tmp_path):
    path = write_text(tmp_path / "a.txt", "x")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's 0600


def test_a_failed_block_leaves_the_previous_outputs_whole(tmp_path):
    write_text(tmp_path / "a.json", "old a")
    write_text(tmp_path / "b.json", "old b")
    with pytest.raises(OSError):
        with outputs.staged_outputs():
            write_text(tmp_path / "a.json", "new a")
            write_text(tmp_path / "b.json" / "under a file", "never")  # fails: b.json is a file
    assert (tmp_path / "a.json").read_text() == "old a"  # not one new file beside an old one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]
    with outputs.staged_outputs():
        write_text(tmp_path / "a.json", "new a")
        write_text(tmp_path / "b.json", "new b")
        assert (tmp_path / "a.json").read_text() == "old a"  # replaced at the end, together
    assert [(tmp_path / n).read_text() for n in ("a.json", "b.json")] == ["new a", "new b"]


def test_score_failing_after_its_frame_keeps_the_old_frame_and_sidecar(rollouts_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "g.parquet"
    assert main(["score", str(rollouts_file), "-o", str(out), "--measures", "rd"]) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("g.")}
    from gcpo_analysis import frames

    real = frames.write_text

    def full_disk(path, text):
        if str(path).endswith(".meta.json"):
            raise OSError(28, "No space left on device", str(path))
        return real(path, text)

    monkeypatch.setattr(frames, "write_text", full_disk)
    assert main(["score", str(rollouts_file), "-o", str(out), "--measures", "rd,se", "--judge", "lexical"]) == 2
    assert "No space left" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("g.")} == before
    assert not list(tmp_path.glob(".*gcpo-tmp"))


def test_folder_lock_refuses_a_second_writer(tmp_path):
    with outputs.folder_lock(tmp_path):
        with pytest.raises(ValueError, match="being written by another gcpo process"):
            with outputs.folder_lock(tmp_path):
                pass
    with outputs.folder_lock(tmp_path):  # released on exit
        pass


def test_numbered_folders_are_claimed_once(tmp_path):
    got = []

    def claim():
        got.append(outputs.claim_numbered_folder(tmp_path, "reanalysis"))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(p.name for p in got) == sorted(f"reanalysis-{n}" for n in range(1, 9))


def _rerun_source(tmp_path):
    src = tmp_path / "run"
    src.mkdir()
    rollouts = pd.DataFrame(
        {
            "query_id": [str(q) for q in range(6) for _ in range(3)],
            "rollout_id": [r for _ in range(6) for r in range(3)],
            "completion": list("abc" * 6),
            "answer": list("abb" * 6),
            "reward": [0.0, 1.0, 2.0] * 6,
        }
    )
    write_frame(rollouts, src / "rollouts.parquet")
    write_frame(
        pd.DataFrame({"query_id": [str(q) for q in range(6)], "G": 3, "grad_var": range(6)}), src / "groups.parquet"
    )
    return src


def test_reanalysis_into_a_users_folder_is_refused(tmp_path, capsys):
    src = _rerun_source(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.md").write_text("my notes")
    rc = main(["study", "--from-rollouts", str(src / "rollouts.parquet"), "--output", str(mine)])
    assert rc == 2
    assert "already holds summary.md" in capsys.readouterr().err
    assert (mine / "summary.md").read_text() == "my notes" and sorted(p.name for p in mine.iterdir()) == ["summary.md"]


def test_a_failed_reanalysis_leaves_no_claimed_folder(tmp_path, capsys):
    src = _rerun_source(tmp_path)
    rc = main(["study", "--from-rollouts", str(src / "rollouts.parquet"), "--reference", "nonesuch"])
    assert rc == 2
    assert not list(src.glob("reanalysis-*"))


def test_export_overwrite_refuses_a_file_the_export_did_not_write(tmp_path):
    from gcpo_train.runfiles.export import PROVENANCE, check_output

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    out = tmp_path / "export"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / PROVENANCE).write_text(json.dumps({"files": ["config.json"]}))
    assert check_output(out, ckpt, overwrite=True) == out.resolve()
    (out / "my_notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="my_notes.txt.*nothing was deleted"):
        check_output(out, ckpt, overwrite=True)
    assert (out / "my_notes.txt").read_text() == "mine"


def test_a_reanalysis_into_a_folder_being_written_is_refused(tmp_path, capsys):
    src = _rerun_source(tmp_path)
    busy = tmp_path / "busy"
    busy.mkdir()
    with outputs.folder_lock(busy):  # another re-analysis writes there
        rc = main(["study", "--from-rollouts", str(src / "rollouts.parquet"), "--output", str(busy)])
    assert rc == 2 and "--output" in capsys.readouterr().err
    assert busy.is_dir() and not any(busy.iterdir())  # not removed: this run did not create it
