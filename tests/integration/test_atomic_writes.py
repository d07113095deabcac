"""Every output goes through gcpo_analysis.frames' atomic writers (write_frame, write_text,
write_json, write_figure): a temporary file renamed into place, so a crash never leaves half a
file. This test reads the source of both packages for any other way to write a file."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# .to_csv() / .to_csv(index=False) return the text (then written by write_text); a first
# positional argument is a path
WRITES = re.compile(
    r"\.write_text\(|\.write_bytes\(|\.to_csv\((?!\)|\w+=)|\.to_parquet\(|savefig\(|os\.replace\("
    r"|\.replace\(tmp|open\([^)]*[\"'][wax]"
)
# (file, what the line holds): the writes that are atomic another way, each with its reason
ALLOWED = {
    # a checkpoint / an exported model is written into a temporary folder that os.replace moves
    # into place as a whole (the folder is the atomic unit)
    ("gcpo_train/runfiles/checkpoint.py", "os.replace(tmp, final)"),
    ("gcpo_train/runfiles/checkpoint.py", '(tmp / "rng.json").write_text('),
    ("gcpo_train/runfiles/checkpoint.py", '(tmp / "config.json").write_text('),
    ("gcpo_train/runfiles/checkpoint.py", '(tmp / "state.json").write_text('),
    ("gcpo_train/runfiles/export.py", "(tmp / PROVENANCE).write_text("),
    ("gcpo_train/runfiles/export.py", "os.replace(tmp, out)"),
    ("gcpo_train/runfiles/export.py", "os.replace(out, old / out.name)"),
    # run_folder moves existing files aside and back (resume / overwrite); nothing is written
    ("gcpo_train/runfiles/run_folder.py", "os.replace(p, aside / p.name)"),
    ("gcpo_train/runfiles/run_folder.py", "os.replace(p, self.out / p.name)"),
    # a snapshot's gradient file is created once (exclusive, sparse) and its rows written in place;
    # a row counts as done only when its part JSON (written atomically) names it: gcpo_train.align.run
    ("gcpo_train/align/rows.py", 'with open(path, "xb") as f:'),
    # the training log is appended one JSON line per step (a partial last line is dropped on read:
    # runlog.read_log); rewriting it atomically each step would be quadratic
    ("gcpo_train/loop/trainer.py", 'with open(self.out / "log.jsonl", "a"'),
    ("gcpo_train/compare/trl_arm.py", 'with open(out / "log.jsonl", "a"'),  # the same log, from TRL's logs
    # an empty lock file held with flock while a snapshot is finished: nothing is written to it
    ("gcpo_train/align/run.py", 'with open(work / "finish.lock", "a") as lock:'),
}


def _writes():
    for path in sorted([*ROOT.glob("gcpo_analysis/**/*.py"), *ROOT.glob("gcpo_train/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("gcpo_analysis/frames/files.py", "gcpo_analysis/outputs.py"):  # the writers themselves
            continue
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if WRITES.search(line):
                yield rel, k, line.strip()


def test_every_output_goes_through_the_atomic_writers():
    found = list(_writes())
    unexplained = [
        (rel, k, line) for rel, k, line in found if not any(rel == f and what in line for f, what in ALLOWED)
    ]
    assert not unexplained, "write through gcpo_analysis.frames.write_* instead:\n" + "\n".join(
        f"{rel}:{k}: {line}" for rel, k, line in unexplained
    )
    # the allow-list names lines that exist (a stale entry would hide nothing and mislead)
    for f, what in ALLOWED:
        assert any(rel == f and what in line for rel, _, line in found), (f, what)


def test_write_json_and_write_figure_are_atomic(tmp_path, monkeypatch):
    import json
    import os

    from gcpo_analysis import frames

    out = frames.write_json(tmp_path / "a" / "card.json", {"x": 1.5}, newline=True)
    assert out.read_text() == json.dumps({"x": 1.5}, indent=2) + "\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["card.json"]  # no temporary left

    plt = pytest.importorskip("matplotlib.pyplot")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = frames.write_figure(fig, tmp_path / "fig.png", dpi=50)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    frames.write_figure(fig, tmp_path / "fig.svg")
    assert b"<svg" in (tmp_path / "fig.svg").read_bytes()[:1000]

    def fail(src, dst):  # the rename fails: the old file stays whole, no temporary is left
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        frames.write_json(out, {"x": 2})
    assert json.loads(out.read_text()) == {"x": 1.5}
    assert sorted(p.name for p in out.parent.iterdir()) == ["card.json"]
    plt.close(fig)
