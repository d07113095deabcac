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

A factor with batch 1 is shared by every sample: the input A of a layer in a prompt that ran
once for G samples (``hooks.GramCapture.prompt_backward``), or its token ids.

K sums, over pairs of uses (u, v), <g_i^u, g_j^v> = sum_{s,t} (L_i^u L_j^v^T)_{st}
(R_i^u R_j^v^T)_{st} (the "ghost" form, ``_gram_ghost``): one side's position Gram X is formed
and contracted with the other side's factors. Where that side is shared by every sample (X is
one S x T matrix, as a prompt's A A^T), K_ij = <F_i, X F'_j> costs G S T width instead of
G^2 S T; where it is shared on one side (a completion against a prompt) the same. Or the
per-sample gradients are materialised, a chunk of rows at a time, and their Gram taken (cost
~ G T p d + G^2 p d). ``param_gram`` picks the cheaper per parameter. A tied weight (input
embedding and lm_head, SmolLM2) sums its uses' pure and cross terms either way. Positions where
every sample's output gradient is zero (prompt positions at the lm_head, padding) are dropped
first.
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
    A factor with batch 1 is the same for every sample (a shared prompt's input or ids).
    """

    def __init__(self, R, L=None, ids=None):
        self.R, self.L, self.ids = R, L, ids

    @property
    def left(self):
        return self.ids if self.ids is not None else self.L


def _expand(t, G):
    return t if t.shape[0] == G else t.expand(G, *t.shape[1:])


def _cat_ids(terms):
    return require("torch").cat([t.ids.reshape(-1) for t in terms])


def _position_gram(u, v, side, i0=0, i1=None):
    """X (gu, gv, S, T): the Gram over ``side``'s width between the positions of uses u and v,
    for u's samples i0:i1; gu = 1 where u's factor is shared by every sample, gv likewise."""
    torch = require("torch")
    a, b = (u.left, v.left) if side == "L" else (u.R, v.R)
    a = a if a.shape[0] == 1 else a[i0:i1]
    if side == "L" and u.ids is not None and v.ids is not None:
        return (a[:, None, :, None] == b[None, :, None, :]).to(u.R.dtype)
    if side == "L" and u.ids is not None:  # X[i, j, s, t] = L^v_j[t, ids^u_i[s]]
        return b.transpose(1, 2)[:, a].permute(1, 0, 2, 3)
    if side == "L" and v.ids is not None:  # X[i, j, s, t] = L^u_i[s, ids^v_j[t]]
        return a.transpose(1, 2)[:, b].permute(0, 1, 3, 2)
    return torch.einsum("isp,jtp->ijst", a, b)


def _pair_plan(u, v, G):
    """(side whose position Gram is formed, that side's sharing (gu, gv), multiply-adds)."""
    S, T = u.R.shape[1], v.R.shape[1]
    one_hot = u.ids is not None or v.ids is not None
    best = None
    for side in ["L"] if one_hot else ["L", "R"]:  # a one-hot side is never densified
        fu, fv = (u.left, v.left) if side == "L" else (u.R, v.R)
        gu, gv = fu.shape[0], fv.shape[0]
        width_x = 1 if one_hot else fu.shape[-1]
        width_p = (u.R if side == "L" else u.L).shape[-1]
        cost = gu * gv * S * T * width_x
        if G > 1 and (gu == 1 or gv == 1):
            cost += G * S * T * width_p + G * G * max(S, T) * width_p
        else:
            cost += G * G * S * T * width_p
        if best is None or cost < best[2]:
            best = (side, (gu, gv), cost)
    assert best is not None
    return best


def _gram_pair(u, v, G):
    """sum_{s,t} (L_i^u L_j^v^T)_{st} (R_i^u R_j^v^T)_{st} for all i, j (G x G)."""
    torch = require("torch")
    side, (gu, gv), _ = _pair_plan(u, v, G)
    Fu, Fv = (u.R, v.R) if side == "L" else (u.L, v.L)  # the factors X is contracted with
    if G > 1 and gu == 1:
        X = _position_gram(u, v, side)
        Fu, Fv = _expand(Fu, G), _expand(Fv, G)
        if gv == 1:  # one X for every pair: K_ij = <F^u_i, X F^v_j>
            return torch.einsum("isc,jsc->ij", Fu, torch.einsum("st,jtc->jsc", X[0, 0], Fv))
        return torch.einsum("isc,jsc->ij", Fu, torch.einsum("jst,jtc->jsc", X[0], Fv))  # X_j only
    if G > 1 and gv == 1:  # X_i only
        X = _position_gram(u, v, side)
        return torch.einsum("itc,jtc->ij", torch.einsum("ist,isc->itc", X[:, 0], _expand(Fu, G)), _expand(Fv, G))
    S, T = u.R.shape[1], v.R.shape[1]
    K = torch.zeros(G, G, dtype=u.R.dtype, device=u.R.device)
    step = max(1, _CHUNK_FLOATS // max(1, G * S * T))  # bounds the (c, G, S, T) products
    for i0 in range(0, G, step):
        i1 = min(G, i0 + step)
        K[i0:i1] += (_position_gram(u, v, "L", i0, i1) * _position_gram(u, v, "R", i0, i1)).sum((2, 3))
    return K


def _gram_ghost(terms, G):
    """K = sum over pairs of uses of ``_gram_pair`` (each cross pair once, plus its transpose)."""
    torch = require("torch")
    K = torch.zeros(G, G, dtype=torch.float64, device=terms[0].R.device)
    for a, u in enumerate(terms):
        for v in terms[a:]:
            Kuv = _gram_pair(u, v, G).double()
            K += Kuv if v is u else Kuv + Kuv.T
    return K


def _ghost_cost(terms, G):
    return sum(_pair_plan(u, v, G)[2] for a, u in enumerate(terms) for v in terms[a:])


def _materialised_cost(terms, G, n_rows):
    cols = terms[0].R.shape[-1]
    if all(t.ids is not None for t in terms):
        n_rows = int(require("torch").unique(_cat_ids(terms)).numel())
    return sum(G * t.R.shape[1] * (1 if t.L is None else n_rows) * cols for t in terms) + G * G * n_rows * cols


def _gram_materialised(terms, G, n_rows):
    """Gram of per-sample gradients sum_u L_u,i^T R_u,i built a chunk of rows at a time."""
    torch = require("torch")
    terms = [
        Term(
            R=_expand(t.R, G),
            L=None if t.L is None else _expand(t.L, G),
            ids=None if t.ids is None else _expand(t.ids, G),
        )
        for t in terms
    ]
    R0 = terms[0].R
    cols = R0.shape[-1]
    dev = R0.device
    # only rows of tokens that occur are non-zero
    rows = torch.unique(_cat_ids(terms)) if all(t.ids is not None for t in terms) else None
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
    """K contribution of one parameter from its factored terms or its per-sample vectors
    (``method``: "auto" takes the cheaper of "ghost" and "materialise" by multiply-adds)."""
    torch = require("torch")
    if terms and vecs:
        raise ValueError("a parameter used both as a factored weight and as a small vector is not supported")
    if vecs:
        v = torch.stack([_expand(x, G) for x in vecs]).sum(0).reshape(G, -1)
        return (v @ v.T).double()
    if method == "ghost" or (method == "auto" and _ghost_cost(terms, G) < _materialised_cost(terms, G, n_rows)):
        return _gram_ghost(terms, G)
    return _gram_materialised(terms, G, n_rows)


def compact(B, *others):
    """Drop positions where every sample's output gradient is zero (they add nothing)."""
    keep = (B != 0).flatten(2).any(-1).any(0) if B.ndim > 2 else (B != 0).any(0)
    if int(keep.sum()) > 0.75 * keep.numel():  # copying would cost more than it saves
        return (B, *others)
    return (B[:, keep], *(o[:, keep] for o in others))
