"""The measures registry: every measure of the groups frame, what it needs, and its weight.

Modelled on lm-polygraph's estimator protocol (an estimator declares the statistics it depends
on and computes its value from them): a ``Measure`` declares what it reads, and ``values`` turns
the ``GroupFeatures`` of several groups of one size G into one number per group.

What a measure can need: the features ``prepare.prepare_groups`` computes (``needs``: the
embeddings mu_i, the semantic clusters; the names of ``vocab``, as ``Modulator.needs`` names
them), a column of the rollouts frame (``columns``: token_entropy, logprob; ``optional_columns``:
n_tokens), the rewards (``rewards``). ``score.score_groups`` builds what the requested measures
need once and calls each measure on the groups of each size: the geometry and reward measures
(cd, bot, rd) are vectorised over those groups, the entropies run group by group.

Each formula lives once, in ``dispersion`` and ``entropy``; the modulators call the same
functions (``modulators.seed_grpo_weight``, ``kle_weight``, ``advantages.gcpo_weight``), and the
weights here are the modulators' omega(q): ``w_cd``/``w_bot`` = clip(1 - alpha_G u^2, 0, 1)
(Sections 3.1-3.2), ``w_rd`` = 1 + alpha_G RD (Section 3.3), ``w_se``/``w_se_lw``/``w_kle`` =
max(0, 1 - alpha_base u / ln G) (Seed-GRPO's linear scaling).

Adding a measure is one file: its values function under ``@register_measure(name, ...)``
(docs/guides/extending.md). The groups frame's columns (``frame_order``), ``--measures`` and its
help, the study's defaults (``default_measures``), labels and table order are read from
``MEASURE_REGISTRY``; nothing else lists the measures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..registry import Registry
from ..vocab import CLUSTERS, EMBEDDINGS
from .dispersion import (
    barycentric_transport_batch,
    cosine_dispersion_batch,
    geometry_weight,
    rd_weight,
    reward_dispersion_batch,
)
from .entropy import entropy_weight, kernel_language_entropy, predictive_entropy, se_logweights, semantic_entropy

if TYPE_CHECKING:
    from .modulators import GroupFeatures

Groups = Sequence["GroupFeatures"]
# values(groups of one size G, r_min, r_max) -> (N,); weight(values, G, alpha_base) -> (N,)
ValuesFn = Callable[[Groups, float, float], np.ndarray]
WeightFn = Callable[[np.ndarray, int, float], "float | np.ndarray"]
# rollouts column -> the GroupFeatures field that carries it
FEATURE_OF_COLUMN = {"token_entropy": "token_entropy", "logprob": "logprobs", "n_tokens": "n_tokens"}
LAST = 1_000  # the rank of a measure that names none: after the built-in ones


@dataclass(frozen=True)
class Measure:
    """One measure of the groups frame (a column named ``name``) and its weight column.

    ``label``: its name in the study's tables and figures. ``frame_rank``/``table_rank``: its
    place among the groups frame's columns and the study's table columns (ties keep the
    registration order; a new measure goes last). ``default``: compared by the study (and scored
    by ``score_groups``) when no ``measures`` are named; ``needs_logprob``-style requirements are
    read from ``columns``."""

    name: str
    values: ValuesFn
    needs: frozenset[str] = frozenset()  # computed by prepare_groups: EMBEDDINGS, CLUSTERS
    columns: tuple[str, ...] = ()  # rollouts columns it reads (refused when missing)
    optional_columns: tuple[str, ...] = ()  # read when present
    rewards: bool = False  # reads the rewards (and their declared range)
    weight_column: str | None = None
    weight: WeightFn | None = None
    source: str = ""
    label: str = ""
    frame_rank: int = LAST
    table_rank: int = LAST
    default: bool = True

    def reads(self) -> list[str]:
        """The ``GroupFeatures`` fields this measure reads (the rewards, what ``needs`` and ``columns`` name)."""
        fields = [FEATURE_OF_COLUMN[c] for c in self.columns + self.optional_columns]
        fields += [need for need in (EMBEDDINGS, CLUSTERS) if need in self.needs]
        return (["rewards"] if self.rewards else []) + fields

    def compute(self, groups: Groups, r_min: float, r_max: float) -> np.ndarray:
        """``values`` with the registry's checks on every measure: the numbers it reads finite
        (NaN or inf refused, naming the field and the group), and one finite real value per group."""
        for name in self.reads():
            for k, g in enumerate(groups):
                value = getattr(g, name)
                if value is not None and not np.isfinite(np.asarray(value, dtype=float)).all():
                    raise ValueError(f"measure {self.name!r}: group {k} has a NaN or infinite {name!r}")
        out = np.asarray(self.values(groups, r_min, r_max))
        if out.shape != (len(groups),) or out.dtype.kind != "f" or not np.isfinite(out).all():
            raise ValueError(
                f"measure {self.name!r} gave values of shape {out.shape} and dtype {out.dtype} for "
                f"{len(groups)} groups; it must give one finite float per group"
            )
        return out


MEASURE_REGISTRY: Registry[Measure] = Registry("measure")


def register_measure(
    name: str,
    *,
    label: str | None = None,
    needs: Iterable[str] = (),
    columns: tuple[str, ...] = (),
    optional_columns: tuple[str, ...] = (),
    rewards: bool = False,
    weight: WeightFn | None = None,
    weight_column: str | None = None,
    source: str = "",
    frame_rank: int = LAST,
    table_rank: int = LAST,
    default: bool = True,
) -> Callable[[ValuesFn], ValuesFn]:
    """Decorator: register ``values(groups of one size G, r_min, r_max) -> (N,)`` as the measure
    ``name`` (verl's ``@register_adv_est`` habit). Everything that lists measures (the groups
    frame's columns, ``--measures``, the study's defaults, labels and table order) reads this
    registry, so a new measure is one file: its formula and this decorator. A weight function
    gives the column ``w_<name>`` unless ``weight_column`` names another. A name registered twice
    is refused (``MEASURE_REGISTRY.pop(name)`` first to replace one)."""
    from ..frames import RESERVED_COLUMNS, reserved_column
    from ..registry import check_name

    check_name("measure", name)
    column = (f"w_{name}" if weight_column is None else weight_column) if weight is not None else None
    if column is not None:  # a frame column and a log key, as a measure's name is (``../x`` is no column)
        check_name("weight column", column)
    clash = reserved_column(name)
    if clash is not None:
        raise ValueError(f"measure name {name!r} refused: {clash}; choose another name")
    taken = {c for m in MEASURE_REGISTRY.values() for c in (m.name, m.weight_column) if c}
    if name not in MEASURE_REGISTRY:  # (a name registered twice is refused by the registry itself)
        if name in taken:  # another measure's weight column
            raise ValueError(f"measure name {name!r} refused: it is another measure's weight column")
        if column is not None and (column in taken or column == name or column in RESERVED_COLUMNS):
            raise ValueError(
                f"measure {name!r}: its weight column {column!r} is already a column of the frames; choose another"
            )
    return MEASURE_REGISTRY.decorator(
        name,
        lambda values: Measure(
            name,
            values,
            needs=frozenset(needs),
            columns=tuple(columns),
            optional_columns=tuple(optional_columns),
            rewards=rewards,
            weight_column=column,
            weight=weight,
            source=source,
            label=label or name,
            frame_rank=frame_rank,
            table_rank=table_rank,
            default=default,
        ),
    )


def _ranked(key: str) -> list[str]:
    position = {name: i for i, name in enumerate(MEASURE_REGISTRY)}
    return sorted(MEASURE_REGISTRY, key=lambda n: (getattr(MEASURE_REGISTRY[n], key), position[n]))


def frame_order() -> list[str]:
    """The groups frame's measure columns in order: every registered measure, none dropped."""
    return _ranked("frame_rank")


def table_order() -> list[str]:
    """The study's table columns in order (every registered measure)."""
    return _ranked("table_rank")


def default_measures() -> tuple[str, ...]:
    """The measures the study compares when none are named (``Measure.default``), in registration order."""
    return tuple(n for n, m in MEASURE_REGISTRY.items() if m.default)


def measure_help() -> str:
    """The ``--measures`` help: the registered names and the rollouts columns each one reads."""
    reads = [f"{n} reads {', '.join(m.columns)}" for n, m in MEASURE_REGISTRY.items() if m.columns]
    return f"comma-separated: {', '.join(MEASURE_REGISTRY)}, or 'all' (rollouts columns: {'; '.join(reads)})"


class RegistryView(Mapping[str, Any]):
    """A read-only mapping computed from a registry at each access, so a measure registered
    after import (a plug-in, a test) is in it: ``score.MEASURES``, ``gap.MEASURE_LABELS``."""

    def __init__(self, registry: Mapping[str, Any], get: Callable[[Any], Any]):
        self._registry, self._get = registry, get

    def __getitem__(self, name: str) -> Any:
        return self._get(self._registry[name])

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._registry))

    def __len__(self) -> int:
        return len(self._registry)

    def __repr__(self) -> str:
        return repr(dict(self))


def _field(groups: Groups, name: str) -> list[np.ndarray]:
    """One feature of every group, refusing a group that lacks it."""
    out = []
    for g in groups:
        value = getattr(g, name)
        if value is None:
            raise ValueError(f"a group lacks {name!r}, which the measure needs")
        out.append(np.asarray(value))
    return out


# ------------------------------------------------------------------ batch functions
@register_measure(
    "token_entropy",
    label="Entropy",
    columns=("token_entropy",),
    source="mean token entropy",
    frame_rank=3,
    table_rank=0,
)
def token_entropy_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Mean over the G rollouts of each rollout's mean per-token entropy (the rollouts column),
    in the column's own dtype (a trainer frame's float32 stays float32, as pandas' mean keeps it).
    Unlike ``entropy.mean_token_entropy`` a group of one keeps its rollout's value (the groups
    frame has always done so)."""
    return np.array([np.mean(h) for h in _field(groups, "token_entropy")])


@register_measure(
    "pe",
    label="PE",
    columns=("logprob",),
    source="predictive entropy (Malinin & Gales 2021)",
    frame_rank=4,
    table_rank=1,
    default=False,
)
def pe_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Predictive entropy -(1/G) sum_i log p(y_i | x) (Sec. 2.2; ``entropy.predictive_entropy``)."""
    return np.array([predictive_entropy(lp) for lp in _field(groups, "logprobs")])


@register_measure(
    "se",
    label="SE",
    needs={CLUSTERS},
    weight=entropy_weight,
    source="semantic entropy, discrete (Farquhar et al. 2024); weight: Seed-GRPO",
    frame_rank=5,
    table_rank=2,
)
def se_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Discrete semantic entropy, C_k = |k| / G (the empirical cluster mass BoT's Pi_k uses)."""
    return np.array([semantic_entropy(c) for c in _field(groups, "clusters")])


@register_measure(
    "se_lw",
    label="SE-LW",
    needs={CLUSTERS},
    columns=("logprob",),
    optional_columns=("n_tokens",),
    weight=entropy_weight,
    source="semantic entropy, likelihood-weighted (Kuhn et al. 2023); weight: Seed-GRPO",
    frame_rank=6,
    table_rank=3,
)
def se_lw_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Likelihood-weighted SE, C_k = sum_{i in k} p_i / sum_i p_i, p_i from the mean token
    log-probability when n_tokens is known (``entropy.se_logweights``)."""
    clusters = _field(groups, "clusters")
    return np.array([semantic_entropy(c, se_logweights(g.logprobs, g.n_tokens)) for c, g in zip(clusters, groups)])


@register_measure(
    "kle",
    label="KLE",
    needs={EMBEDDINGS},
    weight=entropy_weight,
    source="kernel language entropy (Nikitin et al. 2024); weight: Seed-GRPO's scaling",
    frame_rank=7,
    table_rank=6,
)
def kle_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Kernel language entropy of the embeddings (Nikitin et al. 2024); 0 for G = 1."""
    return np.array(
        [kernel_language_entropy(embeddings=e) if len(e) > 1 else 0.0 for e in _field(groups, "embeddings")]
    )


@register_measure(
    "cd", label="CD", needs={EMBEDDINGS}, weight=geometry_weight, source="GCPO", frame_rank=1, table_rank=4
)
def cd_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Cosine Dispersion of N groups of one size at once (Section 3.1)."""
    return cosine_dispersion_batch(np.stack(_field(groups, "embeddings")))


@register_measure(
    "bot", label="BoT", needs={EMBEDDINGS, CLUSTERS}, weight=geometry_weight, source="GCPO", frame_rank=2, table_rank=5
)
def bot_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Barycentric Transport of N groups of one size at once (Section 3.2)."""
    return barycentric_transport_batch(np.stack(_field(groups, "embeddings")), np.stack(_field(groups, "clusters")))


@register_measure("rd", label="RD", rewards=True, weight=rd_weight, source="GCPO", frame_rank=0, table_rank=7)
def rd_values(groups: Groups, r_min: float, r_max: float) -> np.ndarray:
    """Reward Dispersion of N groups of one size at once, rewards in [r_min, r_max] (Section 3.3)."""
    return reward_dispersion_batch(np.stack([g.rewards for g in groups]), r_min, r_max)


def rollouts_columns(measures: Iterable[str]) -> set[str]:
    """The rollouts columns the named measures read (``Measure.columns``): what
    ``frames.check_logprob_convention`` must look at before they are computed."""
    return {c for m in measures if m in MEASURE_REGISTRY for c in MEASURE_REGISTRY[m].columns}


def score_cli_measures() -> tuple[str, ...]:
    """`gcpo score`'s default measures, read when it runs: the defaults (``default_measures``, a
    plug-in's ``default=True`` included) but those that read the ``logprob`` column (se_lw). It
    differs on purpose: it takes any tool's rollouts frame, and such frames often lack that column
    (the study and score_groups' callers have it)."""
    return tuple(m for m in default_measures() if "logprob" not in MEASURE_REGISTRY[m].columns)
