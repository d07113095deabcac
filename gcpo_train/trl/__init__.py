"""GCPO inside TRL: ``GCPOConfig`` and ``GCPOTrainer``, drop-in subclasses of TRL's GRPO.

    from gcpo_train.trl import GCPOConfig, GCPOTrainer
    args = GCPOConfig(output_dir="out", modulator="bot_rd", num_generations=8, r_max=1.0)
    trainer = GCPOTrainer(model="Qwen/Qwen2.5-1.5B-Instruct", reward_funcs=my_reward,
                          args=args, train_dataset=dataset)
    trainer.train()

Everything that is not advantage modulation stays TRL's: generation (transformers or vLLM),
loss types, ``scale_rewards``, KL, logging (every ``report_to`` backend), checkpoints, and
multi-process training through accelerate (DDP, DeepSpeed ZeRO, FSDP; see configs/accelerate/).

Semantics (paper Section 3.4). After TRL has computed the group-standardised advantages A_i,
each rollout's advantage becomes A_i * omega(q), omega(q) the weight of its group from
``gcpo_analysis.measures.modulators.group_weight`` — the weight ``modulate`` multiplies GRPO's
advantages by in ``gcpo_train``'s own loop; there is no second formula here, and the weight does
not depend on TRL's choice of standard deviation. A group's G completions can live on several processes: the
texts and rewards of the whole generation batch are gathered first (accelerate's
``gather_object``; TRL gathers the rewards itself), every process computes the weights of all
groups from all G rollouts, and multiplies its own slice (TRL's ``process_slice``).

Only modulators whose effect is one weight per group run under TRL (``trl_modulators()``, those
with a ``Modulator.weight``): ``none, se, kle, care, cd, bot, rd, cd_rd, bot_rd, q_hawkeye``.
Refused at construction, with the reason: ``eg_spo`` (per-rollout gates from token entropies),
``r2vpo`` (per-rollout variance of the policy ratio against the reference policy) and ``empo``
(it replaces the reward by cluster frequency instead of weighting the advantage). Under TRL, ``se`` is the discrete SE
(TRL computes no sequence log-probabilities before the advantages).

Speed (``share_prompt``, on by default): each group's prompt runs once in TRL's log-prob passes
(``gcpo_train.trl.shared_prompt``); TRL's numbers up to float rounding (``share_prompt=False``:
bit for bit), with named fallbacks. The reward range RD and Q-Hawkeye read: stated, running, or
from the reward functions' declared bounds (``gcpo_train.trl.reward_range``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import torch
from accelerate.utils import gather_object
from trl import GRPOConfig, GRPOTrainer

from gcpo_analysis.knobs import check_knobs, check_reward_range, knob, shared
from gcpo_analysis.measures.modulators import MODULATORS
from gcpo_analysis.vocab import R_MAX, R_MIN, TRL_USE_FULL_COMPLETION
from gcpo_train.modulation import GroupWeightSettings, ModulationSettings
from gcpo_train.trl.reward_range import REWARD_RANGES, RunningRange, range_source
from gcpo_train.trl.shared_prompt import SharedPromptMixin


def trl_modulators() -> tuple[str, ...]:
    """The registered modulators that run under TRL: those with one weight per group."""
    return tuple(name for name, m in MODULATORS.items() if m.weight is not None)


def trl_refused() -> dict[str, str]:
    """The registered modulators TRL cannot run, each with its reason (``Modulator.no_weight``)."""
    return {name: m.no_weight for name, m in MODULATORS.items() if m.weight is None}


def check_trl_modulator(name: str) -> None:
    """Refuse a modulator that cannot run under TRL, naming it and the reason."""
    MODULATORS.lookup(name)  # an unknown name is refused with the choices
    refused = trl_refused()
    if name in refused:
        raise ValueError(
            f"modulator {name!r} cannot run inside TRL's GRPOTrainer: {refused[name]}. "
            f"Use gcpo_train's own loop (gcpo train --backend gcpo) or one of {', '.join(trl_modulators())}"
        )


@dataclass
class GCPOConfig(GroupWeightSettings, GRPOConfig):
    """``trl.GRPOConfig`` plus the GCPO fields (paper Section 3.4, Appendix E). The modulation
    fields are inherited from ``gcpo_train.modulation.GroupWeightSettings``, their one home (as
    TrainConfig inherits them): the modulator, the measurement tools, alpha_base, the reward range,
    q_hawkeye_alpha, modulator_params and use_full_completion; the modulator must be a group-level
    one (``trl_modulators()``: the others are refused, naming the reason). eps and the per-rollout
    modulators' knobs are not fields: TRL makes the advantages, and those modulators are refused.
    Every field is checked by the same validator as TrainConfig's (``check_knobs``).
    ``HfArgumentParser``/``TrlParser`` read it as they read GRPOConfig."""

    reward_range: str = knob(
        "declared",
        "Where RD's and Q-Hawkeye's reward range comes from when r_min/r_max are not stated: 'declared', the "
        "reward functions' reward_bounds = (low, high) combined with reward_weights (an error when the trainer "
        "is built if one declares none and the modulator reads the range), or 'running', the min and max of "
        "every reward of the run so far (logged as gcpo/r_min, gcpo/r_max; RD_max then measures against the "
        "rewards seen so far).",
        choices=REWARD_RANGES,
    )
    share_prompt: bool = shared(
        "share_prompt",
        help="Run each group's prompt once in TRL's log-prob passes (training forward and backward, old-policy"
        " and reference) and in transformers generation's prefill: the G rows that share a prompt get its"
        " keys/values repeated and only their completions run. Equal to TRL's numbers up to float rounding,"
        " not bit for bit: measured over 6 steps on a tiny model with beta=0.04 (bench/results/trl_rounding.md,"
        " docs/guides/trl.md), max |delta kl| 3e-8 on a kl of 0.04 and max |delta grad_norm| 6e-8 on 0.9 in"
        " fp32, 7e-4 and 8e-3 under bf16 autocast, and runs drift apart as the rounding feeds the updates;"
        " share_prompt=False gives GRPOTrainer's numbers bit for bit."
        " Falls back to TRL's pass, named in a warning and in the metrics gcpo/shared_prompt and"
        " gcpo/shared_prefill (fraction of passes shared), under gradient checkpointing (TRL's default; the"
        " training forward only, set gradient_checkpointing=False to share it too), DeepSpeed ZeRO-3, FSDP,"
        " multimodal inputs, the MoE aux loss, the entropy bonus, prompt-learning PEFT, a model without a"
        " cache, and in generation for beam search or any setting other than greedy/sampling with one"
        " sequence per row, or a generate patched on the model instance.",
    )
    log_group_measures: bool = knob(
        False,
        "Also write each step's per-group measures and weights as "
        "output_dir/gcpo_groups/step_XXXXXX.parquet (main process).",
    )

    def __post_init__(self):
        super().__post_init__()
        check_knobs(self, gcpo_config_fields())  # TRL checks its own fields, but not the temperature:
        # 0, a negative, NaN or a float32-subnormal one would fail at the first step inside torch
        from gcpo_analysis.knob import check_value
        from gcpo_analysis.knobs import SHARED

        self.temperature = check_value("temperature", self.temperature, SHARED["temperature"], float)
        if self.use_full_completion is None:  # auto: a TRL dataset has no name (vocab says why)
            self.use_full_completion = TRL_USE_FULL_COMPLETION
        check_reward_range(
            R_MIN if self.r_min is None else self.r_min, R_MAX if self.r_max is None else self.r_max
        )  # one stated end against the other's default
        check_trl_modulator(self.modulator)
        from gcpo_train.config import check_modulator_params

        self.modulator_params = check_modulator_params(self.modulator_params)

    def modulation_settings(self, reward_range: tuple[float, float] | None = None) -> ModulationSettings:
        """What ``GroupModulator`` reads, with the reward range the trainer resolved
        (``reward_range.range_source``; None: the stated one, an unstated end at its default).
        eps is the default (TRL makes the advantages; we only scale them), and the per-rollout
        modulators' knobs keep their defaults: those are refused."""
        names = [f.name for f in dataclasses.fields(ModulationSettings)]
        values = {n: getattr(self, n) for n in names if hasattr(self, n)}
        low, high = reward_range or (
            R_MIN if self.r_min is None else self.r_min,
            R_MAX if self.r_max is None else self.r_max,
        )
        return ModulationSettings(**{**values, "r_min": low, "r_max": high})


def completion_text(completion) -> str:
    """TRL passes plain strings, or (conversational) a list of messages: take the last content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        return (
            content
            if isinstance(content, str)
            else " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        )
    return str(completion)


def modulation_settings(config) -> ModulationSettings:
    """What ``gcpo_train.modulation.GroupModulator`` reads, from a GCPOConfig (its
    ``modulation_settings()``) or any config with every ``ModulationSettings`` field."""
    if isinstance(config, GCPOConfig):
        return config.modulation_settings()
    return ModulationSettings.from_config(config)


class GCPOTrainer(SharedPromptMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages are multiplied by the GCPO group weights.

    Same constructor as TRL's; ``args`` is a ``GCPOConfig``, or None for the default one named
    as TRL names its default (``output_dir`` "<model name>-GCPO"; TRL's is "<model name>-GRPO"),
    whose reward range is ``reward_range="running"`` when the reward functions declare no bounds
    (a warning says so). ``embedder`` / ``judge``
    (keyword-only) inject ready objects (tests, offline runs); otherwise they are built from
    the config on first use, so ``modulator="none"``/``"rd"`` never loads an embedding model.
    The reward range RD and Q-Hawkeye read is resolved here (``gcpo_train.trl.reward_range``):
    ``gcpo_reward_range`` holds (source, range).
    """

    # The model card's name, tags and citation, as TRL's trainers set them (else it would say GRPO).
    _name = "GCPO"
    _tag_names = ["trl", "grpo", "gcpo"]
    _paper = {  # no arXiv id yet, so no "id"
        "title": "Why Semantic Entropy Fails: Geometry-Aware and Calibrated Uncertainty for Policy Optimization",
        "citation": "@article{zhang2026gcpo,\n"
        "    title  = {{Why Semantic Entropy Fails: Geometry-Aware and Calibrated Uncertainty for Policy "
        "Optimization}},\n"
        "    author = {Zheyuan Zhang and Kaiwen Shi and Han Bao and Zehong Wang and Tianyi Ma and Yanfang Ye},\n"
        "    year   = 2026,\n"
        "}",
    }

    def __init__(self, *args, embedder=None, judge=None, **kwargs):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        funcs = kwargs.get("reward_funcs", args[1] if len(args) > 1 else None)
        funcs = [] if funcs is None else list(funcs) if isinstance(funcs, (list, tuple)) else [funcs]
        if config is None:
            config = default_config(kwargs.get("model", args[0] if args else None), funcs)
            if len(args) > 2:
                args = (*args[:2], config, *args[3:])
            else:
                kwargs["args"] = config
        if not isinstance(config, GCPOConfig):
            raise TypeError(f"GCPOTrainer needs args=GCPOConfig(...) or None, got {type(config).__name__}")
        check_trl_modulator(config.modulator)
        from gcpo_train.modulation import GroupModulator

        self.gcpo_reward_range = range_source(
            config.r_min, config.r_max, config.reward_range, config.modulator, funcs, config.reward_weights
        )
        self._gcpo_running = RunningRange()
        self.group_modulator = GroupModulator(
            config.modulation_settings(self.gcpo_reward_range[1]), embedder=embedder, judge=judge
        )
        self._gcpo_batch = None
        self.gcpo_last = None  # the last step's gathered texts, rewards and weights (for tests and logs)
        super().__init__(*args, **kwargs)

    # TRL's reward step runs on every process with the local completions and returns the rewards
    # of the whole generation batch: gather the texts alongside, in the same order.
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gcpo_batch = (gather_object([completion_text(c) for c in completions]), rewards_per_func)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        G = self.num_generations if mode == "train" else self.num_generations_eval
        texts, rewards_per_func = self._gcpo_batch
        rewards = scored_rewards(rewards_per_func, self.reward_weights)
        if self.gcpo_reward_range[0] == "running":  # this step's rewards widen the range first
            low, high = self._gcpo_running.update(rewards)
            self.group_modulator.config = dataclasses.replace(self.group_modulator.config, r_min=low, r_max=high)
            self.gcpo_reward_range = ("running", (low, high))
            self._metrics[mode]["gcpo/r_min"].append(low)
            self._metrics[mode]["gcpo/r_max"].append(high)
        t0 = time.perf_counter()
        weights, rows = self._group_weights_of_batch(texts, rewards, G)
        self._metrics[mode]["gcpo/time_weights"].append(time.perf_counter() - t0)  # the measurement overhead
        local = slice(self.accelerator.process_index * len(inputs), (self.accelerator.process_index + 1) * len(inputs))
        w = torch.as_tensor(
            np.repeat(weights, G)[local], dtype=out["advantages"].dtype, device=out["advantages"].device
        )
        out["advantages"] = out["advantages"] * (w if out["advantages"].dim() == 1 else w[:, None])
        self.gcpo_last = dict(texts=texts, rewards=rewards, weights=weights, rows=rows, local=local)
        self._log_gcpo(mode, weights, rows)
        return out

    def _group_weights_of_batch(self, texts: list[str], rewards: np.ndarray, G: int) -> tuple[np.ndarray, list[dict]]:
        """The module function ``group_weights`` (the one of that name) with this config's settings."""
        a = cast(GCPOConfig, self.args)
        return group_weights(
            texts,
            rewards,
            G,
            group_modulator=self.group_modulator,
            modulator=a.modulator,
            # auto (None) is resolved when the config is made; set to None after, it is auto again
            use_full_completion=TRL_USE_FULL_COMPLETION if a.use_full_completion is None else a.use_full_completion,
        )

    def _log_gcpo(self, mode: str, weights: np.ndarray, rows: list[dict]) -> None:
        self._metrics[mode]["gcpo/weight_mean"].append(float(np.mean(weights)))
        # groups whose every reward function returned None: weight 1 (their advantages are 0 anyway)
        self._metrics[mode]["gcpo/groups_unscored"].append(float(sum(row.get("unscored", 0.0) for row in rows)))
        self._metrics[mode]["gcpo/weight_min"].append(float(np.min(weights)))
        for key in sorted({k for row in rows for k in row} - {"unscored"}):
            values = [row[key] for row in rows if key in row]
            self._metrics[mode][f"gcpo/{key}"].append(float(np.mean(values)))
        args = cast(GCPOConfig, self.args)
        if args.log_group_measures and self.accelerator.is_main_process:
            import pandas as pd

            from gcpo_analysis.frames import write_frame

            frame = pd.DataFrame(rows).assign(
                group=np.arange(len(weights)), weight=weights, step=self.state.global_step, mode=mode
            )
            write_frame(
                frame, Path(str(args.output_dir)) / "gcpo_groups" / f"{mode}_step_{self.state.global_step:06d}.parquet"
            )


def default_config(model, reward_funcs) -> GCPOConfig:
    """The config of ``GCPOTrainer(model, reward_funcs)`` without ``args``: named as TRL 1.16's
    GRPOTrainer names its default (the model id's last part, "<name>-GRPO"), with "-GCPO"; the
    running reward range when a range-reading modulator meets reward functions without bounds."""
    import logging

    from trl.trainer.utils import get_config_model_id

    name = model if isinstance(model, str) else get_config_model_id(model.config)
    config = GCPOConfig(f"{name.split('/')[-1]}-GCPO")
    try:
        range_source(None, None, config.reward_range, config.modulator, reward_funcs, config.reward_weights)
    except ValueError:
        config.reward_range = "running"
        logging.getLogger(__name__).warning(
            "GCPOTrainer without args: the reward functions declare no reward_bounds, so %s normalises by the "
            "running reward range (reward_range='running', logged as gcpo/r_min and gcpo/r_max)",
            config.modulator,
        )
    return config


def group_weights(
    texts: list[str],
    rewards,
    G: int,
    *,
    group_modulator,
    modulator: str,
    use_full_completion: bool = TRL_USE_FULL_COMPLETION,
) -> tuple[np.ndarray, list[dict]]:
    """omega(q) of every group of a gathered generation batch — consecutive blocks of G, TRL's
    layout — and each group's measures (``group_weight``'s info). A pure function of the texts and
    rewards: every process computes the same weights from the same gathered batch. A NaN reward
    (no reward function scored the rollout) leaves the rollout out of its group's measures (info
    ``n_scored``); a group with no scored rollout has omega = 1 (info ``unscored``)."""
    from gcpo_analysis.rewards import extract_math_answer, extract_qa_answer

    n = len(texts) // G
    if n * G != len(texts):
        raise ValueError(f"{len(texts)} completions do not split into groups of {G}")
    r = np.asarray(rewards, float)
    # NaN: a rollout no reward function scored (TRL's None); it leaves the group's measures, and
    # a group with no scored rollout gets omega = 1 (TRL gives its rollouts advantage 0)
    kept = [np.flatnonzero(np.isfinite(r[k * G : (k + 1) * G])) for k in range(n)]
    scored = [k for k in range(n) if kept[k].size]
    r_groups = [r[k * G : (k + 1) * G][kept[k]] for k in scored]
    t_groups = [[texts[k * G + i] for i in kept[k]] for k in scored]
    qa_answers = [[extract_qa_answer(t) for t in g] for g in t_groups]
    shown = t_groups if use_full_completion else qa_answers
    # the math judge clusters final answers (answer equivalence), never whole derivations
    answers = [[extract_math_answer(t) or "" for t in g] for g in t_groups] if use_full_completion else qa_answers
    weights, rows = np.ones(n), [{"unscored": 1.0} for _ in range(n)]
    for k in scored:
        rows[k] = {} if kept[k].size == G else {"n_scored": float(kept[k].size)}
    if modulator == "none" or not scored:  # omega = 1: nothing to measure
        return weights, rows
    measured, infos, _ = group_modulator.weigh_groups(r_groups, shown, answers)
    weights[scored] = measured
    for k, info in zip(scored, infos, strict=True):
        rows[k] = {**info, **rows[k]}
    return weights, rows


def scored_rewards(rewards_per_func, reward_weights) -> np.ndarray:
    """TRL's reward of each rollout, sum_j w_j r_j over the reward functions that scored it
    (a None, TRL's "cannot score this row", is NaN and left out, as GRPOTrainer's nansum), and
    NaN where no function scored it: GRPOTrainer leaves those rows out of the group mean and
    std, and GCPO leaves them out of RD, the running range and the other measures."""
    per_func = rewards_per_func.detach()
    rewards = (per_func * reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
    return rewards.cpu().double().numpy()


def gcpo_config_fields() -> list[str]:
    """The fields GCPOConfig adds to GRPOConfig (for docs and the CLI)."""
    base = {f.name for f in dataclasses.fields(GRPOConfig)}
    return [f.name for f in dataclasses.fields(GCPOConfig) if f.name not in base]
