"""Fakes and fixtures shared by the test files: a model-free embedder and a tiny saved policy.

Test modules and helper scripts import the class by name (``from conftest import HashEmbedder``;
pytest puts this folder on ``sys.path``); fixtures need no import.
"""

import zlib

import numpy as np
import pytest


class HashEmbedder:
    """Deterministic unit vectors from a text's CRC-32: no model, and the same vector for the
    same text in every call and every process (a multi-process run agrees with one process).

    ``encode(texts, **kwargs)`` -> (n, dim) float32 rows of norm 1; it takes the keyword
    arguments ``Embedder`` passes a sentence-transformers model and ignores them, so it works
    both bare (gcpo_train accepts any ``encode(texts)``) and wrapped in an ``Embedder``.
    ``calls`` counts the ``encode`` calls.
    """

    def __init__(self, dim: int = 8):
        self.dim = dim
        self.calls = 0

    def encode(self, texts, **kwargs):
        self.calls += 1
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=self.dim) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)

    def describe(self) -> dict:
        return {"kind": "hash", "dim": self.dim}


@pytest.fixture()
def hash_embedder():
    return HashEmbedder()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random tiny llama (seed 0) and its tokenizer saved as a model folder: a policy path for
    the study, TRL and training tests (no network)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-llama")
    tok = tiny_tokenizer()
    tiny_causal_lm("llama", vocab_size=len(tok), seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    return path
