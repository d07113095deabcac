"""gcpo compare's coupled fp32 protocol: fp32 sampling kernels by default, bf16 only as
a recorded opt-in, never bf16 for evaluation, greedy evaluation independent of the batch size on
the packaged model, and `gcpo compare --plan`."""

import json
import runpy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gcpo_train.compare.plan import check_sampling, fastest_fp32_kernels
from gcpo_train.compare.settings import load_compare_config

# the evaluation at several batch sizes, shared with the benchmark that records its full-size result
BENCH = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "greedy_batch.py"))
PREFILL_BENCH = runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "eval_prefill.py"))


def _write(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_a_config_without_kernels_samples_on_the_fastest_fp32_kernels(tmp_path):
    pytest.importorskip("torch")
    import torch

    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN")
    cfg, settings = load_compare_config(_write(tmp_path, "model: packaged\ndevice: cpu\nsteps: 2\n"))
    assert cfg.sampling_kernels == "fused" and settings["bf16_sampling"] is False
    cfg, _ = load_compare_config(_write(tmp_path, "model: tiny:gpt2\ndevice: cpu\nsteps: 2\n"))
    assert cfg.sampling_kernels == "onednn"  # a model the fused kernels do not implement
    cfg, _ = load_compare_config(_write(tmp_path, "model: packaged\nbackend: trl\nsteps: 2\n"))
    assert cfg.sampling_kernels == "exact"
    cfg, _ = load_compare_config(_write(tmp_path, "model: packaged\ndevice: cpu\nsampling_kernels: onednn\n"))
    assert cfg.sampling_kernels == "onednn"  # a config's own choice stands
    assert fastest_fp32_kernels("packaged", "cuda", "gcpo") == "exact"


def test_bf16_sampling_is_an_explicit_recorded_opt_in(tmp_path):
    from gcpo_train.compare.run import Comparison
    from gcpo_train.config import TrainConfig

    base = TrainConfig(model="tiny:llama", steps=1, device="cpu", sampling_kernels="fused_bf16")
    with pytest.raises(ValueError, match="bf16_sampling: true"):
        Comparison(base, tmp_path / "a", ["none"], [0])
    with pytest.raises(ValueError, match="bf16_sampling: true"):
        check_sampling(TrainConfig(sampling_kernels="bf16"), False)
    spec = Comparison(base, tmp_path / "b", ["none"], [0], bf16_sampling=True).spec()
    assert spec["bf16_sampling"] is True and "never" in spec["evaluation"] and spec["equivalence_margin"] == 0.1
    with pytest.raises(ValueError, match="bf16_sampling must be true or false"):
        load_compare_config(_write(tmp_path, "steps: 2\ncompare:\n  bf16_sampling: 1\n"))
    with pytest.raises(ValueError, match="equivalence_margin must be a number in"):
        load_compare_config(_write(tmp_path, "steps: 2\ncompare:\n  equivalence_margin: 10\n"))


def test_a_folder_made_before_these_records_still_resumes(tmp_path):
    """compare.json of an earlier comparison has no bf16_sampling / evaluation /
    equivalence_margin: resuming it is not refused for their absence."""
    from gcpo_train.compare.run import Comparison
    from gcpo_train.config import TrainConfig

    base = TrainConfig(model="tiny:llama", steps=1, device="cpu")
    c = Comparison(base, tmp_path / "f", ["none"], [0])
    c.out.mkdir()
    old = {k: v for k, v in json.loads(json.dumps(c.spec(), default=str)).items() if k not in ("bf16_sampling",)}
    old.pop("evaluation"), old.pop("equivalence_margin")
    (c.out / "compare.json").write_text(json.dumps(old))
    c._check_spec()
    assert json.loads((c.out / "compare.json").read_text())["bf16_sampling"] is False
    # but a recorded setting that differs is refused
    (c.out / "compare.json").write_text(json.dumps({**old, "equivalence_margin": 0.2}))
    with pytest.raises(ValueError, match="equivalence_margin"):
        c._check_spec()


def test_plan_from_a_comparison_folder(tmp_path):
    """--plan's τ and seeds from a hand-made results.parquet: per-seed deltas 1, -1, 3 over 2 queries."""
    from gcpo_analysis.stats.seeds import seeds_for_power, variance_components
    from gcpo_train.compare.plan import plan, write_plan

    rows = []
    for seed, (d1, d2) in enumerate([(1.0, 1.0), (-2.0, 0.0), (3.0, 3.0)]):
        for q, d in (("a", d1), ("b", d2)):
            rows.append(dict(arm="none", seed=seed, step=5, query_id=q, score=20.0))
            rows.append(dict(arm="x", seed=seed, step=5, query_id=q, score=20.0 + d))
    results = pd.DataFrame(rows)
    table = plan(results, seeds=12).set_index("arm")
    d = np.array([[1.0, 1.0], [-2.0, 0.0], [3.0, 3.0]])
    vc = variance_components(d)
    assert table.loc["x", "tau"] == pytest.approx(vc["tau"])
    # by hand: var(D) = var(1, -1, 3) = 4; σ_q² = mean(0, 2, 0) = 2/3; τ² = 4 - (2/3)/2
    assert table.loc["x", "tau"] == pytest.approx(np.sqrt(4 - 1 / 3))
    assert table.loc["x", "delta"] == pytest.approx(2.0)
    assert table.loc["x", "seeds_needed"] == seeds_for_power(2.0, 2.0)
    assert "detectable_12" in table
    folder = tmp_path / "cmp"
    with pytest.raises(FileNotFoundError, match="results.parquet"):
        write_plan(folder)
    folder.mkdir()
    results.to_parquet(folder / "results.parquet")
    text = write_plan(folder, seeds=12)
    assert (folder / "plan.md").read_text() == text and "planned analysis" in text


@pytest.mark.slow
def test_greedy_evaluation_is_the_same_at_batch_sizes_4_and_16(tmp_path, nqa_spans_data):
    """The packaged policy's greedy completions (8 new tokens) of 16 held-out NarrativeQA-spans
    prompts are the same decoded in batches of 4 and 16 on the fp32 fused kernels. Under bf16,
    15 of 64 completions of 16 tokens changed between batch 16 and 64; this is the
    fp32 guarantee on a smaller sample (the issue's size, 64 prompts at 8, 16 and 64, is the
    opt-in test below: 9 min of CI)."""
    pytest.importorskip("torch")
    import torch

    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN")
    res = BENCH["greedy_completions"](nqa_spans_data, "fused", 16, 8, batches=(4, 16), workdir=tmp_path)
    assert res[4][0] == res[16][0] and len(res[4][0]) == 16


@pytest.mark.slow
@pytest.mark.full
def test_greedy_evaluation_is_the_same_at_batch_sizes_8_16_and_64(tmp_path):
    """The protocol's size: 64 held-out prompts, 16 new tokens, batches of 8, 16 and 64, on the fused
    fp32 kernels (``bench/greedy_batch.py``, whose committed result is
    ``bench/results/greedy_batch.md``). About 5 minutes on one core: `pytest -m full`."""
    pytest.importorskip("torch")
    res = BENCH["greedy_completions"](BENCH["spans_data"](tmp_path), "fused", 64, 16, workdir=tmp_path)
    assert sorted(res) == [8, 16, 64]
    assert res[8][0] == res[16][0] == res[64][0]
    assert len(set(res[8][0])) > 10  # real, varied answers, not one repeated string


@pytest.mark.slow
@pytest.mark.full
def test_shared_prefixes_give_the_plain_prefills_completions_on_all_held_out_prompts(tmp_path):
    """The protocol's size: the 362 held-out prompts at batches of 64 with the plain and the shared
    prefill (``bench/eval_prefill.py``, whose committed result is ``bench/results/eval_prefill.md``);
    the bench exits 1 if a completion or a score differs. About 10 minutes on one core."""
    pytest.importorskip("torch")
    assert PREFILL_BENCH["main"](["--n", "362", "--data_path", BENCH["spans_data"](tmp_path)]) == 0


@pytest.mark.slow
def test_shared_prefixes_give_the_plain_prefills_completions_on_24_prompts(nqa_spans_data, capsys):
    """The packaged policy's greedy completions and scores of 24 held-out prompts (one batch, about
    7 passages) with the shared prefill are the plain prefill's, and it computes fewer rows."""
    pytest.importorskip("torch")
    assert PREFILL_BENCH["main"](["--n", "24", "--data_path", nqa_spans_data]) == 0
    rows = {
        line.split("|")[1].strip(): int(line.split("|")[2])
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| plain |") or line.startswith("| shared")
    }
    assert rows["shared prefixes"] < 0.6 * rows["plain"]
