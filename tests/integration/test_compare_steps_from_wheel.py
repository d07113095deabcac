"""The comparison's user steps (``gcpo compare``, ``gcpo compare control``, ``table`` and
``publish``) run from a built wheel, outside the repository: a tiny comparison trained, its
no-passage control evaluated, its table printed and its results published, each by the installed
package alone. The wheel is built from a copy of the sources (pip wheel --no-deps, no network)
and installed with --target into a folder put first on PYTHONPATH, so the run imports the wheel's
gcpo, never the checkout's (asserted); its dependencies are the environment's."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.loop_setup import loop_config
from helpers.story_data import write_stories

pytest.importorskip("torch")
pytest.importorskip("peft")
pytestmark = pytest.mark.slow  # builds a wheel and trains a tiny comparison (about a minute on 2 cores)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel of the current sources, installed with --target: the folder to put on PYTHONPATH."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for package in ("gcpo_analysis", "gcpo_train"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index", "-w", str(root / "dist")],
        check=True,
        cwd=src,
    )
    (wheel,) = (root / "dist").glob("gcpo-*.whl")
    site = root / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], check=True)
    return site


def _gcpo(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gcpo_analysis", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def test_the_compare_steps_run_from_the_installed_wheel(installed, tmp_path):
    import yaml

    work = tmp_path / "elsewhere"  # no checkout around: the cwd holds only the user's files
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(installed)}
    where = subprocess.run(
        [sys.executable, "-c", "import gcpo_analysis, gcpo_train; print(gcpo_analysis.__file__, gcpo_train.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(Path(p).is_relative_to(installed) for p in where), where

    data = write_stories(work / "data")
    blank = write_stories(work / "blank", blank=True)
    config = loop_config(work, data_path=data, split_from_single=False, checkpoint_every=2, eval_max_new_tokens=4)
    config.pop("output_dir")
    (work / "tiny.yaml").write_text(yaml.safe_dump(config))
    run = _gcpo(
        installed, work, "compare", "--config", "tiny.yaml", "--output", "cmp", "--modulators", "none", "--seeds", "0"
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("\n") > 2 and (work / "cmp" / "runs" / "none").is_dir()
    # compare.json records the data by content
    spec = json.loads((work / "cmp" / "compare.json").read_text())
    assert set(spec["data"]) == {"train", "test"} and len(spec["data"]["test"]["sha256"]) == 64

    control = _gcpo(installed, work, "compare", "control", "cmp", blank, "--arms", "none", "--no_progress")
    assert control.returncode == 0, control.stderr[-2000:]
    assert (work / "cmp" / "nopassage").is_dir() and "no-passage evaluations" in control.stdout

    table = _gcpo(installed, work, "compare", "table", "cmp", "--header", "arm (tiny)")
    assert table.returncode == 0, table.stderr[-2000:]
    assert table.stdout.startswith("| arm (tiny) |") and "| none (GRPO) |" in table.stdout

    published = _gcpo(installed, work, "compare", "publish", "cmp", "published")
    assert published.returncode == 0, published.stderr[-2000:]
    assert (work / "published" / "runs" / "none" / "seed_0" / "done.json").is_file()
    assert not list((work / "published").rglob("checkpoints"))

    refused = _gcpo(installed, work, "compare", "publish", "cmp", "cmp/inside")
    assert refused.returncode == 2 and "or inside it" in refused.stderr and "Traceback" not in refused.stderr
