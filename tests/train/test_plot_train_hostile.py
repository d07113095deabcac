"""Hostile input for gcpo_train.plot_train (bounded work): a long log is downsampled,
drawn in bounded time and size."""

import json
import time

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_plot_train_downsamples_a_long_log(tmp_path):
    pytest.importorskip("matplotlib")
    from gcpo_train.plot_train import MAX_POINTS, plot_training

    n = 60_000
    steps = np.arange(1, n + 1)
    lines = [json.dumps({"step": int(s), "reward_mean": float(np.sin(s / 1000)), "kl": 0.0}) for s in steps]
    (tmp_path / "log.jsonl").write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    with pytest.warns(UserWarning, match=f"{n} logged steps drawn as {MAX_POINTS}"):
        paths = plot_training(tmp_path)
    assert time.perf_counter() - t0 < 30
    svg = [p for p in paths if str(p).endswith(".svg")][0]
    assert svg.stat().st_size < 2_000_000
