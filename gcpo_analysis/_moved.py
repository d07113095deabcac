"""Old module paths of the flat layout (gcpo 0.1), kept for one release (removed in 0.3.0; CHANGELOG.md).

No file stands at an old path: a finder on ``sys.meta_path`` (installed by ``gcpo_analysis/__init__``)
answers ``import gcpo_analysis.collect`` and the like with a FutureWarning and the module's new
home, so the package root lists only the modules that live there. The old name *is* the new
module (one object in ``sys.modules``), which keeps ``monkeypatch.setattr(old_module, ...)`` and
``isinstance`` checks working. ``gcpo_analysis.lipschitz`` was split in two; its old path gives a
module holding both halves' public names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

REMOVED_IN = "0.3.0"

# old module name (under gcpo_analysis) -> its new home
MOVED = {
    "collect": "gcpo_analysis.study.collect",
    "decomposition": "gcpo_analysis.stats.decomposition",
    "extraction": "gcpo_analysis.rewards.extraction",
    "math_grading": "gcpo_analysis.rewards.math.grading",
    "math_syntax": "gcpo_analysis.rewards.math.syntax",
    "proofs": "gcpo_analysis.theory.proofs",
    "rank_stats": "gcpo_analysis.stats.rank",
    "simulate": "gcpo_analysis.theory.simulate",
    "size_control": "gcpo_analysis.stats.size_control",
    "study_output": "gcpo_analysis.study.output",
    "sympy_check": "gcpo_analysis.rewards.math.sympy_check",
    "sympy_worker": "gcpo_analysis.rewards.math.sympy_worker",
    "training_study": "gcpo_analysis.study.from_training",
    "testing": "gcpo_analysis.tiny_models",
}
SPLIT = {"lipschitz": ("gcpo_analysis.stats.lipschitz", "gcpo_analysis.study.lipschitz")}


def new_home(old: str) -> str:
    """The new module path(s) of an old flat name, as a warning names them."""
    return MOVED[old] if old in MOVED else " and ".join(SPLIT[old])


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    prefix = "gcpo_analysis."

    def find_spec(self, fullname, path=None, target=None):
        short = fullname[len(self.prefix) :] if fullname.startswith(self.prefix) else None
        if short in MOVED or short in SPLIT:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        short = spec.name[len(self.prefix) :]
        warnings.warn(
            f"{spec.name} moved to {new_home(short)}; the old path is removed in gcpo {REMOVED_IN}",
            FutureWarning,
            stacklevel=2,  # warnings skips importlib's frames, so 2 is the import line
        )
        if short in MOVED:
            return importlib.import_module(MOVED[short])
        merged = types.ModuleType(spec.name, f"Moved: {new_home(short)} (removed in gcpo {REMOVED_IN}).")
        for new in SPLIT[short]:
            module = importlib.import_module(new)
            names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
            merged.__dict__.update({n: getattr(module, n) for n in names})
        return merged

    def exec_module(self, module):
        # the new module is already executed; its own __spec__ and __name__ stay as they are
        pass


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (gcpo_analysis/__init__ calls it)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
