"""gcpo_train.loop.loss's aggregations against TRL 1.16's own loss (GRPOTrainer._compute_loss) on the
same batch: its value and its gradient with respect to the token log-probabilities.

TRL's loss is a method of its trainer; it is called here unbound, on a stand-in holding only
the attributes it reads, with the policy's forward replaced by the given log-probabilities.
"""

from collections import defaultdict
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402

from gcpo_train.loop.loss import LOSS_AGGREGATIONS, TRL_LOSS_TYPE, grpo_loss  # noqa: E402


class _OneProcess:
    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    def gather_for_metrics(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


def trl_loss(loss_type, logp, old, ref, adv, mask, *, beta, eps, t_max, accumulation=1, step_tokens=None):
    """TRL's loss of one micro-batch of an accumulation window of ``accumulation`` micro-batches
    (steps_per_generation = accumulation: one generation batch per optimizer step, as gcpo's)."""
    B, T = mask.shape
    stand_in = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        loss_type=loss_type,
        epsilon_low=eps,
        epsilon_high=eps,
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=accumulation),
        beta=beta,
        use_vllm=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=accumulation,
        accelerator=_OneProcess(),
        max_completion_length=t_max,
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list)},
    )
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": torch.tensor(float(mask.sum() if step_tokens is None else step_tokens)),
    }
    return GRPOTrainer._compute_loss(stand_in, None, inputs)


def _batch(seed=0, B=6, T=7, t_max=9):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64) - 0.1).requires_grad_(True)
    old = logp.detach() + 0.15 * torch.randn(B, T, generator=g, dtype=torch.float64)  # some ratios clip
    ref = logp.detach() + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    lengths = torch.tensor([7, 1, 3, 5, 2, 6])[:B]
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    return logp, old, ref, adv, mask, t_max


def _value_and_grad(fn, logp):
    logp.grad = None
    loss = fn()
    loss.backward()
    return float(loss.detach()), logp.grad.clone()


def test_every_form_has_a_trl_loss_type():
    assert set(TRL_LOSS_TYPE) == set(LOSS_AGGREGATIONS)


# (seed, micro-batches of the 6 rollouts of one optimizer step): one batch, or two of 3
STEPS = {"one batch": (0, (slice(0, 6),)), "two micro-batches": (1, (slice(0, 3), slice(3, 6)))}


@pytest.mark.parametrize(
    "aggregation, step",
    [(a, "one batch") for a in LOSS_AGGREGATIONS]
    # TRL's bnpo divides each micro-batch by its own tokens, gcpo's 'token' by the step's:
    # test_token_is_bnpo_of_the_whole_step_not_of_each_micro_batch
    + [(a, "two micro-batches") for a in LOSS_AGGREGATIONS if a != "token"],
)
def test_step_loss_matches_trl(aggregation, step):
    """The summed micro-batch losses of one optimizer step (what the accumulated gradient sees)
    and their gradient agree with TRL's, whose dapo divides by the whole generation batch's tokens
    (num_items_in_batch). One batch gives grpo_loss no step-wide normalisers: its defaults are
    the batch's own."""
    seed, parts = STEPS[step]
    logp, old, ref, adv, mask, t_max = _batch(seed=seed)
    kw = dict(beta=0.04, eps=0.2, t_max=t_max)
    accumulated = len(parts) > 1
    step_wide = dict(n_seqs=6, n_tokens=float(mask.sum())) if accumulated else {}

    def ours():
        return sum(
            grpo_loss(
                logp[s],
                old[s],
                ref[s],
                adv[s],
                mask[s],
                beta=kw["beta"],
                clip_epsilon=kw["eps"],
                aggregation=aggregation,
                max_completion_length=t_max,
                **step_wide,
            ).loss
            for s in parts
        )

    def theirs():
        return sum(
            trl_loss(
                TRL_LOSS_TYPE[aggregation],
                logp[s],
                old[s],
                ref[s],
                adv[s],
                mask[s],
                accumulation=len(parts),
                step_tokens=step_wide.get("n_tokens"),
                **kw,
            )
            for s in parts
        )

    a, b = _value_and_grad(ours, logp), _value_and_grad(theirs, logp)
    assert a[0] == pytest.approx(b[0], rel=1e-12)
    torch.testing.assert_close(a[1], b[1], rtol=1e-12, atol=1e-15)


def test_token_is_bnpo_of_the_whole_step_not_of_each_micro_batch():
    """TRL's bnpo divides each micro-batch by its own tokens; gcpo's 'token' (and 'dapo') by the
    step's, so chunking never changes its gradient. With unequal token counts the two differ."""
    logp, old, ref, adv, mask, t_max = _batch(seed=2)
    kw = dict(beta=0.0, eps=0.2, t_max=t_max)
    halves = (slice(0, 2), slice(2, 6))  # 8 and 16 tokens
    ours = sum(
        grpo_loss(
            logp[s],
            old[s],
            None,
            adv[s],
            mask[s],
            beta=0.0,
            clip_epsilon=0.2,
            n_tokens=float(mask.sum()),
            aggregation="token",
        ).loss
        for s in halves
    )
    whole = trl_loss("bnpo", logp, old, ref, adv, mask, **kw)
    per_micro = sum(trl_loss("bnpo", logp[s], old[s], ref[s], adv[s], mask[s], accumulation=2, **kw) for s in halves)
    assert float(ours) == pytest.approx(float(whole), rel=1e-12)
    assert abs(float(ours) - float(per_micro)) > 1e-3


@pytest.mark.parametrize("aggregation", LOSS_AGGREGATIONS)
def test_trl_backend_trains_the_same_form(aggregation, tmp_path):
    from gcpo_train.config import TrainConfig
    from gcpo_train.trl.backend import gcpo_config_from

    cfg = TrainConfig(
        model="tiny:llama", loss_aggregation=aggregation, output_dir=str(tmp_path), device="cpu", judge="lexical"
    )
    trl_cfg = gcpo_config_from(cfg)
    assert trl_cfg.loss_type == TRL_LOSS_TYPE[aggregation]
    assert trl_cfg.max_completion_length == cfg.max_new_tokens  # dr_grpo's T_max on both sides


def test_default_is_trls_default():
    import dataclasses

    from trl import GRPOConfig

    from gcpo_train.config import TrainConfig

    trl_default = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}["loss_type"]
    assert TRL_LOSS_TYPE[TrainConfig().loss_aggregation] == trl_default == "dapo"
