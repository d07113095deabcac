"""Geometry-aware and reward-calibrated measures and their weights (paper Section 3).

Every function takes one group (arrays of length G) and has a ``*_batch`` twin over N groups
of equal size stacked on a leading axis, so a study of 10,000 groups is a few array ops.

Conventions (docs/conventions.md): rollout weights pi_i = 1/G; embeddings are L2-normalised;
alpha_G = alpha_base / ln G; G = 1 has no dispersion, so every measure is 0 and every weight 1.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ..knob import check_value, finite_number
from ..vocab import ALPHA_BASE, R_MAX, R_MIN  # noqa: F401 (re-exported: the measures' defaults)
from .params import MEASURE_KNOBS

_NORM_TOL = 1e-6


# --------------------------------------------------------------------------- validation
def _as_embeddings(embeddings: ArrayLike, *, batch: bool) -> np.ndarray:
    # float32 stays float32: a 10,000-group study must not pay for a float64 copy.
    e = np.asarray(embeddings)
    if e.dtype not in (np.float32, np.float64):
        e = e.astype(np.float64)
    want = 3 if batch else 2
    if e.ndim != want:
        shape = "(N, G, d)" if batch else "(G, d)"
        raise ValueError(f"embeddings must have shape {shape}, got {e.shape}")
    if e.shape[-2] == 0:
        raise ValueError("empty group: embeddings have G = 0 rows")
    sq = np.einsum("...d,...d->...", e, e, dtype=np.float64)  # NaN/inf propagate into it
    if not np.isfinite(sq).all() or (sq < 1e-24).any():
        if not np.isfinite(e).all():
            raise ValueError("embeddings contain NaN or infinite values")
        # Finite rows whose squared norm over- or underflows (|x| ~ 1e200 or 1e-200): scale each
        # row by its largest entry first; the direction, all the measures see, is unchanged.
        peak = np.abs(e).max(axis=-1, keepdims=True)
        e = np.divide(e, peak, out=np.zeros_like(e), where=peak > 0)
        sq = np.einsum("...d,...d->...", e, e, dtype=np.float64)
    zero = sq < 1e-24
    if zero.any():
        idx = np.argwhere(zero)[0]
        where = f"group {idx[0]}, rollout {idx[1]}" if batch else f"rollout {idx[0]}"
        raise ValueError(f"zero-norm embedding at {where}: cannot normalise it")
    if np.abs(sq - 1.0).max() < 1e-6:  # already unit rows (the embedder's output)
        return e
    return e / np.sqrt(sq)[..., None].astype(e.dtype)


def as_rewards(rewards: ArrayLike, r_min: float, r_max: float, *, batch: bool) -> np.ndarray:
    """Rewards as float64, checked: one group (G,) or a batch (N, G), finite, non-empty, inside
    [r_min, r_max] (1e-9 slack); the error names the first bad reward's rollout (and group)."""
    r_min, r_max = finite_number("r_min", r_min), finite_number("r_max", r_max)
    r = reward_array(rewards)
    want = 2 if batch else 1
    if r.ndim != want:
        raise ValueError(f"rewards must have {want} dimension(s), got shape {r.shape}")
    if r.shape[-1] == 0:
        raise ValueError("empty group: no rewards")
    check_finite_rewards(r)
    if not r_max > r_min:
        raise ValueError(f"reward range must have r_max > r_min, got [{r_min}, {r_max}]")
    out = (r < r_min - 1e-9) | (r > r_max + 1e-9)
    if out.any():
        idx = np.argwhere(out)[0]
        raise ValueError(
            f"reward {float(r[tuple(idx)]):g} of {_position(idx)} lies outside the declared range [{r_min}, {r_max}]"
        )
    return r


def reward_array(rewards: ArrayLike) -> np.ndarray:
    """Rewards as a float64 array, a boolean refused, naming its rollout (and group): True is a
    success flag, not a reward in [r_min, r_max] (reward_dispersion([True, False]) was 0.5). The
    one conversion of every reward path (as_rewards, GRPO advantages, the measurement batch);
    integers are rewards."""
    raw = rewards if isinstance(rewards, np.ndarray) else np.asarray(rewards, dtype=object)
    if raw.dtype == object:  # a list keeps each element's type: [True, 0.5] would be a float array
        bad = np.asarray(np.frompyfunc(lambda v: isinstance(v, (bool, np.bool_)), 1, 1)(raw), dtype=bool)
    else:
        bad = np.full(raw.shape, raw.dtype == bool)
    if bad.any():
        idx = np.argwhere(bad)[0]
        where = f"reward of {_position(idx)}" if idx.size else "the reward"
        raise ValueError(
            f"{where} is {raw[tuple(idx)]!r}, a boolean: rewards are numbers "
            "(pass 1.0 and 0.0 if True and False are meant as rewards)"
        )
    return raw.astype(np.float64)


def check_finite_rewards(r: np.ndarray) -> np.ndarray:
    """Refuse a NaN or infinite reward, naming its rollout (and group): the one finiteness check
    of every reward path (weights, dispersion, GRPO advantages)."""
    if not np.isfinite(r).all():
        raise ValueError(f"NaN or infinite reward of {_position(np.argwhere(~np.isfinite(r))[0])}")
    return r


def _position(idx: np.ndarray) -> str:
    """'rollout i' of a group, 'group k, rollout i' of a batch (0-based)."""
    at = [int(i) for i in idx]
    return f"rollout {at[0]}" if len(at) == 1 else f"group {at[0]}, rollout {at[1]}"


def check_alpha_base(alpha_base: float) -> float:
    """alpha_base must be a finite number >= 0: a negative one flips the sign of advantages
    (omega_geo > 1, omega_RD < 1), NaN makes every weight NaN."""
    return check_value("alpha_base", alpha_base, MEASURE_KNOBS["alpha_base"], float)


def check_labels(c: np.ndarray, where: str = "") -> np.ndarray:
    """Cluster labels: any hashable values, but never missing (NaN or None), which would make
    every rollout a cluster of its own without a word."""
    if c.dtype.kind == "f":
        bad = np.isnan(c)
    elif c.dtype == object:
        bad = np.frompyfunc(lambda v: v is None or (isinstance(v, float) and v != v), 1, 1)(c).astype(bool)
    else:
        return c
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"cluster label{where} at index {idx} is missing (NaN or None)")
    return c


def _check_G(G: float) -> int:
    if int(G) != G or G < 1:
        raise ValueError(f"group size G must be an integer >= 1, got {G!r}")
    return int(G)


# --------------------------------------------------------------------------- weights
def alpha_g(G: int, alpha_base: float = ALPHA_BASE) -> float:
    """Group-size normalised strength alpha_G = alpha_base / ln G (Section 3.4).

    G = 1 has no dispersion to modulate; alpha_G is defined as 0 there (every weight is 1).
    """
    G = _check_G(G)
    a = check_alpha_base(alpha_base)
    return 0.0 if G == 1 else a / math.log(G)


def geometry_weight(u: ArrayLike, G: int, alpha_base: float = ALPHA_BASE) -> float | np.ndarray:
    """omega_geo = clip(1 - alpha_G * u^2, 0, 1) for u = CD or BoT (Sections 3.1-3.2).

    ``u`` may be a scalar or an array of groups of the same size G.
    """
    a = alpha_g(G, alpha_base)
    u = np.asarray(u, dtype=np.float64)
    if not np.isfinite(u).all():
        raise ValueError("the measure u of geometry_weight is NaN or infinite")
    w = np.clip(1.0 - a * np.square(u), 0.0, 1.0)
    return float(w) if np.ndim(w) == 0 else w


def rd_weight(rd: ArrayLike, G: int, alpha_base: float = ALPHA_BASE) -> float | np.ndarray:
    """omega_RD = 1 + alpha_G * RD, in [1, 1 + alpha_G] (Section 3.3)."""
    a = alpha_g(G, alpha_base)
    rd = np.asarray(rd, dtype=np.float64)
    if not np.all((rd >= 0) & (rd <= 1)):  # NaN fails this too
        raise ValueError("RD must lie in [0, 1] (and not be NaN)")
    w = 1.0 + a * rd
    return float(w) if np.ndim(w) == 0 else w


# --------------------------------------------------------------------------- CD
def cosine_dispersion(embeddings: ArrayLike) -> float:
    """Cosine Dispersion CD(q) = pi^T D pi, D_ij = clip(1 - mu_i^T mu_j, 0, 1), pi_i = 1/G (Eq. in Sec. 3.1).

    The diagonal is included (D_ii = 0). Embeddings are L2-normalised here.
    """
    e = _as_embeddings(embeddings, batch=False)  # errors name the rollout, not "group 0"
    return float(cosine_dispersion_batch(e[None])[0])


def cosine_dispersion_batch(embeddings: ArrayLike) -> np.ndarray:
    """CD for N groups of equal size: embeddings (N, G, d) -> (N,)."""
    e = _as_embeddings(embeddings, batch=True)
    G = e.shape[1]
    # The GEMM runs in the input's precision: float32 embeddings (what embedders return) keep
    # the 2x faster float32 GEMM, float64 ones get float64 (~1e-16, not ~3e-7); the sum is float64.
    sims = np.matmul(e, e.transpose(0, 2, 1))
    D = np.clip(1.0 - sims, 0.0, 1.0)
    idx = np.arange(G)
    D[:, idx, idx] = 0.0  # mu_i^T mu_i = 1 exactly; float32 rounding must not leak in
    return D.sum(axis=(1, 2), dtype=np.float64) / (G * G)


# --------------------------------------------------------------------------- BoT
def _check_clusters(clusters: ArrayLike, G: int, where: str = "") -> np.ndarray:
    c = np.asarray(clusters)
    if c.ndim != 1 or len(c) != G:
        raise ValueError(
            f"clusters{where} have length {len(c) if c.ndim == 1 else c.shape} but there are "
            f"{G} embeddings: one cluster label per rollout is needed"
        )
    check_labels(c, where)
    _, labels = np.unique(c, return_inverse=True)
    return labels


def barycentric_transport(embeddings: ArrayLike, clusters: ArrayLike) -> float:
    """Barycentric Transport (Section 3.2).

    Pi_k = sum_{i in k} pi_i; mu_k = normalize(mean of member embeddings);
    mu* = normalize(sum_k Pi_k mu_k); BoT = clip(sum_k Pi_k (1 - mu_k^T mu*) / 2, 0, 1).
    If the mass-weighted mean of the centroids is the zero vector (modes that cancel exactly),
    there is no consensus direction; every mode is then maximally far and BoT = 1/2.
    """
    e = _as_embeddings(embeddings, batch=False)
    labels = _check_clusters(clusters, e.shape[0])
    return float(_bot_from_labels(e[None], labels[None])[0])


def barycentric_transport_batch(embeddings: ArrayLike, clusters: ArrayLike) -> np.ndarray:
    """BoT for N groups of equal size: embeddings (N, G, d), clusters (N, G) -> (N,)."""
    e = _as_embeddings(embeddings, batch=True)
    c = np.asarray(clusters)
    if c.shape != e.shape[:2]:
        raise ValueError(f"clusters have shape {c.shape} but embeddings have groups {e.shape[:2]}")
    return _bot_from_labels(e, _relabel_rows(check_labels(c)))


def _relabel_rows(c: np.ndarray) -> np.ndarray:
    """Map each row's labels to 0..K_n-1 (sorted order), vectorised over rows."""
    order = np.argsort(c, axis=1, kind="stable")
    s = np.take_along_axis(c, order, axis=1)
    first = np.ones(s.shape, dtype=bool)
    first[:, 1:] = s[:, 1:] != s[:, :-1]
    out = np.empty(c.shape, dtype=np.int64)
    np.put_along_axis(out, order, np.cumsum(first, axis=1) - 1, axis=1)
    return out


def _bot_from_labels(e: np.ndarray, labels: np.ndarray) -> np.ndarray:
    N, G, d = e.shape
    K = int(labels.max()) + 1
    onehot = np.zeros((N, G, K), dtype=e.dtype)
    np.put_along_axis(onehot, labels[..., None], 1.0, axis=2)
    # a batched GEMM, 8x faster than the equivalent einsum; centroids continue in float64
    sums = np.matmul(onehot.transpose(0, 2, 1), e).astype(np.float64)  # unnormalised centroids
    mass = onehot.sum(axis=1, dtype=np.float64) / G  # Pi_k, (N, K); 0 for unused slots
    norms = np.linalg.norm(sums, axis=-1, keepdims=True)
    # A cluster whose members cancel has no direction; it counts as orthogonal to mu*.
    mu_k = np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 1e-12)
    bary = np.einsum("nk,nkd->nd", mass, mu_k)
    bnorm = np.linalg.norm(bary, axis=-1, keepdims=True)
    mu_star = np.divide(bary, bnorm, out=np.zeros_like(bary), where=bnorm > 1e-12)
    cos = np.einsum("nkd,nd->nk", mu_k, mu_star)
    return np.clip((mass * (1.0 - cos) / 2.0).sum(axis=1), 0.0, 1.0)


# --------------------------------------------------------------------------- RD
def rd_max(G: int, r_min: float = R_MIN, r_max: float = R_MAX) -> float:
    """RD_max(G) = (2/G) * floor(G/2) * ceil(G/2) * (r_max - r_min) (Appendix E).

    The largest sum_i |r_i - mean r| over rewards in [r_min, r_max]: half the group at each end.
    """
    G = _check_G(G)
    return 2.0 / G * (G // 2) * (-(-G // 2)) * (float(r_max) - float(r_min))


def reward_dispersion(rewards: ArrayLike, r_min: float = R_MIN, r_max: float = R_MAX) -> float:
    """Reward Dispersion RD = clip(sum_i |r_i - r_bar| / RD_max(G), 0, 1) (Section 3.3).

    Rewards outside [r_min, r_max] are an error. G = 1 gives RD = 0.
    """
    r = as_rewards(rewards, r_min, r_max, batch=False)
    return float(reward_dispersion_batch(r[None], r_min, r_max)[0])


def reward_dispersion_batch(rewards: ArrayLike, r_min: float = R_MIN, r_max: float = R_MAX) -> np.ndarray:
    """RD for N groups of equal size: rewards (N, G) -> (N,)."""
    r = as_rewards(rewards, r_min, r_max, batch=True)
    G = r.shape[1]
    if G == 1:
        return np.zeros(r.shape[0])
    raw = np.abs(r - r.mean(axis=1, keepdims=True)).sum(axis=1)
    return np.clip(raw / rd_max(G, r_min, r_max), 0.0, 1.0)
