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


class Registry(dict[str, T]):
    """Entries of one kind (``kind``: "measure", "modulator", "dataset"), by name, in the order
    they were registered."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` as ``name``; a name registered already is refused."""
        if name in self:
            raise ValueError(
                f"{self.kind} {name!r} is registered already (pop it from the registry first to replace it)"
            )
        self[name] = entry
        return entry

    def decorator(self, name: str, make: Callable[[F], T]) -> Callable[[F], F]:
        """A decorator that registers ``make(fn)`` as ``name`` and returns ``fn`` unchanged, so one
        function may be registered under several names (verl's ``@register_adv_est`` habit)."""

        def register(fn: F) -> F:
            self.add(name, make(fn))
            return fn

        return register

    def lookup(self, name: str) -> T:
        """The entry ``name``; an unknown name is refused with the registered ones."""
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; choices: {', '.join(self)}")
        return self[name]

    def names(self) -> tuple[str, ...]:
        """The registered names in registration order (read when called: a later one counts)."""
        return tuple(self)
