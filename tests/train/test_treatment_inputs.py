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
from gcpo_train.compare.layout import finished_seeds
from gcpo_train.compare.treatment import clipped_share, coupling, omega_frame, omega_groups


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


# ---------------------------------------------------------------------- ω of broken groups
def _nan_advantage(d):
    d.loc[5, "advantage"] = np.nan
    return d


def _inf_advantage(d):
    d.loc[5, "advantage"] = np.inf
    return d


def _weight_varies(d):
    return d.drop(columns="advantage").assign(weight=[2.0] * 4 + [5.0, 1.0, 1.0, 1.0])


def _weight_nan(d):
    return d.drop(columns="advantage").assign(weight=[np.nan] * 4 + [2.0] * 4)


def _null_query(d):
    d["query_id"] = d["query_id"].astype(object)
    d.loc[4:, "query_id"] = None
    return d


@pytest.mark.parametrize(
    "edit, message",
    [
        (_nan_advantage, r"row 5 \(step 1, query 'q1'\) has no advantage"),
        (_inf_advantage, r"step 1, query 'q1': advantage inf is not a finite number"),
        (lambda d: pd.concat([d, d.iloc[[2]]]), r"step 1, query 'q0': rollout 2 is there twice"),
        (_null_query, r"row 4 \(step 1\) has no query_id"),
        (_weight_varies, r"step 1, query 'q1': weight varies within the group"),
        (_weight_nan, r"row 0 \(step 1, query 'q0'\) has no weight"),
    ],
)
def test_omega_frame_refuses_a_group_without_a_true_omega(tmp_path, edit, message):
    """Each was a changed or dropped ω without a word (NaN, inf or a varying weight became the
    group's ω; a copied rollout changed A; a group without query_id was left out)."""
    run = _run(tmp_path, "x")
    edit(_groups()).to_parquet(run / "rollouts" / "step_000001.parquet")
    with pytest.raises(ValueError, match=r"rollouts/step_000001\.parquet: " + message):
        omega_frame(tmp_path, "x")


@pytest.mark.parametrize(
    "edit, message",
    [
        (_inf_advantage, r"^step 1, query 'q1': advantage inf is not a finite number"),
        (_nan_advantage, r"^step 1, query 'q1': advantage nan is not a finite number"),
        (lambda d: pd.concat([d, d.iloc[[2]]]), r"^step 1, query 'q0': rollout 2 is there twice"),
        (_null_query, r"^step 1: row 4 has no query_id"),
        (_weight_varies, r"^step 1, query 'q1': weight varies"),
        (lambda d: d.assign(reward=d["reward"].astype(str)), r"column 'reward' must hold numbers"),
        (lambda d: d.assign(reward=[0.0, np.nan] + [1.0] * 6), r"^step 1, query 'q0': .*reward"),
    ],
)
def test_omega_groups_refuses_a_broken_frame_naming_step_and_query(edit, message):
    with pytest.raises(ValueError, match=message):
        omega_groups(edit(_groups()))


# ---------------------------------------------------------------------- rollouts files
def _coupled(tmp_path, edit_x=lambda d: d, name="step_000001.parquet"):
    """Arms none and x of seed 0, one step; x's file edited by ``edit_x`` and named ``name``."""
    _groups().to_parquet(_run(tmp_path, "none") / "rollouts" / "step_000001.parquet")
    edit_x(_groups(texts="abczefgh")).to_parquet(_run(tmp_path, "x") / "rollouts" / name)


def test_coupling_refuses_a_rollout_twice(tmp_path):
    """Rollout 0 written three times was paired with every copy: 7/8 identical read as 0.9."""
    _coupled(tmp_path, lambda d: pd.concat([d, d.iloc[[0, 0]]]))
    with pytest.raises(ValueError, match=r"x/seed_0/rollouts/step_000001\.parquet: step 1, query 'q0': rollout 0 is"):
        coupling(tmp_path, "x", "none")


def test_coupling_refuses_another_steps_rows(tmp_path):
    """step_000001's rows in a file named step 2 were read as step 1's, beside the real one."""
    _groups(step=2).to_parquet(_run(tmp_path, "none") / "rollouts" / "step_000002.parquet")
    _groups(step=1).to_parquet(_run(tmp_path, "x") / "rollouts" / "step_000002.parquet")
    with pytest.raises(ValueError, match=r"x/seed_0/rollouts/step_000002\.parquet: row 0 is a rollout of step 1"):
        coupling(tmp_path, "x", "none")


def test_a_rollouts_file_of_another_name_is_refused(tmp_path):
    _coupled(tmp_path, name="step_1.parquet")
    with pytest.raises(ValueError, match=r"step_1\.parquet: not a rollouts file of the run"):
        coupling(tmp_path, "x", "none")
    with pytest.raises(ValueError, match=r"step_1\.parquet: not a rollouts file of the run"):
        omega_frame(tmp_path, "x")


def test_coupling_is_by_step_when_a_seed_lacks_a_step(tmp_path):
    """Seed 0 lacks step 2's file: the steps came back 1, 3, 2 and the summary's last step
    column read step 2's 100% instead of step 3's 0%."""
    from gcpo_train.compare.report import _markdown

    for seed in (0, 1):
        for arm in ("none", "x"):
            run = _run(tmp_path, arm, seed)
            for step in (1, 2, 3):
                if seed == 0 and step == 2:
                    continue
                texts = "zzzzzzzz" if arm == "x" and step == 3 else "abcdefgh"
                _groups(step=step, texts=texts).to_parquet(run / "rollouts" / f"step_{step:06d}.parquet")
    curve = coupling(tmp_path, "x", "none")
    assert curve["step"].tolist() == [1, 2, 3]
    assert curve["identical"].tolist() == [1.0, 1.0, 0.0] and curve["seeds"].tolist() == [2, 1, 2]
    assert _markdown(pd.DataFrame(), None, "none", {"x": curve}).splitlines()[-1].split("|")[4].strip() == "0%"


def _truncated(tmp_path):
    path = tmp_path / "whole.parquet"
    _groups().to_parquet(path)
    return path.read_bytes()[:-20]


@pytest.mark.parametrize(
    "edit, reader, message",
    [
        (lambda d: d.drop(columns="advantage"), "omega", r"no column 'weight' or 'advantage'"),
        (lambda d: d.drop(columns="completion"), "coupling", r"no column 'completion'"),
        (lambda d: d.assign(reward=d["reward"].astype(str)), "omega", r"column 'reward' must hold numbers"),
        (lambda d: d.assign(rollout_id=d["rollout_id"].astype(str)), "coupling", r"'rollout_id' must hold integers"),
        (lambda d: d.assign(advantage=True), "omega", r"column 'advantage' must hold numbers"),
        ("truncated", "omega", r"not a readable rollouts file"),
        ("truncated", "coupling", r"not a readable rollouts file"),
    ],
)
def test_a_broken_rollouts_file_is_named_with_its_field(tmp_path, edit, reader, message):
    """Each was an ArrowInvalid, a float() error or a pandas merge error naming no file."""
    _groups().to_parquet(_run(tmp_path, "none") / "rollouts" / "step_000001.parquet")
    path = _run(tmp_path, "x") / "rollouts" / "step_000001.parquet"
    if edit == "truncated":
        path.write_bytes(_truncated(tmp_path))
    else:
        edit(_groups()).to_parquet(path)
    with pytest.raises(ValueError, match=r"x/seed_0/rollouts/step_000001\.parquet: .*" + message):
        omega_frame(tmp_path, "x") if reader == "omega" else coupling(tmp_path, "x", "none")


# ---------------------------------------------------------------------- log.jsonl grad_norm
@pytest.mark.parametrize(
    "log, message",
    [
        ('{"step": 1, "grad_norm": NaN}\n{"step": 2, "grad_norm": 3.0}\n', r"line 1 \(step 1\) has grad_norm nan"),
        ('{"step": 1, "grad_norm": 3.0}\n\n{"step": 2}\n', r"line 3 \(step 2\) has no grad_norm"),
        ('{"step": 1, "grad_norm": "3.0"}\n{"step": 2, "grad_norm": 0.5}\n', r"line 1 \(step 1\) has grad_norm '3.0'"),
        ('{"step": 1, "grad_norm": "big"}\n', r"line 1 \(step 1\) has grad_norm 'big'"),
        ('{"step": 1, "grad_norm": -1.0}\n', r"line 1 \(step 1\) has grad_norm -1.0"),
    ],
)
def test_clipped_share_refuses_a_grad_norm_that_is_not_a_number(tmp_path, log, message):
    """A NaN counted as not clipped, a row without one left the denominator, "3.0" was read as 3."""
    (_run(tmp_path, "x") / "log.jsonl").write_text(log)
    with pytest.raises(ValueError, match=r"x/seed_0/log\.jsonl: " + message):
        clipped_share(tmp_path, "x", 1.0)


def test_clipped_share_of_a_good_log(tmp_path):
    (_run(tmp_path, "x") / "log.jsonl").write_text('{"step": 1, "grad_norm": 3.0}\n\n{"step": 2, "grad_norm": 0.5}\n')
    assert clipped_share(tmp_path, "x", 1.0) == 0.5
    with pytest.raises(ValueError, match="max_grad_norm is NaN"):
        clipped_share(tmp_path, "x", float("nan"))


def test_an_infinite_grad_norm_counts_as_clipped(tmp_path):
    """HF's Trainer logs inf, unchecked, on a step an fp16 GradScaler skipped for overflow."""
    log = '{"step": 1, "grad_norm": Infinity}\n{"step": 2, "grad_norm": 0.5}\n'
    (_run(tmp_path, "x") / "log.jsonl").write_text(log)
    assert clipped_share(tmp_path, "x", 1.0) == 0.5


# ---------------------------------------------------------------------- seed folders
@pytest.mark.parametrize("name", ["seed_00", "seed_01", "seed_x", "seed_-1"])
def test_finished_seeds_refuses_a_seed_folder_gcpo_compare_does_not_name(tmp_path, name):
    """seed_00 (a copy of seed_0 by hand) was read as seed 0 a second time."""
    _run(tmp_path, "x", 0)
    (tmp_path / "runs" / "x" / name).mkdir()
    (tmp_path / "runs" / "x" / name / "done.json").write_text("{}")
    with pytest.raises(ValueError, match=rf"runs/x/{name}: not a run of the comparison"):
        finished_seeds(tmp_path, "x")
    (tmp_path / "runs" / "x" / name / "done.json").unlink()  # an unfinished folder is no run yet
    assert finished_seeds(tmp_path, "x") == [0]
