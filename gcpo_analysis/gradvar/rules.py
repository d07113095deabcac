"""Per-layer rules: a parameter's per-sample gradients in factored form and their Gram.

Every parameter's per-sample gradient is a sum, over the uses of that parameter, of factored
terms ``L_i^T R_i`` (T positions contracted), with B_i the output gradient of sample i and A_i
its input:

- Linear  W (p x d), y = x W^T + b:  g_i^W = B_i^T A_i          (L = B, R = A)
- Conv1D  W (d x p), y = x W + b:    g_i^W = A_i^T B_i          (L = A, R = B)
- Embedding E (V x d), ids:          g_i^E = onehot(ids_i)^T B_i (L = one-hot, never built)
- biases: g_i^b = sum_t B_i[t]; norm weights/biases (RMSNorm, LayerNorm): tiny, so their
  per-sample gradients come from ``torch.func.vmap(grad(...))`` of the module on its input
  (``hooks.GramCapture``).

For one use, <L_i^T R_i, L_j^T R_j> = sum_{s,t} (L_i L_j^T)_{st} (R_i R_j^T)_{st} (the "ghost"
form, cost ~ G^2 T^2 (p + d)); or the per-sample gradients are materialised, a chunk of rows
at a time, and their Gram taken (cost ~ G T p d + G^2 p d): whichever is cheaper per layer.
A weight with several uses (tied input embedding and lm_head, SmolLM2) is always materialised
as the sum of its uses, which gives its pure terms and its cross terms. Positions where every
sample's output gradient is zero (prompt positions at the lm_head, padding) are dropped first.
"""

from __future__ import annotations

from ..models import require

_CHUNK_FLOATS = 1 << 25  # elements of one materialised per-sample-gradient chunk (128 MB fp32)


def module_kind(module):
    """The rule a module's parameters get: linear, conv1d, embedding, norm, or None (no rule)."""
    torch = require("torch")
    name = type(module).__name__
    if isinstance(module, torch.nn.Linear):
        return "linear"
    if name == "Conv1D" and hasattr(module, "nf"):  # transformers.pytorch_utils.Conv1D
        return "conv1d"
    if isinstance(module, torch.nn.Embedding):
        if module.max_norm is not None or module.scale_grad_by_freq:
            raise ValueError(f"embedding {name} with max_norm/scale_grad_by_freq is not supported")
        return "embedding"
    if isinstance(module, (torch.nn.LayerNorm, getattr(torch.nn, "RMSNorm", ()))) or name.endswith("RMSNorm"):
        return "norm"
    return None


class Term:
    """One use's per-sample gradient of one parameter: g_i = L_i^T R_i (T contracted).

    L is (G, T, rows) dense, or ``ids`` (G, T) for a one-hot L (embedding); R is (G, T, cols).
    """

    def __init__(self, R, L=None, ids=None):
        self.R, self.L, self.ids = R, L, ids


def _gram_ghost(term, G):
    """sum_{s,t} (L_i L_j^T)_{st} (R_i R_j^T)_{st}, chunked over i to bound G*c*T^2 memory."""
    torch = require("torch")
    L, R = term.L, term.R
    T = R.shape[1]
    K = torch.zeros(G, G, dtype=torch.float64, device=R.device)
    step = max(1, _CHUNK_FLOATS // max(1, G * T * T))
    for i0 in range(0, G, step):
        i1 = min(G, i0 + step)
        rr = torch.einsum("isd,jtd->ijst", R[i0:i1], R)
        if term.ids is not None:
            ll = (term.ids[i0:i1, None, :, None] == term.ids[None, :, None, :]).to(R.dtype)
        else:
            ll = torch.einsum("isp,jtp->ijst", L[i0:i1], L)
        K[i0:i1] += (ll * rr).sum((2, 3)).double()
    return K


def _gram_materialised(terms, G, n_rows):
    """Gram of per-sample gradients sum_u L_u,i^T R_u,i built a chunk of rows at a time."""
    torch = require("torch")
    R0 = terms[0].R
    cols = R0.shape[-1]
    dev = R0.device
    if all(t.ids is not None for t in terms):  # only rows of tokens that occur are non-zero
        rows = torch.unique(torch.cat([t.ids.reshape(-1) for t in terms]))
    else:
        rows = None
    total = n_rows if rows is None else int(rows.numel())
    K = torch.zeros(G, G, dtype=torch.float64, device=dev)
    step = max(1, _CHUNK_FLOATS // max(1, G * cols))
    for r0 in range(0, total, step):
        r1 = min(total, r0 + step)
        buf = None
        for t in sorted(terms, key=lambda t: t.ids is not None):  # dense first: no zero-fill
            if t.ids is None:
                e = torch.einsum("gtc,gtd->gcd", t.L[:, :, r0:r1], t.R)
                buf = e if buf is None else buf.add_(e)
                continue
            if buf is None:
                buf = torch.zeros(G, r1 - r0, cols, dtype=R0.dtype, device=dev)
            local = torch.full((n_rows,), -1, dtype=torch.long, device=dev)
            chunk_rows = torch.arange(r0, r1, device=dev) if rows is None else rows[r0:r1]
            local[chunk_rows] = torch.arange(r1 - r0, device=dev)
            loc = local[t.ids]  # (G, T)
            hit = loc >= 0
            g_idx = torch.arange(G, device=dev)[:, None].expand_as(loc)[hit]
            buf.view(-1, cols).index_add_(0, g_idx * (r1 - r0) + loc[hit], t.R[hit])
        assert buf is not None  # terms is not empty
        flat = buf.reshape(G, -1)
        K += (flat @ flat.T).double()
    return K


def param_gram(terms, vecs, G, n_rows, method="auto"):
    """K contribution of one parameter from its factored terms or its per-sample vectors."""
    torch = require("torch")
    if terms and vecs:
        raise ValueError("a parameter used both as a factored weight and as a small vector is not supported")
    if vecs:
        v = torch.stack(vecs).sum(0).reshape(G, -1)
        return (v @ v.T).double()
    if len(terms) == 1:
        t = terms[0]
        T, cols = t.R.shape[1], t.R.shape[2]
        rows = t.L.shape[2] if t.L is not None else int(torch.unique(t.ids).numel())
        ghost = G * G * T * T * (rows + cols) if t.L is not None else G * G * T * T * (cols + 1)
        mat = (G * T * rows * cols if t.L is not None else G * T * cols) + G * G * rows * cols
        if method == "ghost" or (method == "auto" and ghost < mat):
            return _gram_ghost(t, G)
    return _gram_materialised(terms, G, n_rows)


def compact(B, *others):
    """Drop positions where every sample's output gradient is zero (they add nothing)."""
    keep = (B != 0).flatten(2).any(-1).any(0) if B.ndim > 2 else (B != 0).any(0)
    if int(keep.sum()) > 0.75 * keep.numel():  # copying would cost more than it saves
        return (B, *others)
    return (B[:, keep], *(o[:, keep] for o in others))
