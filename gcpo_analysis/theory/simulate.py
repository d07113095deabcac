"""Synthetic GRPO groups that make the two gaps of Section 2 visible without a model.

Per query q (all groups have the same size G, rollout weights 1/G):

* semantic clusters: K_q ~ U{1..k_max} clusters with masses ~ Dirichlet(concentration_q), and G
  cluster labels drawn from those masses. Cluster 0 is the policy's "reference" answer.
* answer embeddings (unit vectors): cluster k's centre sits at angle theta_k from the reference
  direction b_q, theta_0 = 0 and theta_k = theta_mid * U(1 - a, 1 + a) for k > 0, a =
  ``anisotropy`` in [0, 1]. a = 0 makes every disagreement equally severe (the isotropic error
  space SE implicitly assumes); a -> 1 mixes near-misses with far-off modes. Each rollout adds
  paraphrase noise (scale ``paraphrase``) and is renormalised.
* gradients: with ``lipschitz=True``, g_i = L * M (e_i - e_bar) + sigma * xi, M a fixed random
  (d_grad x d_embed) map with orthonormal columns: gradient distances follow embedding distances
  (App. C's semantic-gradient Lipschitz assumption with L_g = L), and responses near the group's
  consensus have small score functions, as the softmax score 1 - p is small for likely
  answers. With ``lipschitz=False`` the same construction uses an independent set of cluster
  centres (own random angles), so gradients share the cluster structure but not the geometry.
* rewards in [0, 2]: cluster k has level 2 * (1 - theta_k / (pi / 2)) with weight
  ``reward_coupling`` and a uniform random level otherwise, plus N(0, reward_noise) per rollout,
  clipped to [0, 2].

Measures: SE (clusters known, ``semantic_entropy_batch``), CD, BoT, RD (``dispersion``), and a
token-entropy proxy: surface-form uncertainty = 0.5 * ln(1 + #clusters) + paraphrase spread of
the group + lognormal per-query noise, i.e. it grows with the number of modes and with wording
variation but knows nothing of geometry or reward (what token entropy sees). GRPO advantages
A_i = (r_i - mean r) / (std r + 1e-6) (population std, ``grpo_advantages_batch``) and the exact
target V(q) = (1/G) sum_i ||A_i g_i - (1/G) sum_j A_j g_j||^2 (App. D).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..measures.advantages import grpo_advantages_batch
from ..measures.dispersion import (
    barycentric_transport_batch,
    cosine_dispersion_batch,
    reward_dispersion_batch,
)
from ..measures.entropy import semantic_entropy_batch


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _cluster_centres(rng, n: int, k_max: int, d: int, anisotropy: float, theta_mid: float):
    """Unit centres (n, k_max, d) at angles theta (n, k_max) from a per-query reference b."""
    b = _unit(rng.normal(size=(n, 1, d)))
    z = rng.normal(size=(n, k_max, d))
    z = _unit(z - (z * b).sum(-1, keepdims=True) * b)  # orthogonal to b
    theta = theta_mid * rng.uniform(1 - anisotropy, 1 + anisotropy, size=(n, k_max))
    theta[:, 0] = 0.0
    centres = np.cos(theta)[..., None] * b + np.sin(theta)[..., None] * z
    return centres, theta


def grad_variance(adv: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """V(q) = (1/G) sum_i ||A_i g_i - (1/G) sum_j A_j g_j||^2 (App. D); adv (N, G), grads (N, G, d)."""
    w = adv[..., None] * grads
    return ((w - w.mean(axis=1, keepdims=True)) ** 2).sum(-1).mean(-1)


def simulate_study(
    n_queries: int = 300,
    G: int = 16,
    d_embed: int = 32,
    d_grad: int = 64,
    anisotropy: float = 0.9,
    lipschitz: bool = True,
    reward_coupling: float = 0.8,
    k_max: int = 6,
    theta_mid: float = 0.6,
    paraphrase: float = 0.15,
    lipschitz_const: float = 3.0,
    grad_noise: float = 0.1,
    reward_noise: float = 0.15,
    zero_reward_frac: float = 0.0,
    seed: int = 0,
    return_arrays: bool = False,
):
    """Simulate ``n_queries`` groups of G rollouts; return (rollouts_frame, groups_frame).

    See the module docstring for the generative model. ``zero_reward_frac`` plants a block of
    queries (chosen at random, independently of their answers) whose G rewards are all 0, as
    a weak policy's hopeless queries: their advantages, RD and V(q) are exactly 0.
    The frames follow docs/conventions.md's frames:
    rollouts (query_id, rollout_id, completion, answer, reward, cluster, token_entropy) and
    groups (query_id, G, se, cd, bot, rd, token_entropy, n_clusters, success_rate, mean_reward,
    grad_var, mean_update_norm = ||g_hat||, g_hat = (1/G) sum_i A_i g_i). With ``return_arrays``
    a third item holds the planted arrays: ``embeddings`` (n, G, d_embed), ``gradients``
    (n, G, d_grad) and ``labels`` (n, G), for checks of the Lipschitz measurement
    (``gcpo_analysis.stats.lipschitz``).
    """
    if not 0 <= anisotropy <= 1:
        raise ValueError(f"anisotropy must lie in [0, 1], got {anisotropy}")
    if not 0 <= reward_coupling <= 1:
        raise ValueError(f"reward_coupling must lie in [0, 1], got {reward_coupling}")
    if G < 2 or n_queries < 1:
        raise ValueError(f"need G >= 2 and n_queries >= 1, got G={G}, n_queries={n_queries}")
    rng = np.random.default_rng(seed)
    n = n_queries
    # clusters and masses
    K = rng.integers(1, k_max + 1, size=n)
    conc = rng.uniform(0.3, 3.0, size=n)
    alpha = np.where(np.arange(k_max)[None] < K[:, None], conc[:, None], 1e-12)
    masses = np.stack([rng.dirichlet(a) for a in alpha])
    cum = np.cumsum(masses, axis=1)
    labels = (rng.random((n, G))[..., None] > cum[:, None, :]).sum(-1).clip(max=k_max - 1)
    # embeddings
    centres, theta = _cluster_centres(rng, n, k_max, d_embed, anisotropy, theta_mid)
    rows = np.arange(n)[:, None]
    emb = _unit(centres[rows, labels] + paraphrase * rng.normal(size=(n, G, d_embed)) / np.sqrt(d_embed))
    # gradients: an isometry of the (centred) embedding geometry, or of an unrelated one
    M = np.linalg.qr(rng.normal(size=(d_grad, d_embed)))[0]
    if lipschitz:
        source = emb
    else:
        other, _ = _cluster_centres(rng, n, k_max, d_embed, anisotropy, theta_mid)
        source = _unit(other[rows, labels] + paraphrase * rng.normal(size=(n, G, d_embed)) / np.sqrt(d_embed))
    centred = source - source.mean(axis=1, keepdims=True)
    grads = lipschitz_const * centred @ M.T + grad_noise * rng.normal(size=(n, G, d_grad)) / np.sqrt(d_grad)
    # rewards: each cluster has a level, tied to its angle from the reference answer
    level = 2.0 * (
        reward_coupling * np.clip(1 - theta / (np.pi / 2), 0, 1)
        + (1 - reward_coupling) * rng.uniform(0, 1, size=theta.shape)
    )
    rewards = np.clip(level[rows, labels] + reward_noise * rng.normal(size=(n, G)), 0.0, 2.0)
    if not 0 <= zero_reward_frac <= 1:
        raise ValueError(f"zero_reward_frac must lie in [0, 1], got {zero_reward_frac}")
    planted = rng.permutation(n)[: int(round(zero_reward_frac * n))]
    rewards[planted] = 0.0
    # measures and target
    adv = grpo_advantages_batch(rewards)
    g_hat = (adv[..., None] * grads).mean(axis=1)
    spread = np.linalg.norm(emb - centres[rows, labels], axis=-1).mean(axis=1)
    n_clusters = np.array([len(np.unique(r)) for r in labels])
    tok_rollout = (
        0.5 * np.log1p(n_clusters)[:, None]
        + spread[:, None]
        + 0.3 * rng.lognormal(-1.0, 0.5, size=(n, 1))
        + 0.05 * rng.normal(size=(n, G))
    )
    qid = np.array([f"q{i:05d}" for i in range(n)])
    groups = pd.DataFrame(
        {
            "query_id": qid,
            "G": G,
            "se": semantic_entropy_batch(labels),
            "cd": cosine_dispersion_batch(emb),
            "bot": barycentric_transport_batch(emb, labels),
            "rd": reward_dispersion_batch(rewards),
            "token_entropy": tok_rollout.mean(axis=1),
            "n_clusters": n_clusters,
            "success_rate": (rewards > 1.0).mean(axis=1),
            "mean_reward": rewards.mean(axis=1),
            "grad_var": grad_variance(adv, grads),
            "mean_update_norm": np.linalg.norm(g_hat, axis=1),
        }
    )
    rollouts = pd.DataFrame(
        {
            "query_id": np.repeat(qid, G),
            "rollout_id": np.tile(np.arange(G), n),
            "completion": [f"cluster {k} / paraphrase {i}" for k, i in zip(labels.ravel(), np.tile(np.arange(G), n))],
            "answer": [f"answer {k}" for k in labels.ravel()],
            "reward": rewards.ravel(),
            "cluster": labels.ravel(),
            "token_entropy": tok_rollout.ravel(),
        }
    )
    if return_arrays:
        return rollouts, groups, {"embeddings": emb, "gradients": grads, "labels": labels}
    return rollouts, groups


def entropy_filter_effect(
    groups: pd.DataFrame,
    tau_quantile: float = 0.5,
    measure: str = "se",
    n_boot: int = 0,
    seed: int = 0,
    level: float = 0.95,
) -> pd.DataFrame:
    """The calibration gap (Sec. 2.3): keep D_H = {q : H(q) <= tau}, tau the ``tau_quantile`` of H.

    Returns rows 'all', 'kept' and 'removed' with n, mean RD, mean grad_var and mean ||g_hat||
    (the columns present). Entropy filtering that removes high-reward-variance queries shows
    as kept < all in mean RD, mean grad_var and mean ||g_hat||.

    With ``n_boot`` > 0, each subset's mean relative to all queries, ``rel_<c>`` = mean over the
    subset / mean over all, gets a percentile bootstrap CI ``rel_<c>_ci_low/high``: the queries are
    resampled with replacement and tau is recomputed in every resample (the filter is part of
    what is being estimated). The 'all' row is 1 by definition.
    """
    if measure not in groups.columns:
        raise ValueError(f"filter measure {measure!r} is not a column of the groups frame")
    if not 0 < tau_quantile < 1:
        raise ValueError(f"tau_quantile must lie in (0, 1), got {tau_quantile}")
    h = pd.to_numeric(groups[measure], errors="coerce")
    if h.isna().any():
        raise ValueError(f"column {measure!r} has {int(h.isna().sum())} non-finite value(s)")
    tau = float(h.quantile(tau_quantile))
    cols = [c for c in ("rd", "grad_var", "mean_update_norm") if c in groups.columns]
    parts = {"all": groups, "kept": groups[h <= tau], "removed": groups[h > tau]}
    rows = []
    for name, part in parts.items():
        row = {"subset": name, "measure": measure, "tau_quantile": tau_quantile, "tau": tau, "n": len(part)}
        row.update({_mean_name(c): float(part[c].mean()) for c in cols})
        rows.append(row)
    out = pd.DataFrame(rows)
    if n_boot > 0:
        hv = h.to_numpy(float)
        idx = np.random.default_rng(seed).integers(0, len(hv), size=(n_boot, len(hv)))
        hb = hv[idx]
        keep = hb <= np.quantile(hb, tau_quantile, axis=1)[:, None]  # numpy's and pandas' linear rule
        alpha = (1 - level) / 2
        for c in cols:
            vb = groups[c].to_numpy(float)[idx]
            name = _mean_name(c)[len("mean_") :]
            base = vb.mean(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = {
                    "all": np.ones(n_boot),
                    "kept": (vb * keep).sum(1) / keep.sum(1) / base,
                    "removed": (vb * ~keep).sum(1) / (~keep).sum(1) / base,
                }
            out[f"rel_{name}"] = out[_mean_name(c)] / out[_mean_name(c)].loc[0]
            for q, side in ((alpha, "low"), (1 - alpha, "high")):
                out[f"rel_{name}_ci_{side}"] = [float(np.nanquantile(rel[s], q)) for s in out["subset"]]
    return out


def _mean_name(column: str) -> str:
    return column if column.startswith("mean_") else f"mean_{column}"
