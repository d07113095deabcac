"""Training configuration: one dataclass, every field documented, loaded from YAML + overrides.

Sources, in order of precedence (later wins): the defaults below, a YAML file (``--config``),
then overrides on the command line, ``--<field> value`` or ``--set field=value ...``, the same
on ``gcpo train``, ``gcpo compare`` and the benches (``gcpo_train.overrides``; values parsed as
YAML scalars, so ``--learning_rate 1e-4 --use_lora false`` = ``--set learning_rate=1e-4
use_lora=false``). Unknown keys are refused with close matches.

Defaults follow the paper's Appendix E ("Training Details"): Qwen2.5-1.5B-Instruct, 2000 steps,
learning rate 5e-5, β = 0.002, G = 16 rollouts, temperature 0.9, α_base = 0.6, rewards in [0, 2].
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from gcpo_analysis.datasets import math_datasets
from gcpo_analysis.errors import did_you_mean
from gcpo_analysis.knob import check_given_values
from gcpo_analysis.knobs import check_knobs, knob, shared
from gcpo_analysis.vocab import PACKAGED_POLICY, PAPER_POLICY, full_completion
from gcpo_train.modulation import ModulationSettings, stated_reward_range
from gcpo_train.sampling.registry import DEFAULT_SAMPLER, sampler, sampler_names

BACKENDS = ("gcpo", "trl", "hf", "vllm")
DTYPES = ("float32", "bfloat16", "float16")
# How token losses sum to the step's loss: gcpo_train.loop.loss implements each (declared here, below the loop)
LOSS_AGGREGATIONS = ("sequence", "token", "dapo", "dr_grpo")

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

# Fields added after runs were recorded, left out of the identity at these values (see identity()).
IDENTITY_OMITTED_AT = {"sampling_kernels": DEFAULT_SAMPLER}


@dataclass
class TrainConfig(ModulationSettings):
    """Every knob of a GCPO/GRPO training run (paper Section 3, Appendix E/F).

    The modulation fields (modulator, alpha_base, r_min, r_max, eps, judge, embedder, ...) are
    inherited from ``gcpo_train.modulation.ModulationSettings``, their one home. Any other field
    is ``knob(default, help, rules)`` (this config's own) or ``shared(name)`` (declared once in
    ``gcpo_analysis.knobs.SHARED``, as StudyConfig has it too); ``validate`` checks every field
    against its declaration (``check_knobs``), then the rules between fields."""

    # --- model ---
    model: str = shared(
        "model",
        PAPER_POLICY,
        help=f"Policy: a hub name or local path; '{PACKAGED_POLICY}' = the offline SmolLM2-135M-Instruct GGUF; "
        "'tiny:llama' = random tiny model (tests).",
    )
    dtype: str = knob("float32", "Policy weight dtype.", choices=DTYPES)
    use_lora: bool = knob(
        True,
        "Train LoRA adapters (peft); False = full fine-tuning, which keeps a "
        "frozen copy of the policy as KL reference (2x the weights in memory).",
    )
    lora_r: int = knob(16, "LoRA rank r.", ge=1)
    lora_alpha: int = knob(32, "LoRA scaling alpha.", gt=0)
    lora_dropout: float = knob(0.0, "LoRA dropout (0 keeps the loss deterministic).", ge=0, lt=1)
    lora_target_modules: list[str] | None = knob(
        None,
        "Module names LoRA wraps.",
        none="the gcpo loop wraps every projection the model has among q/k/v/o/gate/up/down_proj and GPT-2's "
        "c_attn/c_proj/c_fc (policy.LORA_CANDIDATES), --backend trl wraps 'all-linear'",
    )
    gradient_checkpointing: bool = knob(False, "Recompute activations in backward to save memory.")
    share_prompt: bool = shared(
        "share_prompt",
        help="gcpo loop: run each group's prompt once, in generation's prefill and in every "
        "log-prob pass, for its G rollouts (exact up to float rounding; off under gradient "
        "checkpointing). False = the plain full-sequence forward, for comparison.",
    )
    track_gradvar: bool | str = knob(
        False,
        "Record each group's exact gradient variance V_train = (1/G) Σ‖h_i − h̄‖² "
        "of the step's objective over the trainable parameters, from the training backward "
        "(hooks; docs/conventions.md). 'full' also records the study's V (all parameters, "
        "sequence log-probs, GRPO advantages) with one extra forward+backward per group. "
        "Needs no gradient checkpointing. With share_prompt the tracked pass still runs each "
        "prompt once and adds G−1 input-gradient passes through it per group, for each "
        "rollout's own prompt gradient; trained weights are unchanged, bit for bit. "
        "true, false or 'full'.",
        choices=("full",),
    )
    # --- data ---
    dataset: str = shared("dataset")
    data_path: str | None = shared("data_path")
    train_split: str = shared("split", "train", help="Split used for training.")
    eval_split: str = shared("split", "test", help="Split used for evaluation.")
    split_from_single: bool = knob(
        False, "The benchmark ships one split: split it with split_queries(train_frac, seed) into train/test."
    )
    train_frac: float = knob(0.8, "Train fraction when split_from_single is true.", gt=0, lt=1)
    split_seed: int | None = knob(
        None,
        "Seed of split_queries when split_from_single is true. Set it to keep one held-out set across "
        "training seeds (gcpo compare does).",
        ge=0,
        none="seed",
    )
    split_group: str | None = knob(
        None,
        "Column kept together by split_queries (e.g. 'context', so questions on one passage never straddle "
        "train and test).",
        none="by query",
    )
    n_train: int | None = knob(None, "Use only the first n training queries.", ge=1, none="all")
    max_int_answer: int | None = shared("max_int_answer")
    prompt: str | None = shared("prompt")
    max_context_tokens: int = shared("max_context_tokens")
    max_prompt_tokens: int | None = knob(
        1024, "Hard cap on prompt tokens (left-truncated).", ge=1, none="no cap (the whole prompt)"
    )
    # --- optimisation ---
    steps: int = knob(2000, "Optimizer steps (generation batches).", ge=1)
    queries_per_step: int = knob(8, "Prompts per step (all processes together); each gets G rollouts.", ge=1)
    group_size: int = shared("group_size")
    learning_rate: float = knob(5e-5, "AdamW learning rate.", ge=0)
    weight_decay: float = knob(0.0, "AdamW weight decay.", ge=0)
    warmup_steps: int = knob(0, "Linear warm-up steps, then linear decay to 0 at `steps`.", ge=0)
    lr_schedule: str = knob(
        "linear", "'linear' (warm-up + linear decay) or 'constant' (warm-up only).", choices=("linear", "constant")
    )
    max_grad_norm: float = knob(1.0, "Gradient clipping norm (0 = off).", ge=0)
    beta: float = knob(0.002, "KL coefficient β (k3 estimator, reference = base policy).", ge=0)
    clip_epsilon: float = knob(0.2, "PPO clip ε on ρ_t.", gt=0)
    num_iterations: int = knob(1, "μ: optimizer updates per generation batch (GRPO Algorithm 1).", ge=1)
    loss_aggregation: str = knob(
        "dapo",
        "How token losses sum to the step's loss (gcpo_train.loop.loss; TRL's loss_type of the same form): "
        "'dapo' (default; TRL's default too) and 'token' (TRL 'bnpo') = sum over the step's tokens / "
        "their count, every token weighing the same; 'sequence' (TRL 'grpo', the GRPO paper's) = "
        "mean per rollout, then over rollouts, whose 1/|o_i| lets long wrong answers off lightly "
        "and drifts lengths to the cap (Dr. GRPO; issue 25's pilots); 'dr_grpo' = sum / "
        "(rollouts x max_new_tokens), whose gradient scale shrinks as the cap grows.",
        choices=LOSS_AGGREGATIONS,
    )
    micro_batch_size: int = knob(
        16,
        "Rollouts per forward/backward chunk (gradient accumulation); a chunk stays "
        "inside one group, whose shared prompt runs once per chunk.",
        ge=1,
    )
    # --- generation ---
    backend: str = knob(
        "gcpo",
        "Training engine: 'gcpo' (this package's reference loop, transformers generate; "
        "'hf' is an alias) or 'trl' (gcpo_train.trl.GCPOTrainer on TRL's GRPOTrainer: accelerate, "
        "DeepSpeed, FSDP, vLLM). 'vllm' for the gcpo loop is not implemented.",
        choices=BACKENDS,
    )
    temperature: float = shared("temperature", help="Sampling temperature (also scales logits in the loss, as TRL).")
    top_p: float = knob(1.0, "Nucleus sampling p.", gt=0, le=1)
    sampling_kernels: str = knob(
        DEFAULT_SAMPLER,
        "gcpo loop on CPU: how rollouts and greedy evaluations are decoded. 'exact' = transformers "
        "generate, one call per group (samples bit for bit as before). 'onednn' = the step's groups "
        "in one decode loop on fp32 weights prepacked for oneDNN, each group from its own seeded "
        "generator: the same samples up to float rounding (a token differs only when a draw lands "
        "within about 1e-5 of a boundary), 1.3x faster a decode step for one group, 1.7x for two "
        "(2-core AMD EPYC), one packed copy of the weights in memory. 'bf16' = as 'onednn' with "
        "bfloat16 weights and activations (CPUs with bf16 instructions): samples from a bf16 "
        "rounding of the policy, which the loss scores in the run's dtype. 'fused' = as 'onednn' with a "
        "hand-written decode step for float32 Llama models (plain or peft LoRA; others are refused): "
        "q/k/v and gate/up each one packed GEMM, the prompt's keys/values shared by a group, the "
        "same samples up to float rounding, a faster decode step than 'onednn'. 'fused_bf16' = "
        "'fused' with bfloat16 base weights and linear-layer inputs (CPUs with bf16 instructions): "
        "the fastest, samples from a bf16 rounding of the policy as with 'bf16' "
        "(gcpo_train/sampling/kernels.py, gcpo_train/sampling/fused.py, bench/sampling.py).",
        choices=sampler_names,
    )
    max_new_tokens: int = shared("max_new_tokens")
    eval_max_new_tokens: int | None = knob(None, "Completion cap for evaluation.", ge=1, none="max_new_tokens")
    # --- run ---
    seed: int = shared("seed", help="Seed; each step re-seeds from (seed, step) so resumed runs match.")
    device: str | None = shared("device")
    output_dir: str = knob("runs/gcpo", "Where log.jsonl, rollouts/, checkpoints/ and eval/ go.")
    log_every: int = knob(1, "Write a log.jsonl row every N steps.", ge=1)
    save_rollouts: bool = knob(True, "Write each step's rollouts frame to rollouts/step_XXXXXX.parquet.")
    checkpoint_every: int = knob(100, "Checkpoint every N steps (0 = only at the end).", ge=0)
    save_total_limit: int | None = knob(
        None,
        "Keep only the newest N checkpoints (each holds the trainable weights and optimizer state).",
        ge=1,
        none="keep all",
    )
    eval_every: int = knob(0, "Evaluate on eval_split every N steps (0 = never during training).", ge=0)
    eval_n: int | None = knob(None, "Queries evaluated during training.", ge=1, none="all")
    resume: bool = knob(False, "Continue from the latest usable checkpoint in output_dir.")
    overwrite: bool = knob(
        False,
        "Replace the run already in output_dir (its log.jsonl, run.json, "
        "checkpoints/ and rollouts/); without it such a rerun is refused.",
    )
    progress: bool = knob(True, "Show a tqdm bar.")
    tensorboard: bool = knob(False, "Shorthand for report_to: [tensorboard] (kept for old configs).")
    report_to: list[str] | str | None = knob(
        None,
        "Also send each log row to these backends: tensorboard, wandb, trackio "
        "(each must be installed; an absent one is an error, not a silent skip).",
        none="none",
    )

    def __post_init__(self):
        self.validate()

    # ------------------------------------------------------------------
    def validate(self) -> None:
        """Refuse a configuration that cannot run, naming the field and the allowed values:
        every field against its declaration (``check_knobs``: type, range, choices; "1e-4" for a
        float field is read as the float YAML 1.1 leaves as a string; ``steps: '3'``,
        ``use_lora: 'no'``, ``group_size: 2.5`` are refused), then the rules between fields."""
        stated_reward_range(self)
        check_knobs(self)
        self.modulator_params = check_modulator_params(self.modulator_params)
        from gcpo_train.reporting import check_report_to

        self.report_to = check_report_to(self.report_to) + (["tensorboard"] if self.tensorboard else [])
        self.report_to = check_report_to(self.report_to)  # once each, also when validate runs again
        if self.track_gradvar and self.gradient_checkpointing:
            raise ValueError(
                "track_gradvar needs gradient_checkpointing: false (the recomputation would fire the hooks twice)"
            )
        if self.backend == "trl" and not sampler(self.sampling_kernels).fp32_exact:
            raise ValueError(
                f"sampling_kernels {self.sampling_kernels!r} is the gcpo loop's (backend: gcpo); TRL samples "
                f"with its own generate or vLLM: set sampling_kernels: {DEFAULT_SAMPLER}"
            )
        out = Path(self.output_dir)
        if out.exists() and not out.is_dir():
            raise ValueError(f"output_dir {self.output_dir!r} is a file, not a folder")
        if any(p.exists() and not p.is_dir() for p in out.parents):
            raise ValueError(f"output_dir {self.output_dir!r}: a parent of it is a file")

    @property
    def task_is_math(self) -> bool:
        return self.dataset in math_datasets()

    @property
    def full_completion(self) -> bool:
        """use_full_completion resolved: True for math (Appendix E), False for QA, unless set."""
        return full_completion(self.use_full_completion, self.dataset)

    def modulation_settings(self) -> ModulationSettings:
        """What the modulator reads: this config's modulation fields, as a ``ModulationSettings``."""
        return ModulationSettings.from_config(self)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def identity(self) -> dict:
        """The fields that define what is trained (used for the checkpoint's config hash); a field
        added later is left out at its default (``IDENTITY_OMITTED_AT``), so runs written before
        it existed still resume."""
        return {
            k: v
            for k, v in self.to_dict().items()
            if k not in NON_IDENTITY_KEYS and not (k in IDENTITY_OMITTED_AT and v == IDENTITY_OMITTED_AT[k])
        }

    def config_hash(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


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
    from gcpo_analysis.knobs import SHARED, check_value
    from gcpo_analysis.measures.params import PARAM_KNOBS

    accepted = modulator_param_names()
    for key, value in params.items():
        if key not in accepted:
            hint = did_you_mean(key, accepted, n=1)
            raise ValueError(f"modulator_params: unknown key {key!r}{hint}; accepted keys: {', '.join(accepted)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"modulator_params[{key!r}] must be a finite number, got {value!r}")
        if key in PARAM_KNOBS:  # the range of the knob it overrides (q_alpha <= 1, r2vpo_lambda >= 0)
            check_value(f"modulator_params[{key!r}]", float(value), SHARED[PARAM_KNOBS[key]], float)
    return {k: float(v) for k, v in params.items()}


YAML_NODE_LIMIT = 100_000  # nodes after alias expansion; a config has a few hundred


def _unique_key_loader():
    """A ``yaml.SafeLoader`` that refuses a mapping with a key twice (PyYAML keeps the last value
    silently), naming the key and both lines."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first at line {seen[key] + 1}); give each key once",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def safe_yaml(text: str, source: str):
    """YAML as ``yaml.safe_load`` reads it, with the alias expansion bounded (a "billion laughs"
    bomb is refused before anything expands), a key given twice refused, nesting too deep for
    PyYAML's recursive reader refused (its RecursionError named no file), and a syntax error as
    one line naming the source and the line."""
    try:
        return _safe_yaml(text, source)
    except RecursionError:
        raise ValueError(
            f"{source}: refused, its values are nested too deeply to read (thousands of levels); a config needs a few"
        ) from None


def _safe_yaml(text: str, source: str):
    import yaml

    loader = _unique_key_loader()

    def one_line(err: yaml.YAMLError) -> ValueError:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return ValueError(f"{source}:{where} not valid YAML ({getattr(err, 'problem', None) or err})")

    try:
        node = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as err:
        raise one_line(err) from None
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
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506  (a SafeLoader subclass)
    except yaml.YAMLError as err:
        raise one_line(err) from None


def field_help() -> dict[str, str]:
    return {f.name: f.metadata["help"] for f in dataclasses.fields(TrainConfig)}


def _check_keys(keys, source: str) -> None:
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    for key in keys:
        if key not in names:
            raise ValueError(f"unknown config key {key!r} in {source}{did_you_mean(key, names)}")


def parse_overrides(pairs) -> dict:
    """``['lr=1e-4', 'use_lora=false']`` → dict, values parsed as YAML scalars/lists. A key given
    twice is refused, as in a config file (the later value would silently win)."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ValueError(f"override {pair!r} is not of the form key=value")
        key, value = pair.split("=", 1)
        if key.strip() in out:
            raise ValueError(f"--set: duplicate key {key.strip()!r} ({pair!r} after an earlier value); give each once")
        out[key.strip()] = safe_yaml(value, f"override {key.strip()}") if value != "" else None
    return out


def read_config_file(path: str | Path) -> dict:
    """A config file's YAML mapping as written (safe loader, size and node limits), keys not yet
    checked; a missing file or a document that is not a mapping is refused, naming the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such config file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        from gcpo_analysis.errors import not_utf8

        raise not_utf8(path, err) from None
    loaded = safe_yaml(text, str(path)) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: a config file must be a YAML mapping, got {type(loaded).__name__}")
    return loaded


def check_given(values: dict, source: dict[str, str]) -> None:
    """The TrainConfig fields in ``values`` (a config file's mapping, the command line's
    overrides), checked before the config is built so that the error names where each was given
    (``source[name]``: the file, ``--set steps=nan``): each field against its declaration
    (``knob.check_given_values``), and the two whose checks are their own functions."""
    from gcpo_train.reporting import check_report_to

    checks = {"modulator_params": check_modulator_params, "report_to": check_report_to}
    check_given_values(TrainConfig, values, source, checks)


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> TrainConfig:
    """Defaults ← YAML file ← overrides; refuses unknown keys naming them (with close matches),
    and a bad value in the file naming the file and the key."""
    values: dict = {}
    if path is not None:
        loaded = read_config_file(path)
        _check_keys(loaded, str(path))
        check_given(loaded, dict.fromkeys(loaded, str(path)))  # the error names the file
        values.update(loaded)
    if overrides:
        _check_keys(overrides, "the overrides")
        values.update(overrides)
    return TrainConfig(**values)
