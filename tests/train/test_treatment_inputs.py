"""The effective-treatment and coupling readers (``compare.treatment``) read a comparison's
rollouts and logs as untrusted: ω is made with the config's eps (plain GRPO reads ω = 1), a
rollout twice, another step's rows, a broken group, a grad_norm that is not a number or a file
that is not a rollouts file is refused naming the file and the step, query, line or column, and
the coupling curve comes back by step. Each test failed on the code before its fix. Inputs:
hand-made run folders (no model is loaded)."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from gcpo_analysis.measures.advantages import grpo_advantages
from gcpo_train.compare.treatment import omega_frame


def _run(out, arm, seed=0, done=True):
    """An arm-seed's run folder (with its rollouts/), finished unless ``done`` is False."""
    run = out / "runs" / arm / f"seed_{seed}"
    (run / "rollouts").mkdir(parents=True)
    if done:
        (run / "done.json").write_text("{}")
    return run


def _groups(step=1, omega=2.0, eps=1e-6, texts="abcdefgh"):
    """Two groups of 4 rollouts whose advantages are ω times GRPO's (of ``eps``)."""
    rows = []
    for k, rewards in enumerate(([0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0])):
        adv = grpo_advantages(np.array(rewards), eps) * omega
        rows += [
            dict(
                step=step,
                query_id=f"q{k}",
                rollout_id=i,
                completion=texts[4 * k + i],
                reward=rewards[i],
                advantage=adv[i],
            )
            for i in range(4)
        ]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------- ω with the config's eps
def test_the_report_reads_omega_with_the_configs_eps(tmp_path):
    """A config with eps 0.1: the trainer's GRPO advantages are (r - mean)/(std + 0.1), so plain
    GRPO's ω is 1 only when read back with the same eps (0.82 with the default 1e-6)."""
    from gcpo_train.compare.report import write_report

    spec = {"config": {"eps": 0.1, "max_grad_norm": 1.0}, "modulators": ["none", "x"], "seeds": [0, 1], "steps": 1}
    (tmp_path / "compare.json").write_text(json.dumps(spec))
    for arm, omega in (("none", 1.0), ("x", 2.0)):
        for seed in (0, 1):
            run = _run(tmp_path, arm, seed)
            _groups(omega=omega, eps=0.1).to_parquet(run / "rollouts" / "step_000001.parquet")
            (run / "log.jsonl").write_text('{"step": 1, "reward_mean": 0.5, "grad_norm": 0.5}\n')
    results = pd.DataFrame(
        [
            dict(arm=a, seed=s, step=1, query_id=f"q{q}", score=float(10 + q + s + (a == "x") * (s + 1)))
            for a in ("none", "x")
            for s in (0, 1)
            for q in range(3)
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = write_report(tmp_path, results, ["none", "x"], "none", figures=False)["table"].set_index("arm")
    assert table.loc["none", "omega_mean"] == pytest.approx(1.0)
    assert table.loc["x", "omega_mean"] == pytest.approx(2.0)
    assert omega_frame(tmp_path, "none", 0.1)["omega"].tolist() == pytest.approx([1.0] * 4)
    with pytest.raises(ValueError, match="eps must be a number >= 0"):
        omega_frame(tmp_path, "none", float("nan"))
