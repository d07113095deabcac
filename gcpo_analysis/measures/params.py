"""The measures' and modulators' own parameters, each declared once as a ``Knob`` (default, help,
range): the formulas check their arguments against these, and the configs' fields of the same
names take them (``gcpo_analysis.knobs.SHARED`` lists them beside the other shared knobs).

Cheap to import (no numpy), so the settings and the CLI read them without loading a formula.

A new modulator hyperparameter is one entry of ``MODULATOR_PARAMS``: the keyword argument the
modulator takes, the settings field (config key, CLI flag) that sets it, and its ``Knob``;
``modulate`` checks it, ``gcpo_train.modulation.modulator_params`` passes it, and
``ModulationSettings`` holds it as a field of that name (a test holds the two to each other).
"""

from __future__ import annotations

from ..knob import Knob
from ..vocab import ALPHA_BASE, EPS, NLI_THRESHOLD

_WEIGHT_SIGN = "(a negative one flips the sign of the advantages)"

# the parameters of the measures themselves (the geometry's alpha, the clustering's threshold)
MEASURE_KNOBS: dict[str, Knob] = {
    "alpha_base": Knob(ALPHA_BASE, f"alpha_base; alpha_G = alpha_base / ln G (Section 3.4) {_WEIGHT_SIGN}.", ge=0),
    "nli_threshold": Knob(NLI_THRESHOLD, "Entailment threshold of the greedy clustering (Appendix E).", ge=0, le=1),
    # a negative eps flips every advantage's sign where std r < |eps|; NaN makes them NaN
    "eps": Knob(EPS, "eps in A_i = (r_i - mean r)/(std r + eps).", gt=0),
}

# a modulator's keyword argument -> (the settings field that sets it, its declaration)
MODULATOR_PARAMS: dict[str, tuple[str, Knob]] = {
    "q_alpha": (
        "q_hawkeye_alpha",
        Knob(
            ALPHA_BASE,
            "Q-Hawkeye alpha in omega = 1 - alpha Var(r)/Var_max (Appendix F; not group-normalised); "
            "<= 1 keeps omega >= 0.",
            ge=0,
            le=1,
        ),
    ),
    "eg_alpha": (
        "eg_spo_alpha",
        Knob(1.0, "EG-SPO gate strength: gate_i ~ exp(-alpha H_i / H_bar) (Appendix F).", ge=0),
    ),
    "r2vpo_lambda": (
        "r2vpo_lambda",
        Knob(
            1.0,
            "R2VPO lambda in w_i = 1/(1 + lambda Var_t rho_it) (Appendix F); rho_it = pi_theta/pi_ref per token.",
            ge=0,
        ),
    ),
    "empo_low": ("empo_low", Knob(0.0, "EMPO: keep a query if SE/ln G >= empo_low.", ge=0, le=1)),
    "empo_high": ("empo_high", Knob(0.5, "EMPO: keep a query if SE/ln G <= empo_high (>= empo_low).", ge=0, le=1)),
}

# a modulator's keyword argument -> the settings field that sets it (q_alpha -> q_hawkeye_alpha)
PARAM_KNOBS: dict[str, str] = {kwarg: name for kwarg, (name, _) in MODULATOR_PARAMS.items()}

# settings field -> Knob, for every parameter declared here
PARAM_DECLARATIONS: dict[str, Knob] = {**MEASURE_KNOBS, **{name: spec for name, spec in MODULATOR_PARAMS.values()}}
