"""Hostile numbers for gcpo_analysis.measures (issues "Trust" and 20): NaN, infinite and
overflowing inputs are refused naming the value, huge and tiny embeddings are rescaled, and an
invalid alpha_base is refused by the function and by `gcpo score`."""

import re

import numpy as np
import pytest

from gcpo_analysis.cli import main
from gcpo_analysis.measures import (
    barycentric_transport,
    barycentric_transport_batch,
    cosine_dispersion,
    gcpo_advantages,
    geometry_weight,
    grpo_advantages,
    grpo_advantages_batch,
    rd_weight,
    reward_dispersion,
    reward_dispersion_batch,
    semantic_entropy,
)
from gcpo_analysis.measures.prepare import prepare_groups


def test_alpha_base_must_be_finite_and_non_negative(rollouts_file, capsys):
    r = np.array([0.0, 1.0, 2.0])
    e = np.eye(3)
    for bad in (-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="alpha_base must be a finite number >= 0"):
            gcpo_advantages(r, e, geometry="cd", alpha_base=bad)
    assert (
        main(
            [
                "score",
                str(rollouts_file),
                "-o",
                str(rollouts_file.with_name("g.parquet")),
                "--measures",
                "rd",
                "--alpha-base",
                "-5",
            ]
        )
        == 2
    )
    assert "alpha_base" in capsys.readouterr().err
    assert not rollouts_file.with_name("g.parquet").exists()


def test_nan_is_refused_not_propagated():
    with pytest.raises(ValueError, match="NaN"):
        geometry_weight(float("nan"), 8)
    with pytest.raises(ValueError, match="NaN"):
        rd_weight(float("nan"), 8)
    with pytest.raises(ValueError, match="missing"):
        semantic_entropy([0.0, float("nan"), 1.0])
    e = np.random.default_rng(0).normal(size=(4, 5))
    with pytest.raises(ValueError, match="missing"):
        barycentric_transport(e, [0.0, np.nan, 1.0, 1.0])
    with pytest.raises(ValueError, match="missing"):
        barycentric_transport_batch(e[None], np.array([[0.0, np.nan, 1.0, 1.0]]))
    # the same words as every other reward check: the group and rollout, not an array index
    with pytest.raises(ValueError, match="NaN or infinite reward of group 1, rollout 0"):
        grpo_advantages_batch([[0.0, 1.0], [np.inf, 1.0]])
    with pytest.raises(ValueError, match="NaN or infinite reward of rollout 2"):
        grpo_advantages([0.0, 1.0, np.nan])


def test_huge_and_tiny_embeddings_are_rescaled_not_refused():
    e = np.random.default_rng(1).normal(size=(6, 8))
    assert cosine_dispersion(e * 1e200) == pytest.approx(cosine_dispersion(e), rel=1e-12)
    assert cosine_dispersion(e * 1e-200) == pytest.approx(cosine_dispersion(e), rel=1e-12)
    labels = [0, 0, 1, 1, 2, 2]
    assert barycentric_transport(e * 1e200, labels) == pytest.approx(barycentric_transport(e, labels), rel=1e-9)
    with pytest.raises(ValueError, match="NaN or infinite"):
        cosine_dispersion(np.full((2, 3), np.inf))


def test_grpo_advantages_refuse_an_overflow():
    from gcpo_analysis.measures import grpo_advantages_batch
    from gcpo_analysis.measures.advantages import grpo_advantages

    with pytest.raises(ValueError, match="overflow"):
        grpo_advantages([1e308, -1e308, 1e308])
    with pytest.raises(ValueError, match="overflow"):
        grpo_advantages_batch([[1e308, -1e308, 1e308]])


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(eps=float("nan")), "eps must be a finite number >= 0"),
        (dict(eps=-1.0), "eps must be a finite number >= 0"),  # flipped every advantage's sign
        (dict(eps=float("inf")), "eps must be a finite number >= 0"),  # zeroed them
        (dict(use_rd="no"), "use_rd must be True or False"),  # a non-empty string counted as True
        (dict(r_max=10**400), "r_max must be a finite number"),  # a bare OverflowError
        (dict(r_min=True), "r_min must be a finite number"),
    ],
)
def test_gcpo_advantages_refuses_a_bad_knob_by_name(kwargs, named):
    e, r, c = np.eye(4), [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1]
    with pytest.raises(ValueError, match=named):
        gcpo_advantages(r, e, clusters=c, **kwargs)


def test_grpo_advantages_refuse_a_bad_eps():
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        grpo_advantages([0.0, 1.0], eps=-1e-3)
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        grpo_advantages_batch([[0.0, 1.0]], eps=float("nan"))


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: reward_dispersion([True, False]), "reward of rollout 0 is True, a boolean"),  # was 0.5
        (lambda: reward_dispersion(np.array([False, True])), "reward of rollout 0 is np.False_, a boolean"),
        (lambda: reward_dispersion([0.5, True]), "reward of rollout 1 is True, a boolean"),  # a float array
        (lambda: reward_dispersion_batch([[0.0, 1.0], [1.0, True]]), "reward of group 1, rollout 1 is True"),
        (lambda: grpo_advantages([1, True]), "reward of rollout 1 is True, a boolean"),
        (lambda: grpo_advantages_batch(np.ones((2, 3), dtype=bool)), "reward of group 0, rollout 0 is np.True_"),
        (lambda: gcpo_advantages([True, False], np.eye(2), clusters=[0, 1]), "reward of rollout 0 is True"),
        (lambda: prepare_groups([["a", "b"]], [[True, 0.0]], (), group_ids=["q7"]), "group 'q7': reward of rollout 0"),
    ],
    ids=["list", "bool-array", "mixed-list", "batch", "grpo", "grpo-batch", "gcpo", "prepare"],
)
def test_a_boolean_is_not_a_reward(call, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        call()


def test_integer_rewards_are_still_rewards():
    assert reward_dispersion([0, 2]) == 1.0 and reward_dispersion(np.array([0, 1, 2, 1])) == pytest.approx(0.5)
    assert grpo_advantages([0, 1]).tolist() == pytest.approx([-1.0, 1.0], abs=1e-5)
