"""A plug-in reaches every door (issue 37 item 3): a toy package on ``sys.path`` with entry-point
metadata (``toyplug-0.0.dist-info``: METADATA and ``entry_points.txt`` in the group
``gcpo.plugins``), as ``pip install`` would leave it, is loaded when `gcpo` starts; its measure
and modulator are then named on the command line of `gcpo score`, `gcpo study --restat` and
`gcpo train` (one step on tiny:llama), each run as a subprocess. The same package without the
metadata reaches them through ``--plugin MODULE`` and ``GCPO_PLUGINS``; without any of the three
the names are refused. A plug-in that fails to load is one error naming it and its entry point.

The toy's modules are tests/helpers/toy_measure.py and toy_modulator.py, copied as they are.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.study_folder import study_folder

ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "tests" / "helpers"
EXAMPLE = ROOT / "examples" / "rollouts_small.jsonl"

DEFAULTED = '''"""A measure the study compares by default (default=True)."""
import numpy as np

from gcpo_analysis.measures.registry import register_measure


@register_measure("toy_mean", label="Mean", rewards=True, default=True, source="toy: the mean reward")
def toy_mean_values(groups, r_min, r_max):
    return (np.stack([g.rewards for g in groups]).mean(axis=1) - r_min) / (r_max - r_min)
'''


def _site(tmp_path: Path, entry_points: str | None) -> Path:
    """tmp_path/site holding the package toyplug, and its dist-info when ``entry_points`` is given."""
    site = tmp_path / "site"
    pkg = site / "toyplug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""A toy gcpo plug-in."""\n')
    (pkg / "measure.py").write_text((HELPERS / "toy_measure.py").read_text())
    (pkg / "modulator.py").write_text((HELPERS / "toy_modulator.py").read_text())
    (pkg / "defaulted.py").write_text(DEFAULTED)
    (pkg / "broken.py").write_text('raise ImportError("toyplug.broken needs the package frobnicate")\n')
    if entry_points is not None:
        info = site / "toyplug-0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 0.0\n")
        (info / "entry_points.txt").write_text("[gcpo.plugins]\n" + entry_points)
    return site


INSTALLED = "measure = toyplug.measure\nmodulator = toyplug.modulator\ndefaulted = toyplug.defaulted\n"


def _gcpo(site: Path, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    paths = [str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]
    environ = {k: v for k, v in os.environ.items() if k != "GCPO_PLUGINS"}
    environ.update(PYTHONPATH=os.pathsep.join(p for p in paths if p), OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "gcpo_analysis", *map(str, args)],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _score(site, tmp_path, *flags, env=None):
    out = tmp_path / "groups.parquet"
    result = _gcpo(site, *flags, "score", EXAMPLE, "-o", out, "--measures", "toy_range,rd", "--r-max", "2", env=env)
    return result, out


def _expected_range() -> np.ndarray:
    rewards = pd.read_json(EXAMPLE, lines=True).groupby("query_id", sort=False)["reward"]
    return ((rewards.max() - rewards.min()) / 2.0).to_numpy()


def _check_score(out: Path) -> None:
    groups = pd.read_parquet(out)
    np.testing.assert_allclose(groups["toy_range"].to_numpy(), _expected_range())


def _restat(site, tmp_path, *flags, env=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    folder = study_folder(tmp_path, ["toy_range", "bot"])
    _ok(_gcpo(site, *flags, "study", "--restat", folder, "--measures", "toy_range,bot", env=env))
    saved = json.loads((folder / "tables" / "gap_study.json").read_text())
    assert saved["settings"]["measures"] == ["toy_range", "bot"]
    assert "Range" in (folder / "tables" / "spearman_grad_var.md").read_text()  # the plug-in's label in the tables
    assert "toy_range" in (folder / "summary.md").read_text()


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "nqa.jsonl"
    records = [
        {"id": f"d{i}", "question": f"who is the {w} ?", "passage": f"the {w} had a son .", "answer": [w]}
        for i, w in enumerate(["king", "queen", "man", "woman"])
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    return data


def _train(site, tmp_path, *flags, env=None) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "train"
    _ok(
        _gcpo(
            site,
            *flags,
            "train",
            "--model",
            "tiny:llama",
            "--data_path",
            _data(tmp_path),
            "--split_from_single",
            "--train_frac",
            "0.5",
            "--modulator",
            "toy_half",
            "--group_size",
            "2",
            "--queries_per_step",
            "1",
            "--steps",
            "1",
            "--max_new_tokens",
            "3",
            "--max_context_tokens",
            "8",
            "--use_lora",
            "false",
            "--output_dir",
            out,
            "--progress",
            "false",
            "--device",
            "cpu",
            "--checkpoint_every",
            "0",
            "--save_rollouts",
            "false",
            env=env,
        )
    )
    (row,) = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return row


@pytest.mark.slow
def test_an_installed_plugin_reaches_score_study_and_train(tmp_path):
    site = _site(tmp_path, INSTALLED)
    result, out = _score(site, tmp_path)
    _ok(result)
    _check_score(out)
    _restat(site, tmp_path / "study")
    pytest.importorskip("torch")
    row = _train(site, tmp_path)
    assert row["step"] == 1 and row["w_toy_half"] == 0.5  # the plug-in's weight, logged
    help_text = _ok(_gcpo(site, "study", "--help")).stdout  # the choices of --reference
    assert "toy_mean" in help_text and "toy_range" in help_text


def test_a_default_measure_of_a_plugin_is_a_default(tmp_path):
    """What docs/guides/extending.md says of default=True: the study's, score_groups', gap_study's
    and `gcpo score`'s defaults are read from the registry when used, so a later registration counts."""
    import importlib

    from gcpo_analysis.measures.registry import MEASURE_REGISTRY, default_measures, score_cli_measures
    from gcpo_analysis.study.config import StudyConfig

    before = default_measures()
    assert "toy_mean" not in before and StudyConfig().measures == ",".join(before)
    sys.path.insert(0, str(_site(tmp_path, None)))
    try:
        importlib.import_module("toyplug.defaulted")
        assert default_measures() == (*before, "toy_mean")
        assert score_cli_measures()[-1] == "toy_mean"
        assert StudyConfig().measures.split(",")[-1] == "toy_mean"
        assert StudyConfig(measures="bot").measures == "bot"
    finally:
        sys.path.remove(str(tmp_path / "site"))
        MEASURE_REGISTRY.pop("toy_mean")
        for name in [m for m in sys.modules if m.startswith("toyplug")]:
            del sys.modules[name]
    assert default_measures() == before


@pytest.mark.slow
def test_plugin_flag_and_environment_variable(tmp_path):
    site = _site(tmp_path, None)  # no metadata: nothing loads it unless named
    result, _ = _score(site, tmp_path / "none")
    assert result.returncode == 2 and "unknown measure(s) ['toy_range']" in result.stderr
    for flags in (["--plugin", "toyplug.measure"], ["--plugin=toyplug.measure"]):  # before the subcommand
        (tmp_path / "a").mkdir(exist_ok=True)
        result, out = _score(site, tmp_path / "a", *flags)
        _ok(result)
        _check_score(out)
    # after the subcommand, as any of its flags
    out = tmp_path / "after.parquet"
    args = ["score", EXAMPLE, "-o", out, "--plugin", "toyplug.measure", "--measures", "toy_range", "--r-max", "2"]
    _ok(_gcpo(site, *args))
    np.testing.assert_allclose(pd.read_parquet(out)["toy_range"].to_numpy(), _expected_range())
    env = {"GCPO_PLUGINS": " toyplug.measure, toyplug.modulator "}
    (tmp_path / "b").mkdir()
    result, out = _score(site, tmp_path / "b", env=env)
    _ok(result)
    _check_score(out)
    _restat(site, tmp_path / "study", env=env)
    pytest.importorskip("torch")
    assert _train(site, tmp_path, env=env)["w_toy_half"] == 0.5
    assert _train(site, tmp_path / "flag", "--plugin", "toyplug.modulator")["w_toy_half"] == 0.5


def test_a_plugin_that_fails_to_load_is_named(tmp_path):
    site = _site(tmp_path, INSTALLED + "broken = toyplug.broken\n")
    result = _gcpo(site, "proofs", "--help")
    assert result.returncode == 2
    assert (
        "plug-in 'broken' (entry point gcpo.plugins: broken = toyplug.broken of toyplug 0.0) failed to load: "
        "ImportError: toyplug.broken needs the package frobnicate" in result.stderr
    )
    result = _gcpo(_site(tmp_path / "plain", None), "--plugin", "toyplug.nothere", "proofs", "--help")
    assert result.returncode == 2
    assert "plug-in 'toyplug.nothere' (--plugin) failed to load: ModuleNotFoundError" in result.stderr
    env = {"GCPO_PLUGINS": "toyplug.broken"}
    result = _gcpo(_site(tmp_path / "env", None), "proofs", "--help", env=env)
    assert "plug-in 'toyplug.broken' (environment variable GCPO_PLUGINS) failed to load: ImportError" in result.stderr


@pytest.mark.parametrize(
    ("body", "raised"),
    [("import sys\nsys.exit(0)\n", "SystemExit: 0"), ("raise KeyboardInterrupt\n", "KeyboardInterrupt")],
)
def test_a_plugin_that_exits_or_interrupts_its_import_is_a_failed_load(tmp_path, body, raised):
    """sys.exit(0) in a plug-in's import made `gcpo` exit 0 with nothing done and nothing said."""
    site = _site(tmp_path, INSTALLED + "quitter = toyplug.quitter\n")
    (site / "toyplug" / "quitter.py").write_text(body)
    result = _gcpo(site, "proofs", "--help")
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert (
        "plug-in 'quitter' (entry point gcpo.plugins: quitter = toyplug.quitter of toyplug 0.0) failed to load: "
        f"{raised}" in result.stderr
    )
    plain = _site(tmp_path / "plain", None)  # no metadata: named by the flag only
    (plain / "toyplug" / "quitter.py").write_text(body)
    result = _gcpo(plain, "--plugin", "toyplug.quitter", "proofs", "--help")
    assert result.returncode == 2 and f"plug-in 'toyplug.quitter' (--plugin) failed to load: {raised}" in result.stderr
