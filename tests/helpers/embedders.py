"""Model-free embedders for tests and the helper scripts they launch (no network, no weights)."""

import zlib

import numpy as np


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
