"""V(q) from the Gram matrix of a group's per-rollout gradients and its advantages.

docs/conventions.md ("Gradient variance of a query"); paper Appendix "Statistical analysis",
"Target Quantity: Sample-level Gradient Variance" (and Sec. 2.3, Var(A(Y) g(Y))). Pure numpy.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def gradient_variance(gram: ArrayLike, advantages: ArrayLike) -> float:
    """V(q) from the Gram matrix K_ij = g_i . g_j and the advantages A_i (docs/conventions.md; paper
    Appendix "Target Quantity: Sample-level Gradient Variance").

    With h_i = A_i g_i and m = (1/G) sum_j h_j,
        (1/G) sum_i ||h_i - m||^2 = (1/G) sum_i ||h_i||^2 - ||m||^2
                                  = (1/G) sum_i A_i^2 K_ii - (1/G^2) sum_ij A_i A_j K_ij,
    because (1/G) sum_i 2 h_i . m = 2 ||m||^2. V >= 0 since K is positive semi-definite; a
    negative value within float64 rounding of the terms is returned as 0, a larger one raises.
    """
    K = np.asarray(gram, dtype=np.float64)
    a = np.asarray(advantages, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"gram must be a square G x G matrix, got shape {K.shape}")
    if a.shape != (K.shape[0],):
        raise ValueError(f"advantages must have shape ({K.shape[0]},) to match the gram, got {a.shape}")
    if not np.isfinite(K).all():
        raise ValueError("gram has non-finite entries")
    if not np.isfinite(a).all():
        raise ValueError("advantages have non-finite entries")
    G = K.shape[0]
    first = float(np.sum(a * a * np.diag(K))) / G
    second = float(a @ K @ a) / G**2
    v = first - second
    if v < 0:
        if v < -1e-9 * max(abs(first), abs(second), 1e-300):
            raise ValueError(f"gradient variance is negative ({v:.3e}); the gram is not positive semi-definite")
        v = 0.0
    return v


def variance_parts(gram: ArrayLike, advantages: ArrayLike) -> tuple[float, float]:
    """(N, C) with V = N + C (docs/conventions.md "V = N + C"):

        N(q) = (1/G)(1 - 1/G) sum_i A_i^2 K_ii          what V would be with orthogonal gradients,
        C(q) = -(1/G^2) sum_{i != j} A_i A_j K_ij        the geometry of the gradients.

    From ``gradient_variance``'s form, V = (1/G) sum_i A_i^2 K_ii - (1/G^2) sum_ij A_i A_j K_ij;
    splitting the double sum into i = j and i != j gives N + C. N >= 0 always; C has either
    sign (C < 0 when same-sign advantages have aligned gradients). G = 1 and equal rewards
    (A = 0) give N = C = 0. Same checks as ``gradient_variance``.
    """
    K = np.asarray(gram, dtype=np.float64)
    a = np.asarray(advantages, dtype=np.float64)
    gradient_variance(K, a)  # the shape, finiteness and positive semi-definiteness checks
    G = K.shape[0]
    diag = float(np.sum(a * a * np.diag(K)))
    n = diag * (1.0 - 1.0 / G) / G
    c = -(float(a @ K @ a) - diag) / G**2
    return n, c
