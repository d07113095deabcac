"""`gcpo study --restat`: the issue-26 covariates and tables, the flags it takes and refuses, and
byte-for-byte reproduction of a folder's tables (synthetic, and every committed study)."""

import json
import os
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest
from helpers.study_folder import study_folder
from helpers.tables import same_file

from gcpo_analysis.cli import main
from gcpo_analysis.gradvar import gradient_variance
from gcpo_analysis.measures.advantages import grpo_advantages
from gcpo_analysis.study.covariates import group_covariates
from gcpo_analysis.study.from_training import is_training_folder, restat_training
from gcpo_analysis.study.output import restat

ROOT = Path(__file__).resolve().parents[3]
MEASURES = ["token_entropy", "se", "bot", "rd"]


def _folder(tmp_path, n=30, G=4, cap=6, seed=0):
    return study_folder(tmp_path, MEASURES, n=n, G=G, cap=cap, seed=seed)


def _tables(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted((folder / "tables").rglob("*")) if p.is_file()}


def test_covariates_by_hand(tmp_path):
    folder = _folder(tmp_path, n=3)
    r = pd.read_parquet(folder / "rollouts.parquet")
    from gcpo_analysis.study.collect import grams_by_query

    K = grams_by_query(pd.read_parquet(folder / "grams.parquet"))
    cov = group_covariates(r, K, 6).set_index("query_id")
    g0 = r[r.query_id == "q0"]
    assert cov.loc["q0", "n_tokens_mean"] == g0.n_tokens.mean()
    assert cov.loc["q0", "cap_share"] == (g0.n_tokens == 6).mean()
    a = grpo_advantages(g0.reward.to_numpy())
    assert cov.loc["q0", "grad_var_norm"] + cov.loc["q0", "grad_var_cross"] == pytest.approx(
        gradient_variance(K["q0"], a)
    )
    with pytest.raises(ValueError, match="'q0' has no Gram"):
        group_covariates(r, {}, 6)


@pytest.mark.slow
def test_restat_twice_is_byte_identical_and_takes_its_three_flags(tmp_path, capsys):
    folder = _folder(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["study", "--restat", str(folder), "--n-boot", "30", "--trim", "0.2", "--measures", "se,bot"]) == 0
        first = _tables(folder)
        assert main(["study", "--restat", str(folder)]) == 0  # its own saved settings: the overrides stick
    assert _tables(folder) == first
    saved = json.loads((folder / "tables" / "gap_study.json").read_text())["settings"]
    assert saved["n_boot"] == 30 and saved["trim"] == 0.2 and saved["measures"] == ["se", "bot"]
    card = json.loads((folder / "run_card.json").read_text())
    assert card["trim_note"]["n_removed"] == 6
    v = pd.read_csv(folder / "tables" / "v_parts.csv")
    assert set(v["frame"]) == {"trimmed", "untrimmed"}
    assert (folder / "tables" / "untrimmed" / "spearman.csv").exists()
    assert len(pd.read_csv(folder / "tables" / "untrimmed" / "spearman.csv")) == 2
    capsys.readouterr()
    assert main(["study", "--restat", str(folder), "--model", "x", "--seed", "3"]) != 0
    err = capsys.readouterr().err
    assert "--model" in err and "--seed" in err and "--trim" in err


# Every committed study folder (a folder of figures/ with tables/), found, not listed: a study added
# later, or one that gains grams.parquet and the embeddings sidecar (cpu_large), is covered as it is.
STUDIES = sorted(p.name for p in (ROOT / "figures").iterdir() if (p / "tables").is_dir())
# The only files under tables/ that --restat does not write: inputs it reads, each with its writer.
INPUTS = {
    "gram_recompute_rollouts.csv": "scripts/recompute_grams.py: its per-rollout check of the rebuilt tokens "
    "(--restat reads it for the lipschitz_exact_tokens subset)",
    "gram_recompute_groups.csv": "scripts/recompute_grams.py: the rebuilt Grams' per-group check against the run",
    "gram_recompute_summary.json": "scripts/recompute_grams.py: the summary of that rebuild",
}


@pytest.fixture(scope="module", params=STUDIES)
def restated(request, tmp_path_factory):
    """(committed folder, its copy after one --restat): one re-derivation per study and session,
    which every test below compares against."""
    src = ROOT / "figures" / request.param
    folder = tmp_path_factory.mktemp("restat") / request.param
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("figures"))
    # Every table goes but the inputs, so that what is there afterwards was written by --restat.
    # tables/gap_study.json stays: --restat reads a study's settings from it; its mtime set to 0
    # shows it rewritten.
    for path in (folder / "tables").rglob("*"):
        if path.is_file() and path.name not in INPUTS:
            if path.relative_to(folder).as_posix() == "tables/gap_study.json":
                os.utime(path, (0, 0))
            else:
                path.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # what `gcpo study --restat FOLDER` runs (the CLI: test_restat_twice_...), without the
        # figures, which are not compared
        if is_training_folder(folder):
            restat_training(folder, figures=False)
        else:
            restat(folder, figures=False)
    return src, folder


def test_studies_are_found():
    assert {"default_study", "cpu_math", "cpu_large", "train_gradvar"} <= set(STUDIES)


@pytest.mark.slow
def test_restat_reproduces_every_committed_table(restated):
    """The committed tables are what --restat writes from the committed files: byte for byte, CSV
    tables up to a last-digit rounding on another CPU (``helpers.tables``)."""
    src, folder = restated
    committed, again = _tables(src), _tables(folder)
    differ = [
        str(name)
        for name, blob in committed.items()
        if name.name not in INPUTS and (again.get(name) is None or not same_file(name, again[name], blob))
    ]
    assert not differ, f"{src.name}: --restat writes another table (or nothing) for {differ}"


@pytest.mark.slow
def test_every_committed_table_has_a_generator(restated):
    """Every file under a committed study's tables/ is written by --restat, or is an input named in
    INPUTS with its writer; and --restat writes no table that is not committed."""
    src, folder = restated
    committed, again = set(_tables(src)), set(_tables(folder))
    orphans = sorted(str(n) for n in committed - again if n.name not in INPUTS)
    assert not orphans, f"{src.name}: no generator writes {orphans}; regenerate them or name them in INPUTS"
    uncommitted = sorted(str(n) for n in again - committed)
    assert not uncommitted, f"{src.name}: --restat writes {uncommitted}, which are not committed"
    settings = folder / "tables" / "gap_study.json"
    assert not settings.exists() or settings.stat().st_mtime > 0, "tables/gap_study.json was not rewritten"
