"""Hostile input for gcpo_analysis.models (bounded work): a Hub name that is not in the
local cache fails within seconds, offline first."""

import time

import pytest


def test_a_hub_name_goes_offline_first(monkeypatch):
    pytest.importorskip("transformers")
    from gcpo_analysis.models import load_policy

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(OSError, match="not in the local Hugging Face cache.*HF_HUB_OFFLINE"):
        load_policy("gcpo-test-org/no-such-model-xyz")
    assert time.perf_counter() - t0 < 5
