"""The docs site's generated pages (docs/hooks.py): every config field reaches the configuration
page with its default and help, a field without help stops the build, nested settings are listed
field by field, and the CLI page has a section per subcommand. The whole site is built by
`mkdocs build --strict` in .ci/run."""

import dataclasses
import importlib
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs extra is not installed")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("gcpo_docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclasses.dataclass
class _Inner:
    a: int = dataclasses.field(default=1, metadata={"help": "inner a"})


@dataclasses.dataclass
class _Outer:
    x: float = dataclasses.field(default=0.5, metadata={"help": "outer x"})
    inner: _Inner = dataclasses.field(default_factory=_Inner, metadata={"help": "nested"})
    s: str = dataclasses.field(default="r", metadata={"help": "a | in help"})


@dataclasses.dataclass
class _NoHelp:
    y: int = 3


def test_field_table_lists_nested_settings_and_escapes_pipes(hooks):
    assert hooks.field_table(_Outer).splitlines() == [
        "| field | type | default | help |",
        "|---|---|---|---|",
        "| `x` | `float` | `0.5` | outer x |",
        "| `inner.a` | `int` | `1` | inner a |",
        "| `s` | `str` | `'r'` | a \\| in help |",
    ]


def test_a_field_without_help_stops_the_build(hooks):
    with pytest.raises(ValueError, match=r"_NoHelp.y has no metadata\['help'\]"):
        hooks.field_table(_NoHelp)


@pytest.mark.parametrize("where", ["gcpo_train.config:TrainConfig", "gcpo_analysis.study.config:StudyConfig"])
def test_every_config_field_is_on_the_page_with_its_default(hooks, where):
    module, name = where.split(":")
    cls = getattr(importlib.import_module(module), name)
    rows = {r.split("|")[1].strip(): r for r in hooks.field_table(cls).splitlines()[2:]}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hooks._default_value(f)):
            continue  # listed field by field (test above)
        assert f"`{f.name}`" in rows, f.name
        assert f.metadata["help"].split()[0] in rows[f"`{f.name}`"], f.name


def test_cli_page_has_every_subcommand(hooks):
    from gcpo_analysis.cli import SUBCOMMANDS

    page = hooks.cli_page()
    for name in SUBCOMMANDS:
        assert f"## `gcpo {name}`" in page and f"usage: gcpo {name}" in page, name
    assert "unavailable" not in page


def test_readme_links_point_at_files():
    """README.md is read on the forge, outside the site: its relative links must name committed files."""
    import re

    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local, "the README links no page"
    assert [link for link in local if not (ROOT / link).exists()] == []


# the tracker word, spelt in two parts so that this file itself cites no tracker number
ISSUE = "iss" + "ue"


@pytest.mark.parametrize(
    "text, shown",
    [
        (f"What V is made of ({ISSUE} 26; our addition). V", "What V is made of (our addition). V"),
        (f"the learning gate ({ISSUE} 25), and every setting", "the learning gate, and every setting"),
        (f"the registry ({ISSUE} 28 item 4, {ISSUE} 27 item 2): one", "the registry: one"),
        (f"(or `backend: trl`; {ISSUE} 25, item 4): each", "(or `backend: trl`): each"),
        (f"(Dr. GRPO;\n   {ISSUE} 25's pilots); 'dr'", "(Dr. GRPO;\n   the pilots); 'dr'"),
        (f"{ISSUE.title()} 35's pilot finished", "The pilot finished"),
        (f'"where": "{ISSUE} 35; torch.optim.AdamW"', '"where": "torch.optim.AdamW"'),
        ("an issue with 3 seeds", "an issue with 3 seeds"),
    ],
)
def test_the_site_drops_the_trackers_issue_numbers_from_included_files(hooks, text, shown):
    assert hooks.drop_issue_references(text) == shown
