"""The knob type: a settings field's declaration (default, help, range, choices, an extra check)
and the one validator of a value against it. Generic: it knows no knob by name.

A knob is a field of a settings dataclass (``TrainConfig``, ``GCPOConfig``, ``StudyConfig``,
``ModulationSettings``) or a flag of ``gcpo score``. ``knob(default, help, ...)`` makes the field;
its ``metadata["help"]`` is a ``Help`` string that carries the ``Knob`` (the docs' configuration
reference reads ``dataclasses.fields(...)``). ``check_fields`` validates every declared field of
a settings object, at the boundary, before any model loads:

* type, from the annotation: a number is a real number (``True`` or ``"0.6"`` refused; ``"1e-4"``,
  which YAML 1.1 leaves a string, is read as the float it means), an integer an integer, a boolean a boolean
  (``"false"`` refused: it is truthy), a string a string; ``None`` only where the annotation says
  ``| None``, and then ``Knob.none`` says what it means;
* range: ``ge``/``gt``/``le``/``lt``; every number finite;
* choices: a tuple, or a function giving them (a registry: a modulator registered later is a
  choice);
* ``check``: a function of the value that raises ``ValueError`` on a bad one (a judge spec is
  parsed by the judges' own parser), so a knob whose rule lives elsewhere needs no special case.

The declarations themselves live with what they configure: ``gcpo_analysis.knobs`` (the knobs
several configs share), ``gcpo_analysis.measures.params`` (the measures' and modulators'
parameters), and each config's own ``knob(...)`` fields.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# what YAML 1.1 (PyYAML) leaves as a string: a number in scientific notation without a dot (1e-4)
_SCIENTIFIC = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


@dataclass(frozen=True)
class Knob:
    """One knob's declaration: its help, default and what values it takes."""

    default: Any
    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple | Callable[[], Iterable[str]] | None = None
    none: str = ""  # what None means, where the annotation allows it
    check: Callable[[Any], Any] | None = None  # a further rule: raises ValueError on a bad (non-None) value

    def rule(self) -> str:
        """The range or choices in words ("in [0, 1]", "one of a, b")."""
        bounds = ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt))
        parts = [f"{op} {v:g}" for op, v in bounds if v is not None]
        if self.ge is not None and self.le is not None:
            parts = [f"in [{self.ge:g}, {self.le:g}]"]
        if self.choices is not None:
            parts.append("one of " + ", ".join(map(str, self.allowed())))
        return " and ".join(parts)

    def allowed(self) -> tuple:
        return tuple(self.choices() if callable(self.choices) else self.choices or ())

    def field(self, **kw: Any) -> Any:
        """The dataclass field of this knob (its help in ``metadata['help']``)."""
        default = self.default
        spec = dict(default_factory=lambda: list(default)) if isinstance(default, list) else dict(default=default)
        return field(**spec, metadata={"help": Help(self.help_text(), self)}, **kw)

    def help_text(self) -> str:
        """The help, its rule (a registry's choices are listed by the error, not read at import)
        and what None means."""
        rule = "" if callable(self.choices) else self.rule()
        extra = f" null = {self.none}." if self.none else ""
        return self.help + (f" Must be {rule}." if rule else "") + extra


class Help(str):
    """A field's help text that also carries its ``Knob``: ``metadata`` holds only ``help``, as
    ``HfArgumentParser`` passes every metadata key on to ``argparse.add_argument``."""

    knob: Knob

    def __new__(cls, text: str, spec: Knob) -> Help:
        out = super().__new__(cls, text)
        out.knob = spec
        return out


def cli_help(f: dataclasses.Field) -> str:
    """A field's help for a parser built now: the declared help, and a registry's choices as they
    stand when the parser is built (``Knob.help_text`` leaves them out, being read at import), so
    a dataset or modulator registered before the parser is listed."""
    text = str(f.metadata["help"])
    spec = getattr(f.metadata["help"], "knob", None)
    if spec is not None and callable(spec.choices):
        text += f" One of {', '.join(map(str, spec.allowed()))}."
    return text


def knob(default: Any, help: str, **rules: Any) -> Any:
    """A dataclass field declared with its rules (a knob of one config)."""
    return Knob(default, help, **rules).field()


def _hint(annotation: Any) -> tuple[set[type], bool]:
    """(the plain types an annotation allows, whether None is allowed): ``int | None`` gives
    ({int}, True), ``bool | str`` ({bool, str}, False), ``list[str]`` ({list}, False)."""
    args = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    kinds = {typing.get_origin(a) or a for a in args if a is not type(None)}
    return kinds, type(None) in args or annotation is Any


def _typed(name: str, value: Any, kinds: set[type]) -> Any:
    """``value`` as one of ``kinds``, or a ValueError naming the knob."""
    if bool in kinds and isinstance(value, bool):
        return value
    if float in kinds and not isinstance(value, bool):
        if isinstance(value, str) and _SCIENTIFIC.fullmatch(value.strip()):
            return float(value)  # YAML 1.1 reads 1e-4 as a string
        if isinstance(value, (int, float)):
            if isinstance(value, int) and abs(value) > FLOAT32_MAX:  # float() of 10**400 overflows
                raise ValueError(f"{name} must be of a size float32 holds (up to 3.4e+38), got {value!r}")
            return float(value)
    if int in kinds and isinstance(value, int) and not isinstance(value, bool):
        return value
    if str in kinds and isinstance(value, str):
        return value
    if list in kinds and isinstance(value, (list, tuple)):
        return list(value)
    if dict in kinds and isinstance(value, dict):
        return value
    words = {
        bool: "true or false",
        float: "a number",
        int: "an integer",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }
    want = " or ".join(words.get(k, k.__name__) for k in sorted(kinds, key=lambda k: k.__name__))
    raise ValueError(f"{name} must be {want}, got {value!r} ({type(value).__name__})")


INT64 = (-(2**63), 2**63 - 1)  # seeds, steps and sizes reach numpy, torch and Parquet as int64
FLOAT32_TINY, FLOAT32_MAX = 1.1754943508222875e-38, 3.4028234663852886e38  # the models compute in float32


def finite_number(name: str, value: Any) -> float:
    """``value`` as a finite float, or an error naming ``name``: a bool, NaN, infinity, something
    float() refuses and an int too large for a float (10**400, where math.isfinite and float()
    raise a bare OverflowError) are refused. Long values are cut in the message."""
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:20] + "..."
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # numpy's bool, without importing numpy
        raise ValueError(f"{name} must be a finite number, got {shown}")
    try:
        out = float(value)
    except (OverflowError, TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number, got {shown}") from None
    if not math.isfinite(out):
        raise ValueError(f"{name} must be a finite number, got {shown}")
    return out


def _check_edges(name: str, value: Any) -> None:
    """A number at its type's edges refused naming the knob: an integer beyond int64
    (``seed: 2^64`` was numpy's "Overflow when unpacking long long", after the study had made its
    folder), a float that float32 cannot hold (``temperature: 1e-45`` divided the logits to inf
    inside torch.multinomial at step 1)."""
    if isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
        raise ValueError(f"{name} must fit a 64-bit integer (-2^63 to 2^63 - 1), got {value!r}")
    if isinstance(value, float) and value != 0.0 and not FLOAT32_TINY <= abs(value) <= FLOAT32_MAX:
        raise ValueError(
            f"{name} must be of a size float32 holds (0, or 1.2e-38 to 3.4e+38 in magnitude; the models "
            f"compute in float32), got {value!r}"
        )


def check_value(name: str, value: Any, spec: Knob, annotation: Any = None) -> Any:
    """One knob's value checked (and a float field's int or "1e-4" made a float); the error
    names the knob, the rule and the value."""
    kinds, optional = _hint(annotation) if annotation is not None else ({type(spec.default)}, spec.default is None)
    if value is None:
        if optional:
            return None
        raise ValueError(f"{name} must not be null" + (f" ({spec.rule()})" if spec.rule() else ""))
    value = _typed(name, value, kinds)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number{' ' + spec.rule() if spec.rule() else ''}, got {value!r}")
    _check_edges(name, value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low_ok = (spec.ge is None or value >= spec.ge) and (spec.gt is None or value > spec.gt)
        high_ok = (spec.le is None or value <= spec.le) and (spec.lt is None or value < spec.lt)
        if not (low_ok and high_ok):
            number = "a finite number " if isinstance(value, float) else ""
            raise ValueError(f"{name} must be {number}{spec.rule()}, got {value!r}")
    if spec.choices is not None and isinstance(value, str):
        allowed = spec.allowed()
        if value not in allowed:
            from .errors import did_you_mean

            hint = did_you_mean(value, list(allowed), n=1)
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}{hint}")
    if spec.check is not None:
        spec.check(value)
    return value


def knobs_of(cls_or_obj: Any) -> dict[str, Knob]:
    """name -> Knob of every declared field of a settings dataclass."""
    helps = {f.name: f.metadata.get("help") for f in dataclasses.fields(cls_or_obj)}
    return {name: h.knob for name, h in helps.items() if isinstance(h, Help)}


def check_fields(obj: Any, names: Iterable[str] | None = None) -> None:
    """Validate (and normalise) every declared knob of the settings object ``obj``, or only
    ``names``, each against its own declaration."""
    hints = typing.get_type_hints(type(obj))
    specs = knobs_of(obj)
    for name in specs if names is None else names:
        value = check_value(name, getattr(obj, name), specs[name], hints[name])
        object.__setattr__(obj, name, value)  # also on a frozen dataclass: the checked value


def check_given_values(cls: type, values: dict, source: dict[str, str], checks: dict | None = None) -> None:
    """The fields of the settings dataclass ``cls`` in ``values`` (a config file's mapping, the
    command line's overrides), each checked against its declaration, or by its own function in
    ``checks`` (name -> callable), before ``cls`` is built, so that the error names where it was
    given (``source[name]``: the file, ``--set steps=nan``); names that are not fields are left to
    the caller's unknown-key check."""
    hints = typing.get_type_hints(cls)
    specs = knobs_of(cls)
    for name, value in values.items():
        try:
            if name in specs:
                check_value(name, value, specs[name], hints[name])
            if checks and name in checks:
                checks[name](value)
        except ValueError as err:
            raise ValueError(f"{source[name]}: {err}") from None


def check_flags(args: Any, annotations: dict[str, Any], specs: dict[str, Knob]) -> None:
    """The flags of knobs on an argparse namespace, checked against their declarations
    (``specs``); the error names the flag (``--r-max: r_max must be a finite number, got inf``)."""
    for name, annotation in annotations.items():
        try:
            setattr(args, name, check_value(name, getattr(args, name), specs[name], annotation))
        except ValueError as err:
            raise ValueError(f"--{name.replace('_', '-')}: {err}") from None


def check_given_flags(args: Any, cls: type) -> None:
    """The flags of the settings dataclass ``cls`` given on the command line (not None), checked
    naming the flag, whatever mode then reads them (``gcpo study --from-training`` builds no
    ``StudyConfig``, yet reads ``--k-folds``)."""
    hints = typing.get_type_hints(cls)
    specs = knobs_of(cls)
    given = {name: hints[name] for name in specs if getattr(args, name, None) is not None}
    check_flags(args, given, specs)
