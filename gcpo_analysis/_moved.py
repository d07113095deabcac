"""Old module paths of the flat layout (gcpo 0.1), kept for one release (removed in 0.3.0; CHANGELOG.md).

Each shim module calls ``alias`` so that the old name *is* the new module (``sys.modules``), which
keeps ``monkeypatch.setattr(old_module, ...)`` and ``isinstance`` checks working on the one object."""

from __future__ import annotations

import importlib
import sys
import warnings

REMOVED_IN = "0.3.0"


def alias(old: str, new: str):
    warnings.warn(f"{old} moved to {new}; the old path is removed in gcpo {REMOVED_IN}", FutureWarning, stacklevel=3)
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module
