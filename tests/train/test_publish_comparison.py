"""scripts/publish_comparison.py: a comparison's finished results go to git, without checkpoints,
locks or unfinished runs, and never over a folder that holds something else."""

import json
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
publish = runpy.run_path(str(ROOT / "scripts" / "publish_comparison.py"))["publish"]


def _comparison(folder: Path, lr: float = 1e-4) -> Path:
    (folder / "base").mkdir(parents=True)
    (folder / "compare.json").write_text(json.dumps({"config": {"learning_rate": lr}, "modulators": ["none"]}))
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
