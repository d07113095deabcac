"""The knobs that several settings objects share, each declared once, and the rules between knobs.

A knob is a settings field: ``TrainConfig`` (gcpo_train/config.py), ``GCPOConfig``
(gcpo_train/trl/__init__.py), ``StudyConfig`` (study/config.py), ``ModulationSettings``
(gcpo_train/modulation.py) and the flags of ``gcpo score``. The type ``Knob`` and the validator
are generic and live below everything (``gcpo_analysis.knob``); the declarations live here and
with what they configure:

* ``SHARED``: every knob more than one settings object has, by name. The measures' and
  modulators' own parameters (alpha_base, nli_threshold, q_hawkeye_alpha, ...) are declared in
  ``gcpo_analysis.measures.params``, beside the formulas that check them, and listed here.
* a field that several configs have is declared once too: the measurement tools in
  ``MeasurementTools`` (below), the modulation fields in ``gcpo_train.modulation``'s settings
  classes, which the configs inherit; a knob of one config only is that config's
  ``knob(default, help, ...)``.

Choices that are a registry (datasets, prompts, modulators) are read when a value is checked, so
a later registration (a plug-in) is a choice; a knob whose rule is another module's (the judge
spec) names that rule as its ``check``. This module imports the parameters' declarations
(``measures/params.py``, no numpy) at import, and the registries and the judges only inside
those functions; the measures never import it, so there is no circle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .datasets import dataset_names
from .knob import Knob, check_fields, check_value, finite_number, knob, knobs_of  # noqa: F401 (knob, check_value: the configs' imports)
from .measures.params import PARAM_DECLARATIONS
from .vocab import (
    JUDGE,
    R_MAX,
    R_MIN,
    SEED,
    TEMPERATURE,
    USE_FULL_COMPLETION,
)

SPLITS = ("train", "validation", "dev", "test")


def _prompt_templates() -> list[str]:
    from .prompts import PROMPT_TEMPLATES

    return list(PROMPT_TEMPLATES)


def _modulators() -> list[str]:
    """The registered modulators, read when a value is checked (a later registration counts)."""
    from .measures.modulators import MODULATORS
    from .measures.shuffled import deranged_names, shuffled_names

    return [*MODULATORS, *shuffled_names(MODULATORS), *deranged_names(MODULATORS)]  # the permuted controls


def _judge_spec(value: str) -> None:
    """make_judge's rules for a judge spec ('nli:<model>', ...), without building the judge."""
    from .measures.judges import parse_judge_spec

    parse_judge_spec(value)


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
    "r_min": Knob(
        R_MIN,
        "Lower end of the reward range (RD and Q-Hawkeye normalisation); rewards outside [r_min, r_max] are refused.",
    ),
    "r_max": Knob(
        R_MAX, "Upper end of the reward range (the paper's rewards live on [0, 2]; 1 for 0/1 rewards); > r_min."
    ),
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
        check=_judge_spec,
    ),
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
    **PARAM_DECLARATIONS,  # alpha_base, nli_threshold and the modulators' hyperparameters
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


def check_knobs(obj: Any, names: Iterable[str] | None = None) -> None:
    """Validate (and normalise) every declared knob of the settings object ``obj``, or only
    ``names`` (``check_fields``); then the rules between knobs (r_min < r_max, empo_low <= empo_high)."""
    check_fields(obj, names)
    check_reward_range(getattr(obj, "r_min", None), getattr(obj, "r_max", None))
    low, high = getattr(obj, "empo_low", None), getattr(obj, "empo_high", None)
    if low is not None and high is not None and low > high:
        raise ValueError(f"empo_low ({low}) must be <= empo_high ({high})")


def check_reward_range(r_min: float | None, r_max: float | None, flags: tuple[str, str] = ("r_min", "r_max")) -> None:
    """The declared reward range: finite, r_max > r_min."""
    if r_min is None or r_max is None:
        return
    for name, v in zip(flags, (r_min, r_max)):
        if not isinstance(v, (int, float)):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
        finite_number(name, v)  # bools, NaN, infinity and ints too large for a float (10**400)
    if not r_max > r_min:
        raise ValueError(f"{flags[1]} ({r_max}) must be > {flags[0]} ({r_min})")


@dataclass
class MeasurementTools:
    """The measurement tools' knobs, declared once: what embeds and clusters a group's texts.
    ``StudyConfig`` and the modulation settings (``gcpo_train.modulation``) inherit them. No
    ``__post_init__``: the inheriting config validates (``check_knobs``), so it can also sit
    beside another dataclass base (``GCPOConfig`` on TRL's ``GRPOConfig``)."""

    embedder: str | None = shared("embedder")
    judge: str = shared("judge")
    nli_threshold: float = shared("nli_threshold")
