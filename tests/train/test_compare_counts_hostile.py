"""Hostile counts and seeds for ``gcpo compare`` (and checkpoint folder names): a seed written with
a superscript digit passed ``str.isdigit`` and died in ``int()`` naming nothing; ``--workers 10^20``
passed its check, wrote the folder, evaluated the base policy and then died in the process pool.
Each is refused naming the flag or file, before anything is written."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")


def _cli(argv, capsys) -> tuple[int, str]:
    from helpers.cli_error import cli_outcome

    return cli_outcome(argv, capsys)


def _config(tmp_path, compare: str = "") -> str:
    path = tmp_path / "c.yaml"
    path.write_text(f"model: tiny:llama\ndataset: narrativeqa\nsteps: 1\n{compare}", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("seeds", ["²", "0,³", "١"])  # superscripts; an Arabic-Indic one (int() reads it)
def test_a_non_ascii_digit_seed_is_refused_by_the_flag(tmp_path, capsys, seeds):
    out = tmp_path / "cmp"
    rc, err = _cli(["compare", "--config", _config(tmp_path), "--output", str(out), "--seeds", seeds], capsys)
    assert rc == 2 and "--seeds" in err and "is not an integer seed >= 0 (digits 0-9)" in err, err
    assert not out.exists()


def test_a_non_ascii_digit_seed_in_a_config_is_refused_by_file_and_key(tmp_path, capsys):
    config = _config(tmp_path, 'compare:\n  seeds: ["²"]\n')
    out = tmp_path / "cmp"
    rc, err = _cli(["compare", "--config", config, "--output", str(out)], capsys)
    assert rc == 2 and f"{config}: compare.seeds" in err and "not an integer seed" in err, err
    assert not out.exists()


@pytest.mark.parametrize("workers", [str(10**20), "100000"])
def test_a_worker_count_beyond_the_cpus_is_refused_before_anything_is_written(tmp_path, capsys, workers):
    out = tmp_path / "cmp"
    rc, err = _cli(["compare", "--config", _config(tmp_path), "--output", str(out), "--workers", workers], capsys)
    assert rc == 2 and f"--workers {workers}: at most" in err, err
    assert not out.exists()


def test_the_api_refuses_a_worker_count_beyond_the_cpus(tmp_path):
    from gcpo_train.compare.workers import available_cpus, check_workers

    assert check_workers(available_cpus()) == available_cpus()
    with pytest.raises(ValueError, match="--workers 100000000000000000000: at most"):
        check_workers(10**20)


def test_a_checkpoint_folder_named_with_a_superscript_is_not_a_checkpoint(tmp_path):
    """step_² passed str.isdigit and failed in int() while the latest checkpoint was sought."""
    from gcpo_train.runfiles.checkpoint import complete_checkpoints

    for name in ("step_000002", "step_²"):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
        (tmp_path / "checkpoints" / name / "state.json").write_text("{}")
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_000002"]
