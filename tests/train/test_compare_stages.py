"""The planned reading of a contrast (gcpo_train.compare.stages) on a synthetic results frame,
each number against a by-hand computation: the per-seed deltas, the shape (median, Wilcoxon, the
leave-one-seed-out range), the δ sensitivity and the one- and two-look statistics."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from gcpo_train.compare.stages import contrast_deltas, plot_deltas, reading, reading_markdown


def _results(n_seeds=22, n_queries=30, shift=0.5, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_seeds):
        base = rng.uniform(0, 100, n_queries)
        effect = rng.normal(shift, 4.0)
        for arm, score in (("none", base), ("bot_rd", np.clip(base + effect + rng.normal(0, 5, n_queries), 0, 100))):
            rows += [
                {"arm": arm, "seed": s, "step": 60, "query_id": f"q{q}", "score": float(v)} for q, v in enumerate(score)
            ]
        rows += [{"arm": "none", "seed": s, "step": 30, "query_id": f"q{q}", "score": 0.0} for q in range(n_queries)]
    return pd.DataFrame(rows)


def test_the_per_seed_deltas_are_the_last_steps_differences():
    res = _results(n_seeds=5)
    d = contrast_deltas(res, "bot_rd")
    last = res[res["step"] == 60].pivot_table(index=["seed", "query_id"], columns="arm", values="score")
    by_hand = (last["bot_rd"] - last["none"]).groupby("seed").mean()
    np.testing.assert_allclose(d.mean(axis=1).to_numpy(), by_hand.to_numpy())
    with pytest.raises(ValueError, match="no finished run of arm 'rd'"):
        contrast_deltas(res, "rd")
    with pytest.raises(ValueError, match="fewer than two"):
        contrast_deltas(res[res["seed"] == 0], "bot_rd")


def test_one_look_shape_and_sensitivity():
    from gcpo_analysis.stats.seeds import paired_t, tost

    res = _results(n_seeds=13)
    r = reading(res, "bot_rd", 3.26)
    D = r["per_seed"].to_numpy()
    sh = r["shape"]
    assert sh["median"] == pytest.approx(np.median(D)) and sh["below_zero"] == int((D < 0).sum())
    assert sh["wilcoxon_p"] == pytest.approx(stats.wilcoxon(D).pvalue)
    loo = [np.mean(np.delete(D, i)) for i in range(D.size)]
    assert (sh["loo_low"], sh["loo_high"]) == pytest.approx((min(loo), max(loo)))
    assert sh["loo_low_without"] == int(np.argmin(loo)) and sh["loo_high_without"] == int(np.argmax(loo))
    t = paired_t(D)
    s = r["seed_level"]
    assert (s["delta_low"], s["delta_high"]) == pytest.approx((t["low"], t["high"]))
    sens = r["sensitivity"].set_index("margin")
    assert 3.26 in sens.index and len(sens) == 7
    for m, row in sens.iterrows():
        assert row["p_tost"] == pytest.approx(tost(D, m))
        expected = "equivalent within ±δ" if (t["low"] <= 0 <= t["high"] and row["p_tost"] < 0.05) else None
        if expected:
            assert row["verdict"] == expected
    text = reading_markdown(r)
    assert "One look, 13 seeds" in text and f"median {np.median(D):+.2f}".replace("-", "−") in text


def test_two_looks(tmp_path):
    from gcpo_analysis.stats.sequential import sequential_seed_level

    res = _results(n_seeds=22)
    r = reading(res, "bot_rd", 3.26, first_look=13, planned=22)
    D = r["per_seed"].to_numpy()
    expected = sequential_seed_level(D, 13, 22, 3.26)
    assert r["sequential"]["looks"][1]["low"] == pytest.approx(expected["looks"][1]["low"])
    alone = stats.ttest_1samp(D[13:], 0).confidence_interval(0.95)
    assert r["sequential"]["stage2_alone"]["high"] == pytest.approx(alone.high)
    text = reading_markdown(r)
    assert "Two looks, O'Brien–Fleming-type" in text and "The second stage alone (9 seeds" in text
    # with the first stage only, the reading is one look
    assert "seed_level" in reading(res[res["seed"] < 13], "bot_rd", 3.26, first_look=13, planned=22)
    plot_deltas(r, tmp_path / "deltas")
    assert (tmp_path / "deltas.png").stat().st_size > 0 and (tmp_path / "deltas.svg").stat().st_size > 0
    for bad in (0, -1, float("nan"), True):
        with pytest.raises(ValueError, match="--margin"):
            reading(res, "bot_rd", bad)


def test_the_control_table_pairs_each_permuted_twin():
    """An arm with both a :shuffled and a :deranged twin gets one control row for each, each Δ the
    seed-level statistic of that pair; the header names both controls."""
    from gcpo_train.compare.report import _control_markdown, control_table

    res = _results(n_seeds=4)
    trained = res[res["arm"] == "bot_rd"]
    twins = [
        trained.assign(arm=f"bot_rd:{c}", score=trained["score"] + k) for k, c in ((1.0, "shuffled"), (2.0, "deranged"))
    ]
    res = pd.concat([res, *twins], ignore_index=True)
    arms = ["none", "bot_rd", "bot_rd:shuffled", "bot_rd:deranged"]
    table = control_table(res, arms, "none").set_index("control")
    assert list(table.index) == ["bot_rd:shuffled", "bot_rd:deranged"]
    assert table.loc["bot_rd:deranged", "delta"] == pytest.approx(-2.0)
    assert table.loc["bot_rd:shuffled", "delta"] == pytest.approx(-1.0)
    assert "Permuted controls" in _control_markdown(table.reset_index())
    assert "Shuffled control" in _control_markdown(table.reset_index().iloc[:1])


def test_the_reading_command(tmp_path, capsys):
    """``gcpo compare reading`` prints the reading, writes it (and its strip plot) only to a new
    .md file outside the comparison folder, and names a folder without results."""
    from gcpo_analysis.cli import main

    folder = tmp_path / "cmp"
    folder.mkdir()
    _results(n_seeds=10).to_parquet(folder / "results.parquet")
    out = tmp_path / "reading.md"
    args = ["compare", "reading", str(folder), "--arm", "bot_rd", "--margin", "3.26", "--first_look", "6"]
    assert main([*args, "--planned", "10", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Two looks" in printed and out.read_text(encoding="utf-8") in printed
    assert (tmp_path / "reading_deltas.png").exists()
    assert main([*args, "--output", str(out)]) == 2  # an existing file is not written over
    assert "exists" in capsys.readouterr().err
    assert main([*args, "--output", str(folder / "r.md")]) == 2
    assert main(["compare", "reading", str(tmp_path), "--arm", "bot_rd", "--margin", "3.26"]) == 2
    assert "no results.parquet" in capsys.readouterr().err


def _card(folder, **changes):
    """A minimal compare.json: what ``read_record`` accepts, with ``changes`` over it."""
    import json

    card = {"config": {"model": "packaged", "steps": 60, "seed": 0}, "modulators": ["none"], "seeds": [0], "steps": 60}
    card.update(changes)
    (folder / "compare.json").write_text(json.dumps(card), encoding="utf-8")


def test_a_reference_arm_read_from_another_comparison(tmp_path, capsys):
    """``--reference_folder``: the treated arm from one folder against the reference from another
    (a dose arm in a folder of its own against the main comparison's arm); the deltas are the
    by-hand differences across the two frames, the folder's own rows of the reference are not
    read, and folders whose cards differ beyond arms and seeds are refused naming the field."""
    from gcpo_analysis.cli import main
    from gcpo_train.compare.stages import with_reference_from

    both = _results(n_seeds=6)
    dose, main_cmp = tmp_path / "dose", tmp_path / "main"
    for folder in (dose, main_cmp):
        folder.mkdir()
    treated = both[both["arm"] == "bot_rd"].assign(arm="bot_rd:alpha10")
    treated["score"] += np.random.default_rng(1).normal(0, 3, len(treated))  # not bot_rd's own scores
    decoy = both[both["arm"] == "none"].assign(score=0.0)  # the dose folder's own `none`: never read
    pd.concat([treated, decoy]).to_parquet(dose / "results.parquet")
    both.to_parquet(main_cmp / "results.parquet")
    _card(dose, modulators=["none", "bot_rd:alpha10"], data={"sha256": "x"})
    _card(main_cmp, modulators=["none", "bot_rd"], seeds=[0, 1])  # an older card: no data record

    joined = with_reference_from(pd.read_parquet(dose / "results.parquet"), both, "none")
    d = contrast_deltas(joined, "bot_rd:alpha10")
    last = pd.concat([both, treated])
    last = last[last["step"] == 60].pivot_table(index=["seed", "query_id"], columns="arm", values="score")
    by_hand = (last["bot_rd:alpha10"] - last["none"]).groupby("seed").mean()
    np.testing.assert_allclose(d.mean(axis=1).to_numpy(), by_hand.to_numpy())

    args = ["compare", "reading", str(dose), "--arm", "bot_rd:alpha10", "--margin", "3.26"]
    assert main([*args, "--reference_folder", str(main_cmp)]) == 0
    printed = capsys.readouterr().out
    assert f"`none` is read from `{main_cmp}`" in printed
    assert f"Δ = {by_hand.mean():+.2f}".replace("-", "−") in printed

    assert main([*args, "--reference", "bot_rd", "--reference_folder", str(main_cmp)]) == 0  # another arm there
    printed = capsys.readouterr().out
    against_bot_rd = (last["bot_rd:alpha10"] - last["bot_rd"]).groupby("seed").mean().mean()
    assert "`bot_rd` is read from" in printed and f"Δ = {against_bot_rd:+.2f}".replace("-", "−") in printed
    assert main([*args, "--reference", "rd", "--reference_folder", str(main_cmp)]) == 2
    assert "reference folder has no run of arm 'rd'" in capsys.readouterr().err
    assert main([*args, "--reference_folder", str(dose)]) == 2
    assert "the comparison folder itself" in capsys.readouterr().err
    assert main([*args, "--reference_folder", str(main_cmp), "--output", str(main_cmp / "r.md")]) == 2
    assert "outside the comparison folder" in capsys.readouterr().err
    _card(main_cmp, steps=30)
    assert main([*args, "--reference_folder", str(main_cmp)]) == 2
    err = capsys.readouterr().err
    assert "holds another comparison" in err and "steps: 30" in err
    _card(main_cmp, config={"model": "packaged", "steps": 60, "seed": 0, "beta": 0.0})
    assert main([*args, "--reference_folder", str(main_cmp)]) == 2
    assert "config (beta)" in capsys.readouterr().err
    (main_cmp / "compare.json").unlink()
    assert main([*args, "--reference_folder", str(main_cmp)]) == 2
    assert "holds no compare.json" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*args, "--reference_folder", str(empty)]) == 2
    assert f"{empty} holds no results.parquet" in capsys.readouterr().err
