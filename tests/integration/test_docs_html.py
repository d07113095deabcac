"""The docs site as a reader sees it: the HTML that `mkdocs build --strict` writes. Maths is
rendered markup (pymdownx.arithmatex), every notebook page carries its executed outputs (tables
and figures), every results page links its notebook and the home page links every result, and no
page names the tracker's issue numbers. CI builds the site before the tests and points
GCPO_DOCS_SITE at it; without it the site is built here once (minutes: the notebooks execute)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs extra is not installed")
pytest.importorskip("mkdocs_jupyter", reason="the docs extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {
    "01_gap_study": 4,  # figures shown inline: figure 1, heatmap, decomposition, size control
    "02_gap_proofs": 3,
    "03_training_comparison": 2,
    "04_update_alignment": 1,
    "05_training_gradvar": 2,
}
RESULTS = {  # results page -> the notebook it links
    "studies": "01_gap_study",
    "training": "03_training_comparison",
    "update_alignment": "04_update_alignment",
    "train_gradvar": "05_training_gradvar",
}

pytestmark = [pytest.mark.slow, pytest.mark.notebook]


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    built = os.environ.get("GCPO_DOCS_SITE")
    if built:
        path = Path(built)
        assert (path / "index.html").exists(), f"GCPO_DOCS_SITE={built} holds no built site (index.html)"
        return path
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def _page(site: Path, rel: str) -> str:
    return (site / rel / "index.html").read_text(encoding="utf-8")


def test_maths_is_rendered_markup(site):
    for rel in ("results/studies", "results/update_alignment", "conventions"):
        html = _page(site, rel)
        assert 'class="arithmatex"' in html, rel
        assert "\\(" in html or "\\[" in html, rel
        assert "$$" not in html and "Σ_{i≠j}" not in html, f"{rel}: maths left as source"


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_every_notebook_page_shows_its_outputs(site, name):
    html = _page(site, f"notebooks/{name}")
    assert html.count("jp-OutputArea-output") >= 2, f"{name}: no output cells (the notebook did not execute)"
    assert html.count("data:image/png") >= NOTEBOOKS[name], f"{name}: fewer figures than it draws"
    assert "Traceback" not in html and "jp-RenderedText" in html, name
    assert not re.findall(r'href="[^"]*\.md[#"]', html), f"{name}: a link to a .md file, not to its page"


def test_results_pages_link_their_notebooks_and_the_home_page_every_result(site):
    for page, notebook in RESULTS.items():
        assert f"notebooks/{notebook}/" in _page(site, f"results/{page}"), page
    home = _page(site, "")
    for page in (*RESULTS, "proofs"):
        assert f'href="results/{page}/"' in home, page
    assert "<th></th>" not in home, "the home page's table has an empty header row"


def test_no_page_names_an_issue_number(site):
    pattern = re.compile(r"issues? [0-9]+", re.IGNORECASE)
    found = {}
    for html in site.rglob("*.html"):
        hits = pattern.findall(re.sub(r"<[^>]+>", " ", html.read_text(encoding="utf-8")))
        if hits:
            found[html.relative_to(site).as_posix()] = sorted(set(hits))
    assert found == {}
