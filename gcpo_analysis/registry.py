"""One registry shape for the three extension points: measures (``measures.registry.
MEASURE_REGISTRY``), modulators (``measures.modulators.MODULATORS``) and datasets
(``datasets.registry.DATASET_REGISTRY``).

A ``Registry`` is a dict from name to entry in registration order (what everything that lists an
extension point reads), with the three habits the decorators share: registration by decorator
(``decorator``), a name registered twice refused (``add``), and an unknown name refused with the
choices (``lookup``). Replacing or removing an entry is ``pop(name)`` (a test's toy entry).
Standard library only: the dataset registry is read by ``vocab`` without numpy or pandas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
F = TypeVar("F", bound=Callable)


def check_name(kind: str, name: object) -> str:
    """``name`` if it is an identifier (letters, digits and ``_``, not starting with a digit),
    else a ValueError naming it. A registered name becomes a folder (``runs/<arm>/``), a file
    stem and a frame column, so a path separator or ``..`` would write outside the folder meant
    (an arm named ``../../escaped`` would train outside the comparison folder)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(
            f"a {kind} name must be an identifier (letters, digits and _, not starting with a digit; "
            f"no path separator or '..'): it names folders, files and frame columns; got {name!r}"
        )
    return name


class Registry(dict[str, T]):
    """Entries of one kind (``kind``: "measure", "modulator", "dataset"), by name, in the order
    they were registered."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` as ``name``; a name that is not an identifier (``check_name``) or is
        registered already is refused."""
        check_name(self.kind, name)
        if name in self:
            raise ValueError(
                f"{self.kind} {name!r} is registered already (pop it from the registry first to replace it)"
            )
        self[name] = entry
        return entry

    def __setitem__(self, name: str, entry: T) -> None:
        """Direct assignment keeps the naming rule too (``add`` checks the name twice, cheaply)."""
        super().__setitem__(check_name(self.kind, name), entry)

    def update(self, *args, **kwargs) -> None:
        for name, entry in dict(*args, **kwargs).items():
            self[name] = entry

    def decorator(self, name: str, make: Callable[[F], T]) -> Callable[[F], F]:
        """A decorator that registers ``make(fn)`` as ``name`` and returns ``fn`` unchanged, so one
        function may be registered under several names (verl's ``@register_adv_est`` habit)."""

        check_name(self.kind, name)  # refused when the decorator is made, before any function

        def register(fn: F) -> F:
            self.add(name, make(fn))
            return fn

        return register

    def lookup(self, name: str) -> T:
        """The entry ``name``; an unknown name is refused with the registered ones."""
        if name not in self:
            check_name(self.kind, name)  # a path is refused as a path, not as a typo
            raise ValueError(f"unknown {self.kind} {name!r}; choices: {', '.join(self)}")
        return self[name]

    def names(self) -> tuple[str, ...]:
        """The registered names in registration order (read when called: a later one counts)."""
        return tuple(self)
