"""The package sources parsed once per test session: several test files walk every module's
syntax tree (test_vocab, test_names, test_architecture_doc); they only read the trees."""

import ast
import functools
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of one source file (cached: do not modify it)."""
    return ast.parse(Path(path).read_text(), str(path))
