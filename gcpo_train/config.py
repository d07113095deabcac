"""Training configuration: one dataclass, every field documented, loaded from YAML + overrides.

Sources, in order of precedence (later wins): the defaults below, a YAML file (``--config``),
then ``--set key=value`` overrides on the command line (values parsed as YAML scalars, so
``--set learning_rate=1e-4 use_lora=false``). Unknown keys are refused with close matches.

Defaults follow the paper's Appendix E ("Training Details"): Qwen2.5-1.5B-Instruct, 2000 steps,
learning rate 5e-5, β = 0.002, G = 16 rollouts, temperature 0.9, α_base = 0.6, rewards in [0, 2].
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from gcpo_analysis.errors import did_you_mean
from gcpo_analysis.vocab import (
    ALPHA_BASE,
    DATASETS,
    JUDGE,
    MATH_DATASETS,
    NLI_THRESHOLD,
    PACKAGED_POLICY,
    PAPER_POLICY,
    R_MAX,
    R_MIN,
    SEED,
    TEMPERATURE,
    USE_FULL_COMPLETION,
    field_kinds,
    full_completion,
)

from .loss import LOSS_AGGREGATIONS

BACKENDS = ("gcpo", "trl", "hf", "vllm")
DTYPES = ("float32", "bfloat16", "float16")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")

# Fields that do not change what is trained: a resumed run may differ in these. share_prompt
# changes only float rounding (the same model, data and formula).
NON_IDENTITY_KEYS = frozenset(
    {
        "steps",
        "output_dir",
        "resume",
        "log_every",
        "checkpoint_every",
        "eval_every",
        "eval_n",
        "progress",
        "device",
        "tensorboard",
        "report_to",
        "save_rollouts",
        "overwrite",
        "save_total_limit",
        "share_prompt",
        "track_gradvar",
    }
)


def _f(default, help: str, **kw):
    return field(default=default, metadata={"help": help}, **kw)


@dataclass
class TrainConfig:
    """Every knob of a GCPO/GRPO training run (paper Section 3, Appendix E/F)."""

    # --- model ---
    model: str = _f(
        PAPER_POLICY,
        f"Policy: a hub name or local path; '{PACKAGED_POLICY}' = "
        "the offline SmolLM2-135M-Instruct GGUF; 'tiny:llama' = random tiny model (tests).",
    )
    dtype: str = _f("float32", "Policy weight dtype: float32, bfloat16 or float16.")
    use_lora: bool = _f(
        True,
        "Train LoRA adapters (peft); False = full fine-tuning, which keeps a "
        "frozen copy of the policy as KL reference (2x the weights in memory).",
    )
    lora_r: int = _f(16, "LoRA rank r.")
    lora_alpha: int = _f(32, "LoRA scaling alpha.")
    lora_dropout: float = _f(0.0, "LoRA dropout (0 keeps the loss deterministic).")
    lora_target_modules: list[str] | None = _f(
        None,
        "Module names LoRA wraps; None = the gcpo loop wraps every projection the model has among "
        "q/k/v/o/gate/up/down_proj and GPT-2's c_attn/c_proj/c_fc (policy.LORA_CANDIDATES), "
        "--backend trl wraps 'all-linear'.",
    )
    gradient_checkpointing: bool = _f(False, "Recompute activations in backward to save memory.")
    share_prompt: bool = _f(
        True,
        "gcpo loop: run each group's prompt once, in generation's prefill and in every "
        "log-prob pass, for its G rollouts (exact up to float rounding; off under gradient "
        "checkpointing). False = the plain full-sequence forward, for comparison.",
    )
    track_gradvar: bool | str = _f(
        False,
        "Record each group's exact gradient variance V_train = (1/G) Σ‖h_i − h̄‖² "
        "of the step's objective over the trainable parameters, from the training backward "
        "(hooks; docs/conventions.md). 'full' also records the study's V (all parameters, "
        "sequence log-probs, GRPO advantages) with one extra forward+backward per group. "
        "Needs no gradient checkpointing. With share_prompt the tracked pass still runs each "
        "prompt once and adds G−1 input-gradient passes through it per group, for each "
        "rollout's own prompt gradient; trained weights are unchanged, bit for bit.",
    )
    # --- data ---
    dataset: str = _f("narrativeqa", f"Benchmark: one of {', '.join(DATASETS)}.")
    data_path: str | None = _f(
        None, "Local data file/folder passed to gcpo_analysis.data.load_queries (None = the packaged/default source)."
    )
    train_split: str = _f("train", "Split used for training.")
    eval_split: str = _f("test", "Split used for evaluation.")
    split_from_single: bool = _f(
        False, "The benchmark ships one split: split it with split_queries(train_frac, seed) into train/test."
    )
    train_frac: float = _f(0.8, "Train fraction when split_from_single is true.")
    split_seed: int | None = _f(
        None,
        "Seed of split_queries when split_from_single is true (None = seed). Set it to keep one "
        "held-out set across training seeds (gcpo compare does).",
    )
    split_group: str | None = _f(
        None,
        "Column kept together by split_queries (e.g. 'context', so questions "
        "on one passage never straddle train and test); None = by query.",
    )
    n_train: int | None = _f(None, "Use only the first n training queries (None = all).")
    max_context_tokens: int = _f(256, "Token budget of the passage/context in the prompt.")
    max_prompt_tokens: int = _f(1024, "Hard cap on prompt tokens (left-truncated).")
    # --- modulator ---
    modulator: str = _f(
        "bot_rd",
        "Advantage modulator from gcpo_analysis.measures.modulators "
        "(none = plain GRPO, cd, bot, rd, cd_rd, bot_rd, se, kle, empo, care, "
        "q_hawkeye, eg_spo, r2vpo).",
    )
    alpha_base: float = _f(ALPHA_BASE, "α_base; α_G = α_base / ln G (Section 3.4).")
    r_min: float = _f(R_MIN, "Lower end of the reward range (RD normalisation, Appendix E).")
    r_max: float = _f(R_MAX, "Upper end of the reward range.")
    eps: float = _f(1e-6, "ε in A_i = (r_i - mean r)/(std r + ε).")
    modulator_params: dict | None = _f(None, "Extra keyword arguments passed to modulate() verbatim.")
    r2vpo_lambda: float = _f(
        1.0,
        "R²VPO λ in w_i = 1/(1 + λ Var_t ρ_it) (Appendix F); ρ_it = "
        "π_θ/π_ref per token (see gcpo_train.trainer on why not π_old).",
    )
    q_hawkeye_alpha: float = _f(ALPHA_BASE, "Q-Hawkeye α in w = 1 - α·Var(r)/Var_max (Appendix F).")
    eg_spo_alpha: float = _f(1.0, "EG-SPO gate strength: gate_i ∝ exp(-α H_i / H̄) (Appendix F).")
    empo_low: float = _f(0.0, "EMPO: keep a query if SE/ln G >= empo_low.")
    empo_high: float = _f(0.5, "EMPO: keep a query if SE/ln G <= empo_high.")
    embedder: str | None = _f(None, "Sentence-transformers model for μ_i (None = packaged all-MiniLM-L6-v2).")
    judge: str = _f(
        JUDGE,
        "Clustering judge for SE/BoT: 'embedding' (offline), 'lexical', 'math' or 'nli:<model>' "
        "(the paper, Appendix E: nli:roberta-large-mnli, as configs/<dataset>/*.yaml set).",
    )
    nli_threshold: float = _f(NLI_THRESHOLD, "Entailment threshold of greedy clustering (Appendix E).")
    use_full_completion: bool | None = _f(
        USE_FULL_COMPLETION,
        "Embed/cluster the full completion instead of the extracted answer; None = auto "
        "(True for math datasets; gcpo_analysis.vocab.full_completion).",
    )
    # --- optimisation ---
    steps: int = _f(2000, "Optimizer steps (generation batches).")
    queries_per_step: int = _f(8, "Prompts per step (all processes together); each gets G rollouts.")
    group_size: int = _f(16, "G, rollouts per prompt (>= 2).")
    learning_rate: float = _f(5e-5, "AdamW learning rate.")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    warmup_steps: int = _f(0, "Linear warm-up steps, then linear decay to 0 at `steps`.")
    lr_schedule: str = _f("linear", "'linear' (warm-up + linear decay) or 'constant' (warm-up only).")
    max_grad_norm: float = _f(1.0, "Gradient clipping norm (0 = off).")
    beta: float = _f(0.002, "KL coefficient β (k3 estimator, reference = base policy).")
    clip_epsilon: float = _f(0.2, "PPO clip ε on ρ_t.")
    num_iterations: int = _f(1, "μ: optimizer updates per generation batch (GRPO Algorithm 1).")
    loss_aggregation: str = _f(
        "dapo",
        "How token losses sum to the step's loss (gcpo_train.loss; TRL's loss_type of the same form): "
        "'dapo' (default; TRL's default too) and 'token' (TRL 'bnpo') = sum over the step's tokens / "
        "their count, every token weighing the same; 'sequence' (TRL 'grpo', the GRPO paper's) = "
        "mean per rollout, then over rollouts, whose 1/|o_i| lets long wrong answers off lightly "
        "and drifts lengths to the cap (Dr. GRPO; issue 25's pilots); 'dr_grpo' = sum / "
        "(rollouts x max_new_tokens), whose gradient scale shrinks as the cap grows.",
    )
    micro_batch_size: int = _f(
        16,
        "Rollouts per forward/backward chunk (gradient accumulation); a chunk stays "
        "inside one group, whose shared prompt runs once per chunk.",
    )
    # --- generation ---
    backend: str = _f(
        "gcpo",
        "Training engine: 'gcpo' (this package's reference loop, transformers generate; "
        "'hf' is an alias) or 'trl' (gcpo_train.trl.GCPOTrainer on TRL's GRPOTrainer: accelerate, "
        "DeepSpeed, FSDP, vLLM). 'vllm' for the gcpo loop is not implemented.",
    )
    temperature: float = _f(TEMPERATURE, "Sampling temperature (also scales logits in the loss, as TRL).")
    top_p: float = _f(1.0, "Nucleus sampling p.")
    max_new_tokens: int = _f(256, "Completion length cap.")
    eval_max_new_tokens: int | None = _f(None, "Completion cap for evaluation (None = max_new_tokens).")
    # --- run ---
    seed: int = _f(SEED, "Seed; each step re-seeds from (seed, step) so resumed runs match.")
    device: str | None = _f(None, "Device override (None = accelerate's choice).")
    output_dir: str = _f("runs/gcpo", "Where log.jsonl, rollouts/, checkpoints/ and eval/ go.")
    log_every: int = _f(1, "Write a log.jsonl row every N steps.")
    save_rollouts: bool = _f(True, "Write each step's rollouts frame to rollouts/step_XXXXXX.parquet.")
    checkpoint_every: int = _f(100, "Checkpoint every N steps (0 = only at the end).")
    save_total_limit: int | None = _f(
        None,
        "Keep only the newest N checkpoints (each holds the trainable weights and optimizer state); None keeps all.",
    )
    eval_every: int = _f(0, "Evaluate on eval_split every N steps (0 = never during training).")
    eval_n: int | None = _f(None, "Queries evaluated during training (None = all).")
    resume: bool = _f(False, "Continue from the latest usable checkpoint in output_dir.")
    overwrite: bool = _f(
        False,
        "Replace the run already in output_dir (its log.jsonl, run.json, "
        "checkpoints/ and rollouts/); without it such a rerun is refused.",
    )
    progress: bool = _f(True, "Show a tqdm bar.")
    tensorboard: bool = _f(False, "Shorthand for report_to: [tensorboard] (kept for old configs).")
    report_to: list[str] | None = _f(
        None,
        "Also send each log row to these backends: tensorboard, wandb, trackio "
        "(each must be installed; an absent one is an error, not a silent skip).",
    )

    def __post_init__(self):
        self.validate()

    # ------------------------------------------------------------------
    def validate(self) -> None:
        """Refuse a configuration that cannot run, naming the field and the allowed values.
        Types first (``_coerce_types``: "1e-4" for a float field is read as the float YAML 1.1
        leaves as a string; ``steps: '3'``, ``use_lora: 'no'``, ``group_size: 2.5`` are refused),
        then ranges."""
        self._coerce_types()
        if self.group_size is None or int(self.group_size) < 2:
            raise ValueError(
                f"group_size must be >= 2 (GRPO needs a group to normalise rewards), got {self.group_size!r}"
            )
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; choices: {', '.join(DATASETS)}")
        known = known_modulators()
        if known is not None and self.modulator not in known:
            raise ValueError(f"unknown modulator {self.modulator!r}; choices: {', '.join(sorted(known))}")
        for key, allowed in (
            ("loss_aggregation", LOSS_AGGREGATIONS),
            ("backend", BACKENDS),
            ("lr_schedule", ("linear", "constant")),
        ):
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key} must be one of {allowed}, got {getattr(self, key)!r}")
        for key in ("steps", "queries_per_step", "num_iterations", "micro_batch_size", "max_new_tokens"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)!r}")
        for key in ("save_total_limit", "n_train", "eval_n"):  # None = all; 0 or less would drop everything
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1 or null (keep all), got {getattr(self, key)!r}")
        self.modulator_params = check_modulator_params(self.modulator_params)
        if not self.r_max > self.r_min:
            raise ValueError(f"r_max ({self.r_max}) must be > r_min ({self.r_min})")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {self.temperature}")
        for key, ok, rule in (
            ("beta", self.beta >= 0, ">= 0"),
            ("eps", self.eps > 0, "> 0"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("train_frac", 0 < self.train_frac < 1, "in (0, 1)"),
            ("alpha_base", self.alpha_base >= 0, ">= 0 (a negative α flips the sign of the advantages)"),
            ("q_hawkeye_alpha", self.q_hawkeye_alpha >= 0, ">= 0 (a negative α flips the sign of the advantages)"),
            ("clip_epsilon", self.clip_epsilon > 0, "> 0"),
            ("learning_rate", self.learning_rate >= 0, ">= 0"),
            ("max_grad_norm", self.max_grad_norm >= 0, ">= 0"),
            ("nli_threshold", 0 <= self.nli_threshold <= 1, "in [0, 1]"),
        ):
            value = getattr(self, key)
            if not (math.isfinite(value) and ok):
                raise ValueError(f"{key} must be a finite number {rule}, got {value!r}")
        from .reporting import check_report_to

        self.report_to = check_report_to(self.report_to) + (["tensorboard"] if self.tensorboard else [])
        self.report_to = check_report_to(self.report_to)  # once each, also when validate runs again
        if self.track_gradvar not in (False, True, "full"):
            raise ValueError(f"track_gradvar must be true, false or 'full', got {self.track_gradvar!r}")
        if self.track_gradvar and self.gradient_checkpointing:
            raise ValueError(
                "track_gradvar needs gradient_checkpointing: false (the recomputation would fire the hooks twice)"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        out = Path(self.output_dir)
        if out.exists() and not out.is_dir():
            raise ValueError(f"output_dir {self.output_dir!r} is a file, not a folder")
        if any(p.exists() and not p.is_dir() for p in out.parents):
            raise ValueError(f"output_dir {self.output_dir!r}: a parent of it is a file")

    def _coerce_types(self) -> None:
        """Check every field against its annotation (``field_kinds``: ``typing.get_type_hints``,
        ``X | None`` read as X), naming the field. Numbers written in scientific notation arrive
        as strings from YAML 1.1 (``1e-4``): those become floats."""
        kinds = field_kinds(type(self))
        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), getattr(kinds[f.name], "__name__", None)
            if value is None and f.default is None:
                continue
            if kind == "float":
                if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
                    value = float(value)
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{f.name} must be a number, got {value!r} ({type(value).__name__})")
                setattr(self, f.name, float(value))
            elif kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{f.name} must be an integer, got {value!r} ({type(value).__name__})")
            elif kind == "bool" and not isinstance(value, bool):
                raise ValueError(f"{f.name} must be true or false, got {value!r} ({type(value).__name__})")
            elif kind == "str" and not isinstance(value, str):
                raise ValueError(f"{f.name} must be a string, got {value!r} ({type(value).__name__})")
            elif f.name == "report_to" and isinstance(value, str):
                continue  # one backend's name, or "none", as TRL accepts it: check_report_to reads it
            elif kind in ("list", "dict") and not isinstance(value, (list, tuple) if kind == "list" else dict):
                raise ValueError(f"{f.name} must be a {kind}, got {value!r} ({type(value).__name__})")

    @property
    def task_is_math(self) -> bool:
        return self.dataset in MATH_DATASETS

    @property
    def full_completion(self) -> bool:
        """use_full_completion resolved: True for math (Appendix E), False for QA, unless set."""
        return full_completion(self.use_full_completion, self.dataset)

    def modulation_settings(self):
        """What the modulator reads (``gcpo_train.modulation.ModulationSettings``), from this config."""
        from .modulation import ModulationSettings

        return ModulationSettings.from_config(self)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def identity(self) -> dict:
        """The fields that define what is trained (used for the checkpoint's config hash)."""
        return {k: v for k, v in self.to_dict().items() if k not in NON_IDENTITY_KEYS}

    def config_hash(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def known_modulators():
    """Names in gcpo_analysis.measures.modulators.MODULATORS, or None when it is not importable."""
    try:
        from gcpo_analysis.measures.modulators import MODULATORS
    except ImportError:
        return None
    return set(MODULATORS)


# modulate()'s own arguments; modulator_params must not pass them a second time
_MODULATE_ARGS = frozenset({"alpha", "r_min", "r_max", "eps"})


def modulator_param_names() -> list[str]:
    """The keyword arguments the modulators take beyond modulate()'s own (q_alpha, eg_alpha, ...),
    read from their signatures."""
    import inspect

    from gcpo_analysis.measures.modulators import MODULATORS

    names = set()
    for mod in MODULATORS.values():
        fn = mod.weight or mod.per_rollout  # a group weight, or the advantages of a per-rollout modulator
        assert fn is not None
        names |= {p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.KEYWORD_ONLY}
    return sorted(names - _MODULATE_ARGS)


def check_modulator_params(params):
    """``modulator_params`` checked: a mapping of known names (the accepted ones listed) to finite
    numbers; an unknown key such as ``q_alfa`` would otherwise be ignored silently."""
    if params is None:
        return None
    if not isinstance(params, dict):
        raise ValueError(f"modulator_params must be a mapping, got {params!r} ({type(params).__name__})")
    accepted = modulator_param_names()
    for key, value in params.items():
        if key not in accepted:
            hint = did_you_mean(key, accepted, n=1)
            raise ValueError(f"modulator_params: unknown key {key!r}{hint}; accepted keys: {', '.join(accepted)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"modulator_params[{key!r}] must be a finite number, got {value!r}")
    return {k: float(v) for k, v in params.items()}


YAML_NODE_LIMIT = 100_000  # nodes after alias expansion; a config has a few hundred


def safe_yaml(text: str, source: str):
    """``yaml.safe_load`` with the alias expansion bounded (a "billion laughs" bomb is refused
    before anything expands) and a syntax error as one line naming the source and the line."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{source}:{where} not valid YAML ({getattr(err, 'problem', None) or err})") from None
    if node is None:
        return None
    sizes: dict = {}

    def size(n) -> int:  # nodes after expansion; aliases point at shared node objects
        if id(n) not in sizes:
            sizes[id(n)] = 0  # a recursive alias counts once
            kids = (
                [x for pair in n.value for x in pair]
                if isinstance(n, yaml.MappingNode)
                else n.value
                if isinstance(n, yaml.SequenceNode)
                else []
            )
            sizes[id(n)] = min(1 + sum(size(k) for k in kids), YAML_NODE_LIMIT + 1)
        return sizes[id(n)]

    if size(node) > YAML_NODE_LIMIT:
        raise ValueError(
            f"{source}: refused, its aliases expand to more than {YAML_NODE_LIMIT:,} values (a YAML alias bomb?)"
        )
    return yaml.safe_load(text)


def field_help() -> dict[str, str]:
    return {f.name: f.metadata["help"] for f in dataclasses.fields(TrainConfig)}


def _check_keys(keys, source: str) -> None:
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    for key in keys:
        if key not in names:
            raise ValueError(f"unknown config key {key!r} in {source}{did_you_mean(key, names)}")


def parse_overrides(pairs) -> dict:
    """``['lr=1e-4', 'use_lora=false']`` → dict, values parsed as YAML scalars/lists."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ValueError(f"override {pair!r} is not of the form key=value")
        key, value = pair.split("=", 1)
        out[key.strip()] = safe_yaml(value, f"override {key.strip()}") if value != "" else None
    return out


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> TrainConfig:
    """Defaults ← YAML file ← overrides; refuses unknown keys naming them (with close matches)."""
    values: dict = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no such config file: {path}")
        loaded = safe_yaml(path.read_text(), str(path)) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: a config file must be a YAML mapping, got {type(loaded).__name__}")
        _check_keys(loaded, str(path))
        values.update(loaded)
    if overrides:
        _check_keys(overrides, "the overrides")
        values.update(overrides)
    return TrainConfig(**values)
