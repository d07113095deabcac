"""gcpo compare: the paired statistics against brute force, ω read back from rollouts, and an
end-to-end comparison of 2 arms x 2 seeds x 2 steps on a tiny random llama (CRN, resume, refusal)."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from gcpo_train.compare.report import control_table, omega_per_group, paired_seed_query_bootstrap, summary_table


def test_two_level_bootstrap_matches_a_loop():
    rng = np.random.default_rng(0)
    d = rng.normal(1.0, 3.0, (3, 40))
    mean, low, high, p = paired_seed_query_bootstrap(d, n_resamples=4000, seed=5)
    assert mean == pytest.approx(d.mean())
    # the same resamples, drawn as index lists and averaged by a plain loop
    g = np.random.default_rng(5)
    cs = g.multinomial(3, np.full(3, 1 / 3), size=4000)
    kq = g.multinomial(40, np.full(40, 1 / 40), size=4000)
    loop = []
    for c, k in zip(cs, kq):
        seeds, queries = np.repeat(np.arange(3), c), np.repeat(np.arange(40), k)
        loop.append(d[np.ix_(seeds, queries)].mean())
    assert (low, high) == pytest.approx(tuple(np.quantile(loop, [0.025, 0.975])))
    assert p == pytest.approx(min(1.0, 2 * min(np.mean(np.array(loop) <= 0), np.mean(np.array(loop) >= 0))))


def test_two_level_bootstrap_edge_cases():
    assert paired_seed_query_bootstrap(np.zeros((2, 5))) == (0.0, 0.0, 0.0, 1.0)
    assert paired_seed_query_bootstrap(np.full((1, 4), 2.0))[1:3] == (2.0, 2.0)
    with pytest.raises(ValueError, match="seeds, queries"):
        paired_seed_query_bootstrap(np.zeros(5))


def test_group_weights_read_back_omega():
    from gcpo_analysis.measures.advantages import grpo_advantages

    rows = []
    for q, (rewards, omega) in enumerate(
        [([0.0, 1.0, 2.0, 2.0], 0.7), ([1.0, 1.0, 1.0, 1.0], 0.5), ([0, 2, 0, 0], 1.3)]
    ):
        adv = grpo_advantages(np.array(rewards, float)) * omega
        rows += [dict(step=1, query_id=f"q{q}", reward=r, advantage=a) for r, a in zip(rewards, adv)]
    np.testing.assert_allclose(omega_per_group(pd.DataFrame(rows)), [0.7, 1.3])  # the tied group has no ω


def test_summary_table_deltas_and_holm():
    rng = np.random.default_rng(1)
    rows = []
    for arm, shift in (("none", 0.0), ("a", 5.0), ("b", 0.0)):
        for seed, q in itertools.product(range(3), range(50)):
            rows.append(dict(arm=arm, seed=seed, step=10, query_id=f"q{q}", score=50 + shift + rng.normal(0, 1)))
            rows.append(dict(arm=arm, seed=seed, step=5, query_id=f"q{q}", score=0.0))  # not the last step
    t = summary_table(pd.DataFrame(rows), ["none", "a", "b"], "none", {}).set_index("arm")
    assert t.loc["a", "delta"] == pytest.approx(5.0, abs=0.3) and t.loc["a", "delta_low"] > 0
    assert t.loc["b", "delta_low"] < 0 < t.loc["b", "delta_high"]
    assert pd.isna(t.loc["none"].get("delta"))
    # the primary interval is the seed-level paired t; the pooled bootstrap is the secondary one
    from scipy import stats

    frame = pd.DataFrame(rows).query("step == 10")
    per = frame.groupby(["arm", "seed"])["score"].mean().unstack(0)
    ci = stats.ttest_1samp(per["a"] - per["none"], 0.0).confidence_interval(0.95)
    assert [t.loc["a", "delta_low"], t.loc["a", "delta_high"]] == pytest.approx([ci.low, ci.high])
    assert t.loc["a", "df"] == 2 and t.loc["a", "p"] == pytest.approx(0.25)  # the exact sign-flip floor
    assert t.loc["a", "verdict"] == "better" and t.loc["b", "verdict"] in ("equivalent within ±δ", "inconclusive")
    assert t.loc["a", "margin"] == pytest.approx(0.1 * per["none"].mean())
    assert {"pooled_low", "pooled_high", "boot2_low", "boot2_high", "p_tost"} <= set(t.columns)
    assert t.loc["a", "p_holm"] <= t.loc["b", "p_holm"] and t.loc["b", "p_holm"] >= t.loc["b", "p"]
    assert t.loc["a", "step"] == 10 and t.loc["a", "seeds"] == 3


def test_an_arm_with_one_paired_seed_shows_no_delta_and_the_table_says_why():
    from gcpo_train.compare.report import _markdown

    rows = [
        dict(arm=arm, seed=seed, step=10, query_id=f"q{q}", score=float(q + seed))
        for arm, seeds in (("none", (0, 1)), ("a", (1, 2)))
        for seed in seeds
        for q in range(5)
    ]
    t = summary_table(pd.DataFrame(rows), ["none", "a"], "none", {})
    assert pd.isna(t.set_index("arm").loc["a"].get("delta"))  # only seed 1 is paired
    md = _markdown(t, None, "none")
    row = next(line for line in md.splitlines() if line.startswith("| a |"))
    assert row.split(" | ")[4] == "—"
    assert "over the seeds both the arm and none finished (df = those seeds − 1)" in md
    assert "until two seeds are paired" in md


def test_the_summary_reads_only_runs_marked_finished_as_the_treatment_does():
    """A run evaluated at the last step but stopped before its done.json counted in Δ while the
    effective treatment (done.json runs only) left it out; now both leave it out, by name."""
    from gcpo_train.compare.report import finished_results

    rows = [
        dict(arm=arm, seed=seed, step=step, query_id="q", score=1.0)
        for arm, seed, step in [("base", 0, 0), ("none", 0, 2), ("none", 1, 2), ("a", 0, 2), ("a", 1, 2), ("a", 2, 1)]
    ]
    results = pd.DataFrame(rows)
    finished = {("none", 0), ("none", 1), ("a", 0)}
    with pytest.warns(UserWarning) as caught:
        kept = finished_results(results, 2, finished)
    message = str(caught[0].message)
    assert "until they reach step 2: a seed 2 (step 1)" in message
    assert "until their run folder has a done.json: a seed 1 (step 2)" in message
    keys = set(kept[["arm", "seed"]].itertuples(index=False, name=None))
    assert keys == {("base", 0), ("none", 0), ("none", 1), ("a", 0)}
    assert finished_results(results, None, None) is results


def test_the_shuffled_control_contrast_is_the_paired_seed_level_delta():
    """Δ(X − X:shuffled) against scipy's paired t on per-seed means, at δ from GRPO's mean; a
    twin missing or seen in one seed gives no row; seeds or queries only one side has are left out."""
    from scipy import stats

    rng = np.random.default_rng(2)
    rows = []
    for arm, shift, seeds in (("none", 0.0, 4), ("bot_rd", 3.0, 4), ("bot_rd:shuffled", 1.0, 5), ("rd", 0.0, 4)):
        for seed, q in itertools.product(range(seeds), range(30)):
            rows.append(dict(arm=arm, seed=seed, step=60, query_id=f"q{q}", score=40 + shift + rng.normal(0, 2)))
    rows.append(dict(arm="rd:shuffled", seed=0, step=60, query_id="q0", score=1.0))  # one seed: no interval
    results = pd.DataFrame(rows)
    arms = ["none", "bot_rd", "bot_rd:shuffled", "rd", "rd:shuffled"]
    table = control_table(results, arms, "none")
    assert list(table["arm"]) == ["bot_rd"] and list(table["control"]) == ["bot_rd:shuffled"]
    r = table.iloc[0]
    per = results.groupby(["arm", "seed"])["score"].mean().unstack(0).loc[range(4)]
    d = per["bot_rd"] - per["bot_rd:shuffled"]
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert [r.delta, r.delta_low, r.delta_high] == pytest.approx([d.mean(), ci.low, ci.high])
    assert r.paired_seeds == 4 and r.df == 3 and r.margin == pytest.approx(0.1 * per["none"].mean())
    assert control_table(results, ["none", "bot_rd"], "none").empty  # no twin, no contrast


def test_coupling_and_effective_treatment_from_rollouts(tmp_path):
    """The share of identical completions per step and the within-step relative weights, read
    back from hand-made rollouts (two arms, one seed, two steps)."""
    from gcpo_analysis.measures.advantages import grpo_advantages
    from gcpo_train.compare.treatment import coupling, effective_treatment, first_below, omega_frame

    for arm, texts2, omegas, seed in (
        ("none", "abcd", (1.0, 1.0), 0),
        ("x", "abzz", (1.0, 3.0), 0),
        ("none", "abcd", (1.0, 1.0), 1),
        ("x", "zzzz", (9.0, 9.0), 1),  # seed 1 is still training: not in the report
    ):
        folder = tmp_path / "runs" / arm / f"seed_{seed}" / "rollouts"
        folder.mkdir(parents=True)
        if seed == 0:
            (folder.parent / "done.json").write_text("{}")
        for step, texts in ((1, "abcd"), (2, texts2)):
            rows = []
            for k, omega in enumerate(omegas):
                rewards = np.array([0.0, 1.0]) if k == 0 else np.array([1.0, 0.0])
                adv = grpo_advantages(rewards) * omega
                for i in range(2):
                    rows.append(
                        dict(
                            step=step,
                            query_id=f"q{k}",
                            rollout_id=i,
                            completion=texts[2 * k + i],
                            reward=rewards[i],
                            advantage=adv[i],
                        )
                    )
            pd.DataFrame(rows).to_parquet(folder / f"step_{step:06d}.parquet")
    curve = coupling(tmp_path, "x", "none")
    assert curve["identical"].tolist() == [1.0, 0.5] and first_below(curve, 0.9) == 2
    assert curve["seeds"].tolist() == [1, 1]
    assert first_below(curve, 0.5) is None
    omega = omega_frame(tmp_path, "x")
    np.testing.assert_allclose(omega["omega"], [1.0, 3.0, 1.0, 3.0])
    eff = effective_treatment(tmp_path, "x", omega, max_grad_norm=1.0)
    assert eff["omega_mean"] == pytest.approx(2.0)
    rel = np.quantile([0.5, 1.5, 0.5, 1.5], [0.05, 0.95])
    assert [eff["rel_omega_p5"], eff["rel_omega_p95"]] == pytest.approx(list(rel))
    assert np.isnan(eff["clipped_share"])  # no log.jsonl


# ---------------------------------------------------------------------- end to end (tiny model)
pytest.importorskip("torch")
pytest.importorskip("peft")


def _comparison(tmp_path, seeds=(0, 1), arms=("none", "bot_rd"), **kw):
    from helpers.loop_setup import comparison, loop_config

    from gcpo_train.config import TrainConfig

    return comparison(TrainConfig(**{**loop_config(tmp_path, "unused"), **kw}), tmp_path / "cmp", arms, seeds)


@pytest.mark.slow
def test_compare_end_to_end_crn_and_resume(tmp_path, monkeypatch):
    from gcpo_train.loop import trainer as trainer_module

    cmp = _comparison(tmp_path)
    # a kill during the second arm of seed 0: the first arm is finished, the second is not
    real_step = trainer_module.GCPOLoopTrainer.train_step

    def dies_in_bot_rd(self, step):
        if self.config.modulator == "bot_rd" and step == 2:
            raise KeyboardInterrupt
        return real_step(self, step)

    monkeypatch.setattr(trainer_module.GCPOLoopTrainer, "train_step", dies_in_bot_rd)
    with pytest.raises(KeyboardInterrupt):
        cmp.run(progress=False)
    out = tmp_path / "cmp"
    finished = out / "runs" / "none" / "seed_0"
    assert (finished / "done.json").exists() and not (out / "runs" / "bot_rd" / "seed_0" / "done.json").exists()
    # the stopped comparison already has the summary written after its finished run (`none`, seed 0)
    partial = pd.read_csv(out / "summary.csv")
    assert list(partial["arm"]) == ["none"] and list(partial["seeds"]) == [1] and list(partial["step"]) == [2]
    assert set(pd.read_parquet(out / "results.parquet")["arm"]) == {"base", "none"}
    # --report_only adds what was evaluated since to results.parquet (bot_rd's step-1 evaluation
    # before the kill), but the summary pairs runs at the comparison's last step only: bot_rd's
    # step 1 is not set against none's step 2, and the warning names what was left out
    with pytest.warns(UserWarning, match=r"left out of the summary until they reach step 2: bot_rd seed 0 \(step 1\)"):
        again = _comparison(tmp_path).report()["table"]
    assert again.set_index("arm")["step"].to_dict() == {"none": 2}
    assert set(pd.read_parquet(out / "results.parquet").query("arm == 'bot_rd'")["step"]) == {1}
    before = (finished / "log.jsonl").read_bytes(), (finished / "log.jsonl").stat().st_mtime_ns
    monkeypatch.setattr(trainer_module.GCPOLoopTrainer, "train_step", real_step)
    summary = _comparison(tmp_path).run(progress=False)
    assert ((finished / "log.jsonl").read_bytes(), (finished / "log.jsonl").stat().st_mtime_ns) == before

    res = pd.read_parquet(out / "results.parquet")
    assert list(res.columns) == ["arm", "seed", "step", "query_id", "score"]
    got = res.groupby(["arm", "seed"])["step"].apply(lambda s: sorted(set(s))).to_dict()
    assert got == {
        ("base", 0): [0],
        ("base", 1): [0],
        **{(a, s): [1, 2] for a in ("none", "bot_rd") for s in (0, 1)},
    }
    assert (res.groupby(["arm", "seed", "step"]).size() == 4).all()  # the 4 held-out queries each time
    assert set(res["query_id"]) == {"hq0", "hq1", "hq2", "hq3"}
    for arm in ("none", "bot_rd"):  # every run evaluated on the held-out set, never a training query
        log = [json.loads(x) for x in open(out / "runs" / arm / "seed_1" / "log.jsonl")]
        assert [r["step"] for r in log] == [1, 2]
    # common random numbers: the same seed draws the same first-step samples in every arm
    first = {
        (a, s): pd.read_parquet(out / "runs" / a / f"seed_{s}" / "rollouts" / "step_000001.parquet")
        for a in ("none", "bot_rd")
        for s in (0, 1)
    }
    for s in (0, 1):
        assert list(first["none", s]["completion"]) == list(first["bot_rd", s]["completion"])
        assert list(first["none", s]["query_id"]) == list(first["bot_rd", s]["query_id"])
    assert list(first["none", 0]["completion"]) != list(first["none", 1]["completion"])
    table = summary["table"].set_index("arm")
    assert table.loc["bot_rd", "paired_seeds"] == 2 and np.isfinite(table.loc["bot_rd", "delta"])
    assert table.loc["bot_rd", "omega_p5"] <= table.loc["bot_rd", "omega_p95"]
    assert table.loc["none", "omega_p5"] == pytest.approx(1.0) == table.loc["none", "omega_p95"]
    assert "Δ vs none" in (out / "summary.md").read_text() and (out / "summary.csv").exists()
    assert (out / "figures" / "compare.png").stat().st_size > 0


@pytest.mark.slow
def test_a_seed_added_later_is_trained_alone_and_reported_with_the_others(tmp_path):
    """compare.json lists every seed asked for so far; a run that adds one trains only it, and
    its summary and results.parquet still hold the seeds before it (they did not: a run with
    --seeds 1 reported seed 1 alone)."""
    _comparison(tmp_path, seeds=(0,)).run(progress=False)
    out = tmp_path / "cmp"
    first = (out / "runs" / "none" / "seed_0" / "log.jsonl").stat().st_mtime_ns
    summary = _comparison(tmp_path, seeds=(1,)).run(progress=False)
    assert (out / "runs" / "none" / "seed_0" / "log.jsonl").stat().st_mtime_ns == first
    assert json.loads((out / "compare.json").read_text())["seeds"] == [0, 1]
    res = pd.read_parquet(out / "results.parquet")
    assert sorted(set(zip(res["arm"], res["seed"], strict=True))) == sorted(
        (a, s) for a in ("base", "none", "bot_rd") for s in (0, 1)
    )
    table = summary["table"].set_index("arm")
    assert table.loc["none", "seeds"] == 2 and table.loc["bot_rd", "paired_seeds"] == 2
    # --report_only with the config's arms and seeds alone still reports the whole folder
    only = _comparison(tmp_path, seeds=(0,), arms=("none",)).report()["table"].set_index("arm")
    assert only.loc["bot_rd", "seeds"] == 2


@pytest.mark.slow
def test_compare_runs_and_reports_the_shuffled_control_arm(tmp_path):
    """'bot_rd:shuffled' end to end (since the identifier rule for names, compare refused it before
    any run): its runs, its row in the table with its treatment, and its folder in the comparison."""
    summary = _comparison(tmp_path, arms=("none", "bot_rd", "bot_rd:shuffled")).run(progress=False)
    out = tmp_path / "cmp"
    assert (out / "runs" / "bot_rd-shuffled" / "seed_0" / "done.json").exists()  # no ':' in a path
    assert not [p for p in out.rglob("*") if ":" in p.name]
    table = summary["table"].set_index("arm")
    assert table.loc["bot_rd:shuffled", "paired_seeds"] == 2 and np.isfinite(table.loc["bot_rd:shuffled", "delta"])
    assert table.loc["bot_rd:shuffled", "omega_mean"] > 1  # its treatment is read from its own runs
    first = {
        a: pd.read_parquet(out / "runs" / f / "seed_0" / "rollouts" / "step_000001.parquet")
        for a, f in (("bot_rd", "bot_rd"), ("bot_rd:shuffled", "bot_rd-shuffled"))
    }
    assert list(first["bot_rd"]["completion"]) == list(first["bot_rd:shuffled"]["completion"])  # paired
    own = omega_per_group(first["bot_rd"])
    np.testing.assert_allclose(np.sort(omega_per_group(first["bot_rd:shuffled"])), np.sort(own), rtol=1e-6)
    assert "bot_rd:shuffled" in (out / "summary.md").read_text()
    assert "Shuffled control" in (out / "summary.md").read_text()  # bot_rd against its twin, seed-level
    control = pd.read_csv(out / "control.csv").set_index("arm")
    assert control.loc["bot_rd", "control"] == "bot_rd:shuffled" and control.loc["bot_rd", "paired_seeds"] == 2


@pytest.mark.slow
def test_compare_refuses_a_folder_of_other_settings(tmp_path):
    _comparison(tmp_path, seeds=(0,), arms=("none",)).run(progress=False)
    with pytest.raises(ValueError, match="learning_rate"):  # the config key that differs is named
        _comparison(tmp_path, seeds=(0,), arms=("none",), learning_rate=1e-3).run(progress=False)


def test_compare_refuses_bad_arms_and_seeds(tmp_path):
    with pytest.raises(ValueError, match="twice"):
        _comparison(tmp_path, seeds=(0, 0))
    with pytest.raises(ValueError, match=r"modulator must be one of .*got .bot_rdd. \(did you mean bot_rd\?\)"):
        _comparison(tmp_path, arms=("none", "bot_rdd"))


@pytest.fixture
def torch_threads():
    """Sets torch's thread count for a test and restores it."""
    import torch

    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.mark.slow
def test_workers_train_the_same_runs_as_one_process(tmp_path, torch_threads):
    """--workers 2 (two spawned processes of 1 thread each) gives the runs and scores of the
    sequential comparison at 1 thread, records the thread count, and a folder refuses a rerun
    with another count per run."""
    torch_threads(1)
    one = _comparison(tmp_path / "one", arms=("none", "bot_rd")).run(progress=False)
    torch_threads(2)
    two = _comparison(tmp_path / "two", arms=("none", "bot_rd")).run(progress=False, workers=2)
    a = pd.read_parquet(tmp_path / "one" / "cmp" / "results.parquet")
    b = pd.read_parquet(tmp_path / "two" / "cmp" / "results.parquet")
    keys = ["arm", "seed", "step", "query_id"]
    pd.testing.assert_frame_equal(a.sort_values(keys, ignore_index=True), b.sort_values(keys, ignore_index=True))
    for arm, seed in itertools.product(("none", "bot_rd"), (0, 1)):
        run = f"runs/{arm}/seed_{seed}"
        ra = pd.read_parquet(tmp_path / "one" / "cmp" / run / "rollouts" / "step_000002.parquet")
        rb = pd.read_parquet(tmp_path / "two" / "cmp" / run / "rollouts" / "step_000002.parquet")
        assert list(ra["completion"]) == list(rb["completion"]), run
        assert json.loads((tmp_path / "two" / "cmp" / run / "done.json").read_text())["threads"] == 1
    pd.testing.assert_frame_equal(one["table"], two["table"])
    # a third arm of seed 0 at 2 threads per run would not pair with the seed's other arms
    with pytest.raises(ValueError, match="trained with 1 torch thread.*seed 0 would use 2"):
        _comparison(tmp_path / "two", arms=("none", "bot_rd", "rd")).run(progress=False)
    assert not (tmp_path / "two" / "cmp" / "runs" / "rd").exists()
    torch_threads(1)  # at the seed's count it trains
    _comparison(tmp_path / "two", seeds=(0,), arms=("none", "bot_rd", "rd")).run(progress=False)
    assert json.loads((tmp_path / "two" / "cmp" / "runs" / "rd" / "seed_0" / "done.json").read_text())["threads"] == 1


def test_workers_must_be_a_positive_integer(tmp_path):
    with pytest.raises(ValueError, match="--workers must be an integer >= 1, got 0"):
        _comparison(tmp_path).run(progress=False, workers=0)
