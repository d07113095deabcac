"""The import graph of gcpo_analysis and gcpo_train has no circle, counting module-level and
function-level imports alike (a lazy import inside a function still ties two modules)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gcpo_analysis", "gcpo_train")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    modules = {_module_name(p): p for p in files}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                if t in modules and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


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
    assert "gcpo_train.trainer" in g and "gcpo_train.splits" in g["gcpo_train.trainer"]
    assert "gcpo_analysis.stats.rank" in g["gcpo_analysis.stats.decomposition"]


def test_no_import_circle():
    # a package's __init__ that lazily re-exports its submodules is an entry point, not a
    # dependency: edges from a submodule to its own package's __init__ are ignored
    g = {n: {m for m in e if not n.startswith(m + ".")} for n, e in _graph().items()}
    assert _cycle(g) is None, " -> ".join(_cycle(g))


def test_the_trainer_code_does_not_import_test_helpers():
    g = _graph()
    for name, edges in g.items():
        if name.startswith("gcpo_train"):
            assert "gcpo_analysis.testing" not in edges, name
