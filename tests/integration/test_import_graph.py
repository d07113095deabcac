"""The import graph of gcpo_analysis and gcpo_train: no circle, and the layer contract of
docs/architecture.md ("Start here").

Layers, low to high: base (vocab, frames, models, the Knob type, ...) < rewards < measures, gradvar
< settings (the shared knobs' declarations) < stats < study < cli. A module imports only from its
own layer or lower ones, counting module-level and function-level imports alike (a lazy import
inside a function still ties two modules), and an ``importlib.import_module("a.literal")`` too.
No import circle at all, among any modules of both packages.
gcpo_analysis never imports gcpo_train: the one edge is the ``SUBCOMMANDS`` table of
gcpo_analysis/cli.py, lazy "module:function" strings. gcpo_train uses only public gcpo_analysis
names (no ``_private`` name or module, no deprecated flat shim module).

The checker runs on a graph parsed from source with ``ast``; the tests at the bottom feed it
made-up graphs with a violation and assert that it reports it.
"""

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gcpo_analysis", "gcpo_train")

# Each gcpo_analysis module's layer, by its longest matching prefix; every module must match one
# (a new module is placed here on purpose). Theory (numerical checks of the propositions) and
# plots (figures of the statistics) sit with stats: they use measures and stats, and study uses them.
LAYERS = ("base", "rewards", "measures", "settings", "stats", "study", "cli")
LAYER_OF_PREFIX = {
    "gcpo_analysis": "base",  # the package __init__: the version only
    "gcpo_analysis.vocab": "base",
    "gcpo_analysis.frames": "base",
    "gcpo_analysis.models": "base",
    "gcpo_analysis.packaged_policy": "base",
    "gcpo_analysis.data": "base",
    "gcpo_analysis.datasets": "base",  # the dataset registry: standard library only, vocab reads it
    "gcpo_analysis.registry": "base",  # the Registry the three extension points share: standard library only
    "gcpo_analysis.prompts": "base",
    "gcpo_analysis.errors": "base",
    "gcpo_analysis.knob": "base",  # the Knob type and its validator: knows no knob by name
    "gcpo_analysis.outputs": "base",
    "gcpo_analysis.provenance": "base",  # what made an output (version, commit, processor): standard library only
    "gcpo_analysis.diff": "base",  # compares two output folders: pandas, numpy, no measure
    "gcpo_analysis.tiny_models": "base",
    "gcpo_analysis.tokens": "base",
    "gcpo_analysis.prompt_cache": "base",
    "gcpo_analysis.plugins": "base",  # loads plug-in modules by name: standard library only
    "gcpo_analysis.rewards": "rewards",
    "gcpo_analysis.measures": "measures",
    "gcpo_analysis.knobs": "settings",  # the shared knobs: choices read the measures' registries
    "gcpo_analysis.gradvar": "measures",
    "gcpo_analysis.stats": "stats",
    "gcpo_analysis.theory": "stats",
    "gcpo_analysis.plots": "stats",
    "gcpo_analysis.checks": "stats",  # the public conformance checks: run the measures and modulators
    "gcpo_analysis.study": "study",
    "gcpo_analysis.study.cli": "cli",
    "gcpo_analysis.measures.cli": "cli",  # gcpo score
    "gcpo_analysis.theory.cli": "cli",  # gcpo proofs
    "gcpo_analysis.diff.cli": "cli",  # gcpo diff
    "gcpo_analysis.cli": "cli",
    "gcpo_analysis.__main__": "cli",
}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # parsed once per session: the tests only read the trees
def _sources(root: Path = ROOT) -> dict[str, tuple[Path, ast.Module]]:
    files = [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    return {_module_name(p, root): (p, ast.parse(p.read_text(), str(p))) for p in files}


def _imports(name: str, path: Path, tree: ast.Module) -> list[tuple[str, list[str], int]]:
    """Every import statement of a module, anywhere in it (functions included): (absolute module,
    names imported from it, line). Relative imports are resolved against the module's package.
    ``importlib.import_module("x")`` / ``__import__("x")`` with a literal name count too (a
    variable name cannot be read: the CLI's SUBCOMMANDS table is tested on its own below)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and _dotted(node.func).split(".")[-1] in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            found.append((node.args[0].value, [], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, [a.name for a in node.names], node.lineno))
    return found


def _graph(sources=None) -> dict[str, set[str]]:
    """module -> the package modules it imports (``from pkg import sub`` counts as importing sub)."""
    sources = _sources() if sources is None else sources
    old_paths = shims()  # no file, but an import of one is an edge the contract must see
    graph = {}
    for name, (path, tree) in sources.items():
        edges = set()
        for base, names, _ in _imports(name, path, tree):
            for t in [base] + [f"{base}.{n}" for n in names]:
                if (t in sources or t in old_paths) and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def layer_of(module: str) -> str | None:
    """The layer of a gcpo_analysis module (longest prefix in LAYER_OF_PREFIX), None if unplaced."""
    best = None
    for prefix in LAYER_OF_PREFIX:
        # the package itself ("gcpo_analysis") matches only its __init__, not every module
        inside = "." in prefix and module.startswith(prefix + ".")
        if (module == prefix or inside) and (best is None or len(prefix) > len(best)):
            best = prefix
    return None if best is None else LAYER_OF_PREFIX[best]


def shims(names=None) -> set[str]:
    """Deprecated flat module paths: none since the unpublished 0.1.0's were removed; the given
    short names of a made-up tree, for the checker's own tests."""
    return {f"gcpo_analysis.{n}" for n in names or ()}


def layer_violations(graph: dict[str, set[str]], shim_modules=frozenset()) -> list[str]:
    """Every edge that breaks the contract: an upward edge between gcpo_analysis layers, any
    gcpo_analysis -> gcpo_train import, any import of a shim from package code, and any
    gcpo_analysis module without a layer. Shims themselves are exempt (they re-export)."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    out = []
    for src in sorted(graph):
        if src.startswith("gcpo_analysis") and src not in shim_modules and layer_of(src) is None:
            out.append(f"{src} has no layer (add it to LAYER_OF_PREFIX)")
        for dst in sorted(graph[src]):
            if dst in shim_modules and src not in shim_modules:
                out.append(f"{src} imports the deprecated shim {dst}")
            if not src.startswith("gcpo_analysis") or src in shim_modules:
                continue
            if dst.startswith("gcpo_train"):
                out.append(f"{src} imports {dst} (gcpo_analysis never imports gcpo_train)")
                continue
            a, b = layer_of(src), layer_of(dst)
            if a is not None and b is not None and rank[b] > rank[a]:
                out.append(f"{src} ({a}) imports {dst} ({b}): an upward edge")
    return out


def private_uses(sources) -> list[str]:
    """gcpo_train's uses of non-public gcpo_analysis names: a ``_name`` imported or read as an
    attribute of an imported gcpo_analysis module, or a ``_private`` module in the path."""
    out = []
    for name, (path, tree) in sources.items():
        if not name.startswith("gcpo_train"):
            continue
        bound = set()  # local names bound to gcpo_analysis modules
        for base, names, line in _imports(name, path, tree):
            if not base.startswith("gcpo_analysis"):
                continue
            where = f"{name}:{line}"
            if any(part.startswith("_") for part in base.split(".")):
                out.append(f"{where} imports the private module {base}")
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    out.append(f"{where} imports the private name {base}.{n}")
                if f"{base}.{n}" in sources:
                    bound.add(n)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bound |= {a.asname for a in node.names if a.asname and a.name.startswith("gcpo_analysis")}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and (_dotted(node.value) in bound or _dotted(node.value).startswith("gcpo_analysis"))
            ):
                out.append(f"{name}:{node.lineno} reads the private name {_dotted(node.value)}.{node.attr}")
    return out


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _fake_sources(tmp_path: Path, files: dict[str, str]):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return _sources(tmp_path)


def _cycle(graph):
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == "open":
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = "done"
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_graph_is_complete_enough_to_mean_something():
    g = _graph()
    assert "gcpo_train.loop.trainer" in g and "gcpo_train.evaluation.splits" in g["gcpo_train.loop.trainer"]
    assert "gcpo_analysis.stats.rank" in g["gcpo_analysis.stats.decomposition"]
    # function-level and relative imports count: study.run imports collect inside a function
    assert "gcpo_analysis.study.collect" in g["gcpo_analysis.study.run"]
    assert "gcpo_analysis.rewards" in g["gcpo_analysis.measures.judges"]  # `from ..rewards import` in a method


def _circle_of(graph) -> list[str] | None:
    """A circle of the import graph, or None. A package's __init__ that lazily re-exports its
    submodules is an entry point, not a dependency: edges from a submodule to its own package's
    __init__ are ignored."""
    return _cycle({n: {m for m in e if not n.startswith(m + ".")} for n, e in graph.items()})


def test_no_import_circle():
    circle = _circle_of(_graph())
    assert circle is None, " -> ".join(circle)


@pytest.mark.slow
def test_the_trainer_code_does_not_import_the_conformance_checks():
    g = _graph()
    assert "gcpo_analysis.checks" in g  # the module exists: the assertion below can fail
    for name, edges in g.items():
        if name.startswith("gcpo_train"):
            assert "gcpo_analysis.checks" not in edges, name


def test_the_layer_contract_holds():
    sources = _sources()
    assert layer_violations(_graph(sources), shims()) == []


@pytest.mark.slow
def test_gcpo_train_uses_only_public_gcpo_analysis_names():
    assert private_uses(_sources()) == []


def test_there_are_no_shims_left():
    assert shims() == set() and "gcpo_analysis._moved" not in _sources()


@pytest.mark.slow
def test_the_only_edge_to_gcpo_train_is_the_subcommands_table():
    """No module of gcpo_analysis names a gcpo_train module in a string (importlib) except the
    SUBCOMMANDS table of cli.py, whose entries are lazy "module:function" strings."""
    pattern = re.compile(r"^gcpo_train((\.\w+)+(:\w+)?|:\w+)$")  # a module path, not the logger's name
    found = []
    for name, (_path, tree) in _sources().items():
        if not name.startswith("gcpo_analysis"):
            continue
        allowed: set[int] = set()
        if name == "gcpo_analysis.cli":
            table = next(
                n
                for n in tree.body
                if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "SUBCOMMANDS" for t in n.targets)
            )
            allowed = {id(v) for v in table.value.values}
            assert any(pattern.match(v.value) for v in table.value.values), "the table lost its gcpo_train entries"
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.match(node.value):
                if id(node) not in allowed:
                    found.append(f"{name}:{node.lineno} {node.value!r}")
    assert found == []


@pytest.mark.slow
def test_every_subcommand_target_resolves():
    """Each "module:function" of SUBCOMMANDS names a function that exists (checked on the source,
    without importing gcpo_train)."""
    from gcpo_analysis.cli import SUBCOMMANDS

    sources = _sources()
    for command, target in SUBCOMMANDS.items():
        module, function = target.split(":")
        assert module in sources, (command, target)
        defined = {n.name for n in sources[module][1].body if isinstance(n, ast.FunctionDef)}
        assert function in defined, (command, target)


@pytest.mark.slow
def test_one_did_you_mean_helper_and_one_main():
    """The close-match hint lives in one helper (gcpo_analysis.errors.did_you_mean), and the one
    command-line entry point is gcpo_analysis.cli.main (no third CLI such as proofs.main)."""
    difflib_users, mains = [], []
    for name, (path, tree) in _sources().items():
        for base, _names, _ in _imports(name, path, tree):
            if base == "difflib":
                difflib_users.append(name)
        mains += [name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    assert difflib_users == ["gcpo_analysis.errors"]
    assert mains == ["gcpo_analysis.cli"]


# --- the checker itself, on made-up graphs: it must report what it is built to catch ----------


def test_the_checker_reports_an_upward_import(tmp_path):
    sources = _fake_sources(
        tmp_path,
        {
            "gcpo_analysis/vocab.py": "X = 1\n",
            "gcpo_analysis/measures/__init__.py": "",
            "gcpo_analysis/measures/score.py": "from ..vocab import X\n",
            "gcpo_analysis/stats/__init__.py": "",
            "gcpo_analysis/stats/gap.py": "def f():\n    from ..measures import score\n",
            # the violation: measures reaches up into stats, inside a function
            "gcpo_analysis/measures/bad.py": "def g():\n    from ..stats.gap import f\n",
        },
    )
    found = layer_violations(_graph(sources), shims([]))
    assert found == ["gcpo_analysis.measures.bad (measures) imports gcpo_analysis.stats.gap (stats): an upward edge"]


def test_the_checker_reports_an_import_of_gcpo_train_and_of_a_shim(tmp_path):
    sources = _fake_sources(
        tmp_path,
        {
            "gcpo_analysis/rank_stats.py": "",  # a made-up shim module
            "gcpo_analysis/stats/__init__.py": "",
            "gcpo_analysis/stats/gap.py": "import gcpo_analysis.rank_stats\n",
            "gcpo_analysis/study/__init__.py": "",
            "gcpo_analysis/study/run.py": "from gcpo_train import config\n",
            "gcpo_analysis/newthing.py": "",
            "gcpo_train/config.py": "from gcpo_analysis import rank_stats\n",
        },
    )
    found = layer_violations(_graph(sources), shims(["rank_stats"]))
    assert found == [
        "gcpo_analysis.newthing has no layer (add it to LAYER_OF_PREFIX)",
        "gcpo_analysis.stats.gap imports the deprecated shim gcpo_analysis.rank_stats",
        "gcpo_analysis.study.run imports gcpo_train (gcpo_analysis never imports gcpo_train)",
        "gcpo_analysis.study.run imports gcpo_train.config (gcpo_analysis never imports gcpo_train)",
        "gcpo_train.config imports the deprecated shim gcpo_analysis.rank_stats",
    ]


def test_the_checker_reports_private_names_used_by_gcpo_train(tmp_path):
    sources = _fake_sources(
        tmp_path,
        {
            "gcpo_analysis/stats/__init__.py": "",
            "gcpo_analysis/stats/rank.py": "def _ci(): pass\ndef ci(): pass\n",
            "gcpo_train/a.py": "from gcpo_analysis.stats.rank import _ci, ci\n",
            "gcpo_train/b.py": "from gcpo_analysis.stats import rank\nrank._ci()\nrank.ci()\n",
            "gcpo_train/c.py": "import gcpo_analysis.stats.rank as r\ndef f():\n    return r._ci\n",
            "gcpo_train/d.py": "from gcpo_analysis._moved import alias\n",
        },
    )
    assert private_uses(sources) == [
        "gcpo_train.a:1 imports the private name gcpo_analysis.stats.rank._ci",
        "gcpo_train.b:2 reads the private name rank._ci",
        "gcpo_train.c:3 reads the private name r._ci",
        "gcpo_train.d:1 imports the private module gcpo_analysis._moved",
    ]


@pytest.mark.parametrize(
    "how",
    [
        "from gcpo_analysis.measures.modulators import X\n",  # module level
        "def f():\n    from .measures import modulators\n",  # inside a function, relative
        "def f():\n    import importlib\n    return importlib.import_module('gcpo_analysis.measures.modulators')\n",
    ],
)
def test_the_checker_reports_a_circle(tmp_path, how):
    """knobs -> modulators -> knobs, a circle the package once had, tied in each of the three ways."""
    sources = _fake_sources(
        tmp_path,
        {
            "gcpo_analysis/knobs.py": how,
            "gcpo_analysis/measures/__init__.py": "",
            "gcpo_analysis/measures/modulators.py": "from ..knobs import SHARED\nX = 1\n",
            "gcpo_analysis/measures/other.py": "from . import modulators\n",
        },
    )
    assert _circle_of(_graph(sources)) == [
        "gcpo_analysis.knobs",
        "gcpo_analysis.measures.modulators",
        "gcpo_analysis.knobs",
    ]
    # and the same tree without the tie back has none
    (tmp_path / "gcpo_analysis/measures/modulators.py").write_text("X = 1\n")
    assert _circle_of(_graph(_sources.__wrapped__(tmp_path))) is None
