"""Plug-ins: modules that register measures, modulators or datasets, loaded before the command line
is built, so every door (`gcpo score`, `gcpo study`, `gcpo train`, their help and choices) sees them.

Three ways to name a plug-in, all loaded by ``gcpo_analysis.cli.main`` before it builds its parser:

* an installed distribution's entry point in the group ``gcpo.plugins`` (``pyproject.toml``:
  ``[project.entry-points."gcpo.plugins"] mine = "my_package.measures"``), loaded on every run;
* ``--plugin MODULE`` (repeatable; before or after the subcommand);
* the environment variable ``GCPO_PLUGINS``: comma-separated module names.

A plug-in is a module whose import registers its entries (``register_measure``,
``register_modulator``, ``register_dataset``); an entry point may also name a function
(``module:function``), which is called with no arguments. Each is loaded once per process. One
that fails to load is an error naming it and where it was named (the entry point and its
distribution, the flag, or the variable), never a silent skip: a measure that vanished would
otherwise surface as an unknown name much later. A plug-in whose import calls ``sys.exit`` or
raises ``SystemExit``/``KeyboardInterrupt`` is such a failed load too (it made `gcpo` exit 0,
silently, before any command ran).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "gcpo.plugins"
ENV_VAR = "GCPO_PLUGINS"

_loaded: dict[str, object] = {}  # what was loaded in this process, by where it was named
_modules: list[str] = []  # the modules named by --plugin or GCPO_PLUGINS, in load order


class PluginError(ValueError):
    """A plug-in that could not be loaded; the message names the plug-in and where it was named."""


# what a plug-in's import may raise and still be a failed load: any exception, and the two that
# would otherwise end gcpo itself (sys.exit(0) in a module made `gcpo` exit 0, silently)
LOAD_ERRORS = (Exception, SystemExit, KeyboardInterrupt)


def _failed(what: str, err: BaseException) -> PluginError:
    return PluginError(f"plug-in {what} failed to load: {type(err).__name__}: {err}")


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Load every entry point of ``group`` that installed distributions declare; their names."""
    names = []
    for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
        dist = f" of {ep.dist.name} {ep.dist.version}" if ep.dist is not None else ""
        what = f"{ep.name!r} (entry point {group}: {ep.name} = {ep.value}{dist})"
        if what not in _loaded:
            try:
                obj = ep.load()
                if callable(obj):
                    obj()
            except LOAD_ERRORS as err:  # whatever it raised, named with the plug-in
                raise _failed(what, err) from err
            _loaded[what] = obj
        names.append(ep.name)
    return names


def load_module(name: str, where: str) -> None:
    """Import the plug-in module ``name`` (named by ``where``: the flag or the variable)."""
    what = f"{name!r} ({where})"
    if not name or name.startswith("."):
        raise PluginError(f"plug-in {what}: not an absolute module name")
    if name in _loaded:
        return
    try:
        _loaded[name] = importlib.import_module(name)
    except LOAD_ERRORS as err:  # whatever it raised, named with the plug-in
        raise _failed(what, err) from err
    _modules.append(name)


def loaded_modules() -> list[str]:
    """The plug-in modules this process loaded by name (``--plugin``, ``GCPO_PLUGINS``): what a
    worker process loads again to see the same registries (``gcpo compare --workers``)."""
    return list(_modules)


def env_plugins(environ=None) -> list[str]:
    """The modules named by ``GCPO_PLUGINS`` (comma-separated; blanks ignored)."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return [m.strip() for m in value.split(",") if m.strip()]


def load_plugins(modules: Iterable[str] = (), environ=None) -> None:
    """Load every plug-in: the ``gcpo.plugins`` entry points, then ``GCPO_PLUGINS``, then
    ``modules`` (the ``--plugin`` flags)."""
    load_entry_points()
    for name in env_plugins(environ):
        load_module(name, f"environment variable {ENV_VAR}")
    for name in modules:
        load_module(name, "--plugin")


def plugin_flags(argv: Iterable[str]) -> list[str]:
    """The ``--plugin MODULE`` / ``--plugin=MODULE`` values of a command line, wherever they stand
    (read before the parser is built, as the parser's choices come from the registries)."""
    argv = list(argv)
    out = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--plugin":
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                raise PluginError("--plugin needs a module name (--plugin my_package.measures)")
            out.append(argv[i + 1])
        elif arg.startswith("--plugin="):
            out.append(arg.split("=", 1)[1])
    return out
