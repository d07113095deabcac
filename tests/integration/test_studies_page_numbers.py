"""docs/results/studies.md and docs/results/train_gradvar.md: every number comes from a committed
file. Their study numbers are generated at build time (docs/study_numbers.py,
from ``gcpo-study`` markers); this file checks

- that every committed study has its markers on the page and each renders, with the numbers of
  its tables (a second reading of the CSVs, written here) and both branches of a study without
  Grams (a synthetic folder, so a study that gains them, as cpu_large will, is covered);
- that the words around the generated numbers still hold for every study that has the table
  (BoT is favoured nowhere, C/V is about a percent, ...): a rerun that changes the reading fails;
- that no other number is left in the pages' prose: the tables are checked by
  test_readme_study_numbers / test_readme_math_numbers / test_readme_headline_numbers, the few
  settings quoted are pinned below, and what remains is an explicit list of non-results.
"""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"studies": ROOT / "docs/results/studies.md", "train": ROOT / "docs/results/train_gradvar.md"}
FIG = ROOT / "figures"
NUM = r"−?\d+\.\d+"


def _load_numbers():
    spec = importlib.util.spec_from_file_location("study_numbers", ROOT / "docs" / "study_numbers.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["study_numbers"] = mod
    spec.loader.exec_module(mod)
    return mod


sn = _load_numbers()
STUDIES = sorted(p.name for p in FIG.iterdir() if (p / "tables" / "v_parts.csv").exists())
TRAINING = sorted(p.name for p in FIG.iterdir() if (p / "tables" / "n_analysed.csv").exists())
UNCERTAINTY = ["token_entropy", "se", "se_lw", "kle", "cd", "bot"]


def _f(x: str) -> float:
    return float(x.replace("−", "-").rstrip("%"))


def _nums(text: str) -> list[float]:
    return [_f(x) for x in re.findall(NUM, text)]


def _t(run: str, name: str) -> pd.DataFrame:
    folder, _, sub = run.partition(".")
    return pd.read_csv(FIG / folder / "tables" / sub.replace(".", "/") / f"{name}.csv")


def _markers(page: str) -> set[tuple[str, str]]:
    return set(sn.MARKER.findall(PAGES[page].read_text(encoding="utf-8")))


# --------------------------------------------------------------------------- the markers
def test_every_study_has_its_markers_and_every_marker_renders():
    marks = _markers("studies")
    for run in STUDIES:
        for kind in ("v_parts", "n_tracks_v", "c_given_n", "confirmatory", "size_controls", "trim", "rests_on"):
            assert (kind, run) in marks, f"docs/results/studies.md has no <!-- gcpo-study:{kind}:{run} -->"
        if (FIG / run / "tables" / "gram_recompute_rollouts.csv").exists():
            for kind in ("gram_recompute", "lipschitz_exact"):  # Grams rebuilt after the run
                assert (kind, run) in marks, (kind, run)
    for run in STUDIES:
        if (FIG / run / "grams.parquet").exists():
            for kind in ("lipschitz", "confounds", "bound"):
                assert (kind, run) in marks, f"{run} has Grams: its {kind} line belongs on the page"
    for run in TRAINING:
        train = _markers("train")
        assert ("n_analysed", run) in train and ("confirmatory", f"{run}.pooled") in train
    for page in PAGES.values():
        text = sn.render(page.read_text(encoding="utf-8"))
        assert "gcpo-study:" not in text
    with pytest.raises(ValueError, match="unknown kind"):
        sn.render("<!-- gcpo-study:nonsense:cpu_math -->")


# --------------------------------------------------------------------------- the sentences
@pytest.mark.parametrize("run", STUDIES)
def test_v_parts_sentence(run):
    t = _t(run, "v_parts")
    t = t[(t.frame == "trimmed") & (t.subset == "v_pos")].set_index("statistic")
    text = sn.v_parts(run)
    if "share_C_over_V_median" not in t.index:
        assert "no Gram matrices" in text and not _nums(text)
        return
    got = _nums(text)
    share = t.loc["share_C_over_V_median"]
    expect = [round(100 * share.estimate, 1), round(100 * share.ci_low, 1), round(100 * share.ci_high, 1)]
    expect += [round(100 * t.loc[f"share_C_over_V_{q}"].estimate, 1) for q in ("q05", "q95")]
    rho = t.loc["rho(V, grad_var_norm)"]
    expect += [round(rho.estimate, 3), round(rho.ci_low, 3), round(rho.ci_high, 3)]
    assert got == expect, (run, text)
    assert f"{int(share.n)} groups" in text


@pytest.mark.parametrize("run", STUDIES + [f"{r}.pooled" for r in TRAINING])
def test_confirmatory_and_trim_sentences(run):
    c = _t(run, "confirmatory")
    text = sn.confirmatory(run)
    expect = []
    for target in ("grad_var", "grad_var_cross"):
        for contrast in ("bot - se", "bot - token_entropy"):
            for frame in ("trimmed", "untrimmed"):
                r = c[(c.target == target) & (c.contrast == contrast) & (c.frame == frame)]
                if len(r):
                    r = r.iloc[0]
                    expect += [round(x, 2) for x in (r.estimate, r.ci_low, r.ci_high, r.p_holm)]
    assert _nums(text) == expect, (run, text)
    tr = _t(run, "trim").iloc[0]
    line = sn.trim(run)
    n = [int(tr[k]) for k in ("n_removed", "n_groups", "n_v_pos_removed", "n_v_pos")]
    assert f"removes {n[0]} of {n[1]} groups, {n[2]} of the {n[3]}" in line
    assert _nums(line)[-1] == round(tr.removed_v_over_median_v_pos, 1)


@pytest.mark.parametrize("run", [r for r in STUDIES if (FIG / r / "tables" / "lipschitz.csv").exists()])
def test_lipschitz_sentences(run):
    t = _t(run, "lipschitz").set_index("statistic")
    got = _nums(sn.lipschitz(run))
    ci = lambda k: [round(t.loc[k, c], 2) for c in ("estimate", "ci_low", "ci_high")]  # noqa: E731
    expect = ci("mean_rho") + [round(t.loc["median_rho", "estimate"], 2)]
    expect += ci("pooled_rho") + ci("mean_rho_direction") + ci("cluster_ratio") + ci("cluster_auc")
    assert got == expect, run
    c = _t(run, "lipschitz_confounds").set_index("statistic")
    got = _nums(sn.confounds(run))
    expect = [
        round(c.loc[k, x], 2)
        for k in ("rho_g_e", "partial_given_jaccard", "partial_given_length", "partial_given_norms")
        for x in ("mean", "ci_low", "ci_high")
    ]
    assert got == expect, run
    b = _t(run, "lipschitz_bound").set_index(["source", "ratio", "statistic"])
    text = sn.bound(run)
    med = b.loc[("this study", "ratio", "ratio_q50"), "estimate"]
    brk = b.loc[("this study", "ratio", "share_pairs_break_at_median_L")]
    assert _nums(text)[0] == round(med, 2)
    assert f"{100 * brk.estimate:.1f}% [{100 * brk.ci_low:.1f}%, {100 * brk.ci_high:.1f}%]" in text


def test_gram_recompute_and_training_sentences():
    for run in ("cpu_math", "default_study", "cpu_large"):  # the last two regenerated by gcpo study
        assert "from the run itself" in sn.gram_recompute(run)
    for run in TRAINING:
        n = _t(run, "n_analysed").set_index("table")
        text = sn.n_analysed(run)
        assert f"leaves {n.loc['pooled', 'n_analysed']} of {n.loc['pooled', 'n_groups']} groups pooled" in text
        d = _t(run, "decomposition_pg").set_index("measure")
        text = sn.decomposition_pg(run)
        for m in d.index:
            r = d.loc[m]
            assert f"{sn.LABELS[m]} {sn.tri(r.rho_pos, r.rho_pos_ci_low, r.rho_pos_ci_high)}" in text, m
        cfg = json.loads((FIG / run / "run" / "run.json").read_text())["config"]
        assert f"G = {cfg['group_size']}" in sn.train_setup(run) and f"{cfg['steps']} steps" in sn.train_setup(run)


def test_a_study_without_grams_then_with_them(tmp_path, monkeypatch):
    """Both branches, on a copy of the math run's tables: without the N and C rows (what cpu_large
    has until its Grams are rebuilt) the lines say so; with them, the numbers appear."""
    src = FIG / "cpu_math" / "tables"
    tables = tmp_path / "figures" / "study" / "tables"
    tables.mkdir(parents=True)
    for name in ("v_parts", "v_parts_measures", "confirmatory", "size_controls", "trim"):
        (tables / f"{name}.csv").write_bytes((src / f"{name}.csv").read_bytes())
    monkeypatch.setattr(sn, "ROOT", tmp_path)
    sn.table.cache_clear()
    try:
        assert "median C/V" in sn.v_parts("study") and "≤" in sn.n_tracks_v("study")
        v = pd.read_csv(tables / "v_parts.csv")
        v[~v.statistic.str.contains("share|grad_var_norm|grad_var_cross")].to_csv(tables / "v_parts.csv", index=False)
        m = pd.read_csv(tables / "v_parts_measures.csv")
        m[m.statistic == "rho(u, V)"].to_csv(tables / "v_parts_measures.csv", index=False)
        c = pd.read_csv(tables / "confirmatory.csv")
        c[c.target == "grad_var"].to_csv(tables / "confirmatory.csv", index=False)
        sn.table.cache_clear()
        assert "no Gram matrices yet" in sn.v_parts("study")
        assert "no N without" in sn.n_tracks_v("study") and "no C without" in sn.c_given_n("study")
        assert "on C" not in sn.confirmatory("study")
        assert "no Gram matrices yet" in sn.lipschitz("study")
    finally:
        sn.table.cache_clear()


# --------------------------------------------------------------------------- the words
def _v_pos(run: str, name: str = "v_parts_measures") -> pd.DataFrame:
    t = _t(run, name)
    return t[(t.frame == "trimmed") & (t.subset == "v_pos")]


def test_the_readings_hold_for_every_study_that_has_the_table():
    for run in STUDIES + [f"{r}.pooled" for r in TRAINING]:
        c = _t(run, "confirmatory")
        assert (c.ci_low <= 0).all(), f"{run}: a confirmatory CI lies above 0 ('does not favour BoT anywhere')"
    d = _t("default_study", "confirmatory")
    r = d[(d.frame == "trimmed") & (d.target == "grad_var") & (d.contrast == "bot - token_entropy")].iloc[0]
    assert r.ci_high < 0, "default: 'BoT ranks V worse than token entropy'"
    for run in STUDIES:
        v = _v_pos(run, "v_parts").set_index("statistic")
        if "share_C_over_V_median" in v.index:  # 'about a percent', 'close to 1'
            assert abs(v.loc["share_C_over_V_median", "estimate"]) < 0.02, run
            assert v.loc["rho(V, grad_var_norm)", "ci_low"] > 0.9, run
            cn = _v_pos(run).query("statistic == 'rho(u, C | N)' and measure in @UNCERTAINTY").set_index("measure")
            clear = set(cn.index[(cn.ci_low > 0) | (cn.ci_high < 0)])
            # 'no uncertainty measure in the default and math runs; in cpu-large token entropy, SE and
            # SE-LW, not BoT, CD, KLE' (token entropy joined when its Grams came from the sampled tokens)
            assert clear == ({"token_entropy", "se", "se_lw"} if run == "cpu_large" else set()), (run, clear)
            assert all(f"{sn.LABELS[m]} " in sn.c_given_n(run) for m in clear), run
    # math: SE and SE-LW rank V within V > 0 only trimmed, not after Holm
    dec = _t("cpu_math", "decomposition").set_index("measure")
    und = _t("cpu_math", "untrimmed/decomposition").set_index("measure")
    for m in ("se", "se_lw"):
        assert dec.loc[m, "rho_pos_ci_low"] > 0 and dec.loc[m, "rho_pos_p_holm"] >= 0.05, m
        assert und.loc[m, "rho_pos_ci_low"] <= 0, m
    # cpu-large: within V > 0 every measure ranks V, and with size controlled none does
    dec = _t("cpu_large", "decomposition").set_index("measure").loc[UNCERTAINTY]
    assert (dec.rho_pos_ci_low > 0).all() and (dec.auc_pos < 0.5).all()
    sc = _t("cpu_large", "size_control")
    sc = sc[(sc.subset == "v_pos") & sc.statistic.isin(["partial", "ratio"]) & sc.measure.isin(UNCERTAINTY)]
    assert ((sc.ci_low <= 0) & (sc.ci_high >= 0)).all()
    for run in TRAINING:  # length and cap leave the correlation; RD's falls on V / omega^2
        s = _v_pos(f"{run}.pooled", "size_controls").query("controls == 'length+cap' and measure in @UNCERTAINTY")
        assert (s.ci_low > 0).all()
        mod, unmod = (
            _v_pos(r).query("statistic == 'rho(u, V)'").set_index("measure").estimate
            for r in (f"{run}.pooled", f"{run}.pooled.unmodulated")
        )
        assert unmod["rd"] < mod["rd"]
        assert (_t(run, "decomposition_pg").set_index("measure").loc[UNCERTAINTY].auc_pos < 0.5).all()
    for run in STUDIES:
        basis = sn.rests_on(run)
        assert ("on N" in basis) == ("share_C_over_V_median" in set(_t(run, "v_parts").statistic)), run
    sp = {run: _t(run, "spearman") for run in ("default_study", "cpu_large")}  # 'about half as wide'
    widths = {run: (t.ci_high - t.ci_low).mean() for run, t in sp.items()}
    assert 0.4 <= widths["cpu_large"] / widths["default_study"] <= 0.6
    for run in STUDIES:  # the Lipschitz check: positive, far below planted (near 1), shared words take part
        if (FIG / run / "tables" / "lipschitz_confounds.csv").exists():
            lip = _t(run, "lipschitz").set_index("statistic")
            c = _t(run, "lipschitz_confounds").set_index("statistic")
            assert 0 < lip.loc["mean_rho", "ci_low"] and lip.loc["mean_rho", "ci_high"] < 0.8, run
            if (FIG / run / "tables" / "lipschitz_exact_tokens.csv").exists():  # 'the same reading'
                assert _t(run, "lipschitz_exact_tokens").set_index("statistic").loc["mean_rho", "ci_low"] > 0
            assert c.loc["partial_given_jaccard", "mean"] < c.loc["rho_g_e", "mean"], run


# --------------------------------------------------------------------------- nothing else
SETTINGS_QUOTED = {  # a setting the prose quotes -> where it is recorded
    "64-token": ("default_study", "max_context_tokens", 64),
    "192-token": ("cpu_large", "max_context_tokens", 192),
}
NOT_RESULTS = {  # a number-like token the prose may hold -> why it is no result
    "0": "the threshold of 'V > 0', 'CI spans 0'",
    "1": "'close to 1', 'near 1'",
    "0.5": "the chance level of an AUC",
    "0.05": "the Holm threshold of the bold cells",
    "95%": "the CI level (`level` in every tables/gap_study.json, checked below)",
    "2": "the reward scale (2 × token-F1, 2 × correct) and the machine's 2 CPU cores",
    "4": "the paper's Table 4",
    "(1)": "an enumeration",
    "(2)": "an enumeration",
    "(3)": "an enumeration",
    "(4)": "an enumeration",
    "√2": "a constant",
    "135M": "the model's size, in its name",
}
NAMES = re.compile(
    r"SmolLM2[\w.-]*|Qwen2\.5-1\.5B|token-F1|top-10%|ΔP@10%|p_le_0|float16|Section-2|2K_ij|"
    r"\(?1/G²?\)?\(1|1/G\)|−\(1/G²\)|issue \d+|\d+'s|0\.1\.0's|\(issue \d+\)"
)


MATHS = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)  # arithmatex spans: formulas, not results


def _prose(page: str) -> str:
    text = sn.MARKER.sub("", PAGES[page].read_text(encoding="utf-8"))
    formulas = MATHS.findall(text)
    assert not [f for f in formulas if re.search(r"\d\.\d", f)], "a result number inside a formula"
    text = MATHS.sub("", text)
    text = re.sub(r"<[^>\n]+>|\]\([^)\s]+\)", " ", text)  # HTML tags and link targets: structure, not prose
    lines = [ln for ln in text.splitlines() if not ln.startswith(("|", "--8<--", "!["))]
    prose = re.sub(r"`[^`]*`", "", " ".join(" ".join(lines).split()))
    # checked by test_readme_study_numbers (test_paired_delta_and_retrieval_sentences)
    prose = re.sub(r"Paired Δρ = ρ\(BoT\) − ρ\(u\) on cpu-large: .*?ΔP@10% \S+ \[\S+ \S+\]\.", "", prose)
    for token, (run, key, value) in SETTINGS_QUOTED.items():
        if token in prose:
            assert json.loads((FIG / run / "run_card.json").read_text())["settings"][key] == value, token
            prose = prose.replace(token, "")
    return NAMES.sub("", prose)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_no_other_number_in_the_prose(page):
    left = [tok.strip(",.;:[]*") for tok in re.findall(r"\S*\d\S*", _prose(page))]
    left = [t if re.fullmatch(r"\(\d\)", t) else t.strip("()") for t in left]
    unexplained = sorted({t for t in left if t and t not in NOT_RESULTS})
    assert not unexplained, f"{PAGES[page].name}: numbers neither generated nor pinned: {unexplained}"


def test_the_ci_level_the_prose_names():
    for run in STUDIES:
        assert json.loads((FIG / run / "tables" / "gap_study.json").read_text())["settings"]["level"] == 0.95
