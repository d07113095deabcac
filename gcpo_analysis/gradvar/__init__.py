"""Exact per-query gradient variance from the G x G Gram matrix of per-rollout gradients.

docs/conventions.md ("Gradient variance of a query"); paper Appendix "Statistical analysis", "Target
Quantity: Sample-level Gradient Variance" (and Sec. 2.3, Var(A(Y) g(Y))):

    V(q) = (1/G) sum_i || A_i g_i - (1/G) sum_j A_j g_j ||^2,
    g_i  = grad_theta log pi_theta(y_i | q)   (summed over the completion's tokens),

with A_i the GRPO advantage of rollout i. V depends on the gradients only through the Gram
matrix K_ij = g_i . g_j, which we compute with ONE batched forward and ONE backward over the G
sequences -- never G copies of the gradient.

- ``variance``: ``gradient_variance(K, A)``, the formula above, and ``variance_parts(K, A)``, its
  split V = N + C into the norm part and the geometry (cross) part (numpy only).
- ``batch``: the checked batch, ``sequence_logprobs``, the parameter selection.
- ``rules``: per-layer factored per-sample gradients and their Gram (ghost or materialised).
- ``hooks``: the forward/backward hooks that feed those rules during one backward.
- ``gram``: ``group_gradient_gram``, the public entry point.
- ``naive``: the reference of G separate backward passes (``naive_gram``), for tests and bench.
"""

from .batch import sequence_logprobs
from .gram import group_gradient_gram
from .naive import flat_gram, naive_gram, naive_group_gradients
from .variance import gradient_variance, variance_parts

__all__ = [
    "flat_gram",
    "gradient_variance",
    "group_gradient_gram",
    "naive_gram",
    "naive_group_gradients",
    "sequence_logprobs",
    "variance_parts",
]
