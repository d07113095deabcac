"""Entropy-family uncertainty measures over a group of G rollouts (paper Section 2.2, App. E).

These are the baselines GCPO is compared with: semantic entropy (Seed-GRPO, EMPO), predictive
entropy, mean token entropy and kernel language entropy (KLE). Natural logarithms everywhere
(docs/conventions.md); a group of size G = 1 has no dispersion, so every measure is 0 there.

Each function takes one group; the ``*_batch`` twins take N groups of equal size stacked on a
leading axis and are vectorised (no Python loop over groups).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import entr, logsumexp

from .dispersion import check_labels

KLE_T = 0.3  # heat-kernel time; lm-polygraph's KernelLanguageEntropy default, taken from Nikitin et al.


# --------------------------------------------------------------------------- validation
def _finite(x: np.ndarray, name: str) -> np.ndarray:
    if not np.isfinite(x).all():
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
        raise ValueError(f"{name} contains a NaN or infinite value at index {idx}")
    return x


def _as_labels_batch(clusters: ArrayLike) -> np.ndarray:
    c = np.asarray(clusters)
    if c.ndim != 2:
        raise ValueError(f"clusters must have shape (N, G), got {c.shape}")
    if c.shape[1] == 0:
        raise ValueError("empty group: clusters have G = 0 columns")
    return check_labels(c)


def _as_logprobs(logprobs: ArrayLike, shape: tuple, name: str = "logprobs") -> np.ndarray:
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.shape != shape:
        raise ValueError(f"{name} have shape {lp.shape} but clusters have shape {shape}: one per rollout")
    _finite(lp, name)
    if (lp > 1e-9).any():
        idx = tuple(int(i) for i in np.argwhere(lp > 1e-9)[0])
        raise ValueError(f"{name} must be log-probabilities (<= 0); got {lp[idx]!r} at index {idx}")
    return lp


# --------------------------------------------------------------------------- semantic entropy
def semantic_entropy(clusters: ArrayLike, logprobs: ArrayLike | None = None) -> float:
    """Semantic entropy H = -sum_k C_k ln C_k over the semantic clusters of one group (Sec. 2.2).

    ``clusters``: one label per rollout (any hashable values; only equality matters).
    Without ``logprobs``, C_k = |k| / G is the empirical cluster fraction — the discrete
    estimator of Farquhar et al. (2024, Nature, "Detecting hallucinations ... semantic
    entropy"), used by Seed-GRPO/EMPO. With ``logprobs`` (sum of token log-probabilities of each
    rollout, log p(y_i | x)) it is the likelihood-weighted estimator of Kuhn et al. (2023, ICLR,
    "Semantic Uncertainty"): C_k = sum_{i in k} p_i / sum_i p_i, computed in log space with
    logsumexp so long sequences (log p ~ -1000) do not underflow. G = 1 gives 0.
    """
    c = np.asarray(clusters)
    if c.ndim != 1:
        raise ValueError(f"clusters must be one label per rollout (1-D), got shape {c.shape}")
    lp = None if logprobs is None else np.asarray(logprobs, dtype=np.float64)[None]
    return float(semantic_entropy_batch(c[None], lp)[0])


def semantic_entropy_batch(clusters: ArrayLike, logprobs: ArrayLike | None = None) -> np.ndarray:
    """Semantic entropy for N groups: clusters (N, G) [, logprobs (N, G)] -> (N,).

    Uses sum_k C_k ln C_k = sum_i w_i ln C_{k(i)} with w_i = 1/G (or p_i / sum p), so the
    same-cluster indicator E_ij = [c_i == c_j] replaces any per-group relabelling loop.
    """
    c = _as_labels_batch(clusters)
    N, G = c.shape
    same = c[:, :, None] == c[:, None, :]  # (N, G, G)
    if logprobs is None:
        mass = same.sum(axis=2) / G  # C_{k(i)}
        return 0.0 - np.log(mass).sum(axis=1) / G  # one cluster: +0.0, not the -0.0 of -(0 / G)
    lp = _as_logprobs(logprobs, (N, G))
    log_total = logsumexp(lp, axis=1, keepdims=True)
    log_mass = logsumexp(np.broadcast_to(lp[:, None, :], (N, G, G)), axis=2, b=same) - log_total
    w = np.exp(lp - log_total)
    return np.maximum(-(w * log_mass).sum(axis=1), 0.0)  # rounding may give -1e-17


def se_logweights(logprobs: ArrayLike | None, n_tokens: ArrayLike | None = None) -> np.ndarray | None:
    """Log-weights of the likelihood-weighted semantic entropy (``se_lw``; None without logprobs).

    With ``n_tokens`` the mean token log-probability logprob_i / n_i, as Kuhn et al.'s and
    Farquhar et al.'s released code do: the unnormalised sequence likelihood puts nearly all
    mass on one sampled rollout (exp of sums over ~20 tokens differ by orders of magnitude),
    which collapses SE towards 0 whatever the clusters. Without lengths, the sums are used.
    """
    if logprobs is None:
        return None
    lp = np.asarray(logprobs, dtype=np.float64)
    if n_tokens is None:
        return lp
    n = np.asarray(n_tokens, dtype=np.float64)
    if n.shape != lp.shape or (n <= 0).any():
        raise ValueError(f"n_tokens must be positive and match logprobs ({lp.shape}), got {n!r}")
    return lp / n


def entropy_weight(u: ArrayLike, G: int, alpha_base: float) -> float | np.ndarray:
    """Seed-GRPO's weight of an entropy u of a group of G (Chen et al. 2025, arXiv:2505.12346):
    omega = max(0, 1 - alpha_base * u / ln G), their linear f(x) = 1 - x on x = alpha_base u / u_max
    with u_max = ln G, the largest SE (and KLE) of G responses; clipped at 0 so a sign never flips.
    G = 1 gives 1. Used for SE, SE-LW and KLE (``w_se``, ``w_se_lw``, ``w_kle``); ``u`` may be a
    scalar or an array of groups of the same size G.
    """
    v = np.asarray(u, dtype=np.float64)
    # alpha * u / ln G, in this order: the weights the groups frame has always held, bit for bit
    w = np.maximum(0.0, 1.0 - alpha_base * v / math.log(G)) if G > 1 else np.ones_like(v)
    return float(w) if np.ndim(w) == 0 else w


# --------------------------------------------------------------------------- predictive entropy
def predictive_entropy(logprobs: ArrayLike, lengths: ArrayLike | None = None) -> float:
    """Monte-Carlo predictive entropy PE = -(1/G) sum_i log p(y_i | x) (Sec. 2.2 "predictive entropy").

    The sample estimate of the sequence entropy of Malinin & Gales (2021, ICLR, "Uncertainty
    estimation in autoregressive structured prediction"), as used by Kuhn et al. (2023). With
    ``lengths`` (tokens per rollout) each term is length-normalised: -(1/G) sum_i log p_i / L_i.
    G = 1 gives 0 (no dispersion, docs/conventions.md convention).
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 1:
        raise ValueError(f"logprobs must be one value per rollout (1-D), got shape {lp.shape}")
    ln = None if lengths is None else np.asarray(lengths, dtype=np.float64)[None]
    return float(predictive_entropy_batch(lp[None], ln)[0])


def predictive_entropy_batch(logprobs: ArrayLike, lengths: ArrayLike | None = None) -> np.ndarray:
    """Predictive entropy for N groups: logprobs (N, G) [, lengths (N, G)] -> (N,)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 2 or lp.shape[1] == 0:
        raise ValueError(f"logprobs must have shape (N, G) with G >= 1, got {lp.shape}")
    lp = _as_logprobs(lp, lp.shape)
    if lengths is not None:
        ln = np.asarray(lengths, dtype=np.float64)
        if ln.shape != lp.shape:
            raise ValueError(f"lengths have shape {ln.shape} but logprobs have shape {lp.shape}")
        if not (ln > 0).all():
            idx = tuple(int(i) for i in np.argwhere(~(ln > 0))[0])
            raise ValueError(f"lengths must be positive token counts; got {ln[idx]!r} at index {idx}")
        lp = lp / ln
    return -lp.mean(axis=1) if lp.shape[1] > 1 else np.zeros(lp.shape[0])


# --------------------------------------------------------------------------- token entropy
def token_entropy_from_logits(logits: ArrayLike, mask: ArrayLike | None = None) -> np.ndarray:
    """Per-token entropy H_t = -sum_v p_tv ln p_tv of softmax(logits) over the last axis.

    logits (..., T, V) -> (..., T). Computed as H = lse(z) - sum_v p_v z_v with
    p = exp(z - lse(z)), stable for large logits. Positions where ``mask`` (..., T) is false
    are set to 0 (padding carries no entropy); use the same mask when averaging.
    """
    z = _finite(np.asarray(logits, dtype=np.float64), "logits")
    if z.ndim < 2:
        raise ValueError(f"logits must have shape (..., T, V), got {z.shape}")
    lse = logsumexp(z, axis=-1, keepdims=True)
    logp = z - lse
    h = np.maximum(-(np.exp(logp) * logp).sum(axis=-1), 0.0)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != h.shape:
            raise ValueError(f"mask has shape {m.shape} but logits give per-token shape {h.shape}")
        h = np.where(m, h, 0.0)
    return h


def mean_token_entropy(token_entropies: ArrayLike, mask: ArrayLike | None = None) -> float:
    """Mean token entropy of a group: (1/G) sum_i mean_t H_{i,t} (Sec. 2.2 "token entropy").

    ``token_entropies``: a (G,) array of per-rollout means (the rollouts frame's
    ``token_entropy`` column), or a (G, T) array of per-token entropies with an optional (G, T)
    ``mask`` of real tokens. Each rollout is averaged over its own tokens first, so long
    rollouts do not dominate. G = 1 gives 0 (no dispersion, docs/conventions.md convention).
    """
    h = _finite(np.asarray(token_entropies, dtype=np.float64), "token_entropies")
    if h.ndim == 1:
        if mask is not None:
            raise ValueError("mask is only meaningful with a (G, T) array of per-token entropies")
        per_rollout = h
    elif h.ndim == 2:
        m = np.ones(h.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if m.shape != h.shape:
            raise ValueError(f"mask has shape {m.shape} but token_entropies have shape {h.shape}")
        counts = m.sum(axis=1)
        if (counts == 0).any():
            raise ValueError(f"rollout {int(np.argmin(counts))} has no unmasked token")
        per_rollout = np.where(m, h, 0.0).sum(axis=1) / counts
    else:
        raise ValueError(f"token_entropies must have shape (G,) or (G, T), got {h.shape}")
    if per_rollout.size == 0:
        raise ValueError("empty group: no token entropies")
    if (per_rollout < -1e-9).any():
        raise ValueError(f"token entropies must be >= 0; rollout {int(np.argmin(per_rollout))} is negative")
    return 0.0 if per_rollout.size == 1 else float(per_rollout.mean())


# --------------------------------------------------------------------------- KLE
def _similarity_graph(embeddings: ArrayLike | None, similarity: ArrayLike | None, batch: bool) -> np.ndarray:
    if (embeddings is None) == (similarity is None):
        raise ValueError("give exactly one of embeddings or similarity")
    if embeddings is not None:
        e = np.asarray(embeddings)
        if e.dtype not in (np.float32, np.float64):
            e = e.astype(np.float64)
        if e.ndim != (3 if batch else 2):
            raise ValueError(f"embeddings must have shape {'(N, G, d)' if batch else '(G, d)'}, got {e.shape}")
        # Normalise the small Gram matrix, not the (N, G, d) array: a NaN/inf anywhere shows in
        # the squared norms, and float32 input keeps a float32 GEMM (cosines good to ~1e-7).
        sq = _finite(np.einsum("...d,...d->...", e, e).astype(np.float64), "embeddings")
        if (sq < 1e-24).any():
            idx = tuple(int(i) for i in np.argwhere(sq < 1e-24)[0])
            raise ValueError(f"zero-norm embedding at index {idx}: cannot normalise it")
        inv = 1.0 / np.sqrt(sq)
        W = np.matmul(e, np.swapaxes(e, -1, -2)).astype(np.float64)
        W *= inv[..., :, None] * inv[..., None, :]
    else:
        W = _finite(np.asarray(similarity, dtype=np.float64), "similarity")
        if W.ndim != (3 if batch else 2) or W.shape[-1] != W.shape[-2]:
            raise ValueError(f"similarity must be square {'(N, G, G)' if batch else '(G, G)'}, got {W.shape}")
        if not np.allclose(W, np.swapaxes(W, -1, -2), atol=1e-6):
            raise ValueError("similarity must be symmetric; symmetrise it, e.g. (S + S.T) / 2")
    if W.shape[-1] == 0:
        raise ValueError("empty group: G = 0")
    return np.maximum(W, 0.0)


KLE_NORMALIZATIONS = ("diag", "trace")


def kernel_language_entropy_batch(
    embeddings: ArrayLike | None = None, similarity: ArrayLike | None = None, t: float = KLE_T, normalize: str = "diag"
) -> np.ndarray:
    """KLE for N groups: embeddings (N, G, d) or similarity (N, G, G) -> (N,). See kernel_language_entropy."""
    if not t > 0:
        raise ValueError(f"heat-kernel time t must be > 0, got {t!r}")
    if normalize not in KLE_NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {KLE_NORMALIZATIONS}, got {normalize!r}")
    W = _similarity_graph(embeddings, similarity, batch=True)
    G = W.shape[-1]
    idx = np.arange(G)
    W[..., idx, idx] = 0.0  # self-loops cancel in D - W anyway; zeroing keeps D meaningful
    L = np.einsum("nij->ni", W)[..., None] * np.eye(G) - W
    if normalize == "trace":
        lam = np.linalg.eigvalsh(L)  # batched symmetric eigensolver (LAPACK syevd per group)
        # Eigenvalues of K = exp(-tL)/Tr exp(-tL) are softmax(-t*lam): no second decomposition.
        log_k = -t * lam - logsumexp(-t * lam, axis=-1, keepdims=True)
        return entr(np.exp(log_k)).sum(axis=-1)
    # K = exp(-tL) = V diag(e^{-t lam}) V^T from one eigendecomposition (no expm), then the
    # authors' cosine normalisation K_ij / sqrt(K_ii K_jj) / G (unit diagonal / G: unit trace).
    lam, V = np.linalg.eigh(L)
    K = np.einsum("nik,nk,njk->nij", V, np.exp(-t * lam), V)
    d = np.sqrt(np.einsum("nii->ni", K))
    rho = K / (d[..., :, None] * d[..., None, :]) / G
    ev = np.clip(np.linalg.eigvalsh(rho), 0.0, None)  # rounding can give -1e-17
    return entr(ev).sum(axis=-1)


def kernel_language_entropy(
    embeddings: ArrayLike | None = None, similarity: ArrayLike | None = None, t: float = KLE_T, normalize: str = "diag"
) -> float:
    """Kernel Language Entropy KLE = VNE(rho) = -Tr(rho ln rho) (Nikitin et al. 2024, NeurIPS; App. E).

    Semantic graph over the G rollouts with weights W_ij = max(0, mu_i^T mu_j) for i != j from
    L2-normalised ``embeddings`` (G, d), or W_ij = max(0, S_ij) from a symmetric ``similarity``
    (G, G) — e.g. an NLI graph such as lm-polygraph's S = P(entail) + 0.5 P(neutral),
    symmetrised. Laplacian L = D - W (D_ii = sum_j W_ij), heat kernel K = exp(-t L), density
    matrix rho = K_ij / sqrt(K_ii K_jj) / G (``normalize="diag"``, the default: the KLE authors'
    code and lm-polygraph's ``normalize=True``), or rho = K / Tr K (``normalize="trace"``, the
    unit-trace form, whose eigenvalues are softmax(-t lambda(L)) with no second decomposition).
    VNE = -sum_j lambda_j ln lambda_j over rho's eigenvalues, in nats (lm-polygraph's optional
    division by ln G is not applied). K comes from one symmetric eigendecomposition of L (numpy's
    batched ``eigh``), not a matrix exponential.

    Default t = 0.3, lm-polygraph's default (taken from the KLE paper). Values (both forms):
    G = 1 gives 0; G orthogonal (or negatively correlated) answers give ln G (W = 0, rho = I/G);
    G identical answers do not give 0, because the heat kernel keeps some mass off the
    consensus direction at finite t.
    """
    e = None if embeddings is None else np.asarray(embeddings)[None]
    s = None if similarity is None else np.asarray(similarity)[None]
    if e is not None and e.ndim != 3 or s is not None and s.ndim != 3:
        raise ValueError("embeddings must have shape (G, d) and similarity (G, G) for one group")
    return float(kernel_language_entropy_batch(e, s, t, normalize)[0])
