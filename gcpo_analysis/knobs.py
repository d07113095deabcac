"""Every knob declared once, with its range, default and help; one validator for all of them.

A knob is a settings field: ``TrainConfig`` (gcpo_train/config.py), ``GCPOConfig``
(gcpo_train/trl/__init__.py), ``StudyConfig`` (study/config.py), ``ModulationSettings``
(gcpo_train/modulation.py) and the flags of ``gcpo score``. A knob that more than one of them has
is declared here, in ``SHARED``, and each dataclass takes its field from it
(``nli_threshold: float = shared("nli_threshold")``); a knob of one config only is declared in
that config with ``knob(default, help, ...)``. Either way the field's ``metadata["help"]`` is its
help text (the docs' configuration reference reads ``dataclasses.fields(...)``), a ``Help``
string that carries its ``Knob``; ``check_knobs`` validates every field of a settings object
against its ``Knob``, at the boundary, before any model loads:

* type, from the annotation: a number is a real number (``True`` or ``"0.6"`` refused; ``"1e-4"``,
  which YAML 1.1 leaves a string, is read as the float it means), an integer an integer, a boolean a boolean
  (``"false"`` refused: it is truthy), a string a string; ``None`` only where the annotation says
  ``| None``, and then ``Knob.none`` says what it means;
* range: ``ge``/``gt``/``le``/``lt``; every number finite;
* choices: a tuple, or a function giving them (the registries: a modulator registered later is
  a choice).

Adding a field to a config: ``name: type = knob(default, "help", ge=..., choices=...)`` in that
config, or ``shared("name")`` after declaring it in ``SHARED`` when two configs have it.
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

from .datasets import dataset_names
from .vocab import (
    ALPHA_BASE,
    EPS,
    JUDGE,
    NLI_THRESHOLD,
    R_MAX,
    R_MIN,
    SEED,
    TEMPERATURE,
    USE_FULL_COMPLETION,
)

# what YAML 1.1 (PyYAML) leaves as a string: a number in scientific notation without a dot (1e-4)
_SCIENTIFIC = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")
SPLITS = ("train", "validation", "dev", "test")


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


def _prompt_templates() -> list[str]:
    from .prompts import PROMPT_TEMPLATES

    return list(PROMPT_TEMPLATES)


def _modulators() -> list[str]:
    """The registered modulators, read when a value is checked (a later registration counts).
    Looked up by name, as the CLI's SUBCOMMANDS are: modulators itself checks its keyword
    arguments here, so an import would tie the two modules in a circle."""
    import importlib

    return list(importlib.import_module("gcpo_analysis.measures.modulators").MODULATORS)


_WEIGHT_SIGN = "(a negative one flips the sign of the advantages)"

# The knobs that more than one settings object has. Defaults that differ by scale (the study runs
# on 2 cores, training follows the paper) are given where the field is made: shared(name, default).
SHARED: dict[str, Knob] = {
    "dataset": Knob(
        "narrativeqa", "Benchmark: a name of the dataset registry (gcpo_analysis.datasets).", choices=dataset_names
    ),
    "max_int_answer": Knob(
        None, "Keep only queries whose answer is an integer in [0, this] (math).", ge=0, none="keep all"
    ),
    "prompt": Knob(
        None,
        "Prompt template of gcpo_analysis.prompts.PROMPT_TEMPLATES (e.g. math_one_shot).",
        choices=_prompt_templates,
        none="the task's own",
    ),
    "data_path": Knob(
        None, "Local benchmark file or folder (gcpo_analysis.data.load_queries).", none="the packaged or default source"
    ),
    "model": Knob(
        None,
        "Policy: a hub name or local path; 'packaged' = the offline SmolLM2-135M-Instruct GGUF.",
        none="the packaged policy",
    ),
    "modulator": Knob(
        "bot_rd", "Advantage modulator (gcpo_analysis.measures.modulators: none = plain GRPO).", choices=_modulators
    ),
    "alpha_base": Knob(ALPHA_BASE, f"alpha_base; alpha_G = alpha_base / ln G (Section 3.4) {_WEIGHT_SIGN}.", ge=0),
    "r_min": Knob(
        R_MIN,
        "Lower end of the reward range (RD and Q-Hawkeye normalisation); rewards outside [r_min, r_max] are refused.",
    ),
    "r_max": Knob(
        R_MAX, "Upper end of the reward range (the paper's rewards live on [0, 2]; 1 for 0/1 rewards); > r_min."
    ),
    "eps": Knob(EPS, "eps in A_i = (r_i - mean r)/(std r + eps).", gt=0),
    "q_hawkeye_alpha": Knob(
        ALPHA_BASE,
        "Q-Hawkeye alpha in omega = 1 - alpha Var(r)/Var_max (Appendix F; not group-normalised); "
        "<= 1 keeps omega >= 0.",
        ge=0,
        le=1,
    ),
    "eg_spo_alpha": Knob(1.0, "EG-SPO gate strength: gate_i ~ exp(-alpha H_i / H_bar) (Appendix F).", ge=0),
    "r2vpo_lambda": Knob(
        1.0, "R2VPO lambda in w_i = 1/(1 + lambda Var_t rho_it) (Appendix F); rho_it = pi_theta/pi_ref per token.", ge=0
    ),
    "empo_low": Knob(0.0, "EMPO: keep a query if SE/ln G >= empo_low.", ge=0, le=1),
    "empo_high": Knob(0.5, "EMPO: keep a query if SE/ln G <= empo_high (>= empo_low).", ge=0, le=1),
    "modulator_params": Knob(
        None,
        "Extra keyword arguments passed to the modulator verbatim (win over the fields above), e.g. {q_alpha: 0.6}.",
        none="none",
    ),
    "embedder": Knob(
        None, "sentence-transformers name or path for the embeddings mu_i.", none="the packaged all-MiniLM-L6-v2"
    ),
    "judge": Knob(
        JUDGE,
        "Clustering judge: 'embedding' (offline MiniLM similarity), 'lexical' (token F1), 'math' (answer "
        "equivalence), 'nli' or 'nli:<model>' (the paper, Appendix E: nli:roberta-large-mnli).",
    ),
    "nli_threshold": Knob(NLI_THRESHOLD, "Entailment threshold of the greedy clustering (Appendix E).", ge=0, le=1),
    "use_full_completion": Knob(
        USE_FULL_COMPLETION,
        "Embed and cluster the full completion (True) or the extracted answer (False).",
        none="auto: the full completion for the math datasets (gcpo_analysis.vocab.full_completion)",
    ),
    "share_prompt": Knob(
        True,
        "Run each group's prompt once in the log-prob passes and generation's prefill, for its G rollouts "
        "(exact up to float rounding; a named fallback where it cannot). False = the plain full-sequence pass.",
    ),
    "group_size": Knob(16, "G, rollouts per prompt.", ge=2),
    # logits / T must stay finite in float32 (max 3.4e38) for any |logit| < 3e8: T >= 1e-30
    # (1e-45 reached torch.multinomial as inf/NaN probabilities at step 1)
    "temperature": Knob(TEMPERATURE, "Sampling temperature (logits are divided by it in float32).", ge=1e-30),
    "max_new_tokens": Knob(256, "Completion length cap, in tokens.", ge=1),
    "max_context_tokens": Knob(
        256, "Token budget of the passage in the prompt (the passage is truncated, keeping its start).", ge=1
    ),
    "seed": Knob(SEED, "Seed of sampling, data order and the bootstrap.", ge=0),
    "device": Knob(None, "torch device.", none="accelerate's choice (cuda if available, else cpu)"),
    "split": Knob("test", "Split of the benchmark.", choices=SPLITS),
}


def shared(name: str, default: Any = dataclasses.MISSING, help: str | None = None, none: str | None = None) -> Any:
    """The field of the shared knob ``name``; ``default`` where a config's scale differs (G = 8 for
    the study's CPU runs), ``help``/``none`` where the knob means something narrower there. Its
    range and choices are the declaration's, always."""
    spec = SHARED[name]
    if default is not dataclasses.MISSING:
        spec = dataclasses.replace(spec, default=default)
    if help is not None:
        spec = dataclasses.replace(spec, help=help)
    if none is not None:
        spec = dataclasses.replace(spec, none=none)
    return spec.field()


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
    if name == "judge" and isinstance(value, str):
        from .measures.judges import parse_judge_spec

        parse_judge_spec(value)  # make_judge's rules, without building the judge
    return value


def knobs_of(cls_or_obj: Any) -> dict[str, Knob]:
    """name -> Knob of every declared field of a settings dataclass."""
    helps = {f.name: f.metadata.get("help") for f in dataclasses.fields(cls_or_obj)}
    return {name: h.knob for name, h in helps.items() if isinstance(h, Help)}


def check_knobs(obj: Any, names: Iterable[str] | None = None) -> None:
    """Validate (and normalise) every declared knob of the settings object ``obj``, or only
    ``names``; then the rules between knobs (r_min < r_max, empo_low <= empo_high)."""
    hints = typing.get_type_hints(type(obj))
    specs = knobs_of(obj)
    for name in specs if names is None else names:
        value = check_value(name, getattr(obj, name), specs[name], hints[name])
        object.__setattr__(obj, name, value)  # also on a frozen dataclass: the checked value
    check_reward_range(getattr(obj, "r_min", None), getattr(obj, "r_max", None))
    low, high = getattr(obj, "empo_low", None), getattr(obj, "empo_high", None)
    if low is not None and high is not None and low > high:
        raise ValueError(f"empo_low ({low}) must be <= empo_high ({high})")


def check_reward_range(r_min: float | None, r_max: float | None, flags: tuple[str, str] = ("r_min", "r_max")) -> None:
    """The declared reward range: finite, r_max > r_min."""
    if r_min is None or r_max is None:
        return
    for name, v in zip(flags, (r_min, r_max)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if not r_max > r_min:
        raise ValueError(f"{flags[1]} ({r_max}) must be > {flags[0]} ({r_min})")


def check_flags(args: Any, annotations: dict[str, Any], specs: dict[str, Knob] | None = None) -> None:
    """The flags of knobs on an argparse namespace (the shared ones, or ``specs``), checked
    against their declarations; the error names the flag (``--r-max: r_max must be a finite
    number, got inf``)."""
    for name, annotation in annotations.items():
        spec = (specs or SHARED)[name]
        try:
            setattr(args, name, check_value(name, getattr(args, name), spec, annotation))
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
