"""Exact per-query gradient variance from the G x G Gram matrix of per-rollout gradients.

docs/conventions.md ("Gradient variance of a query"); paper Appendix "Statistical analysis", "Target
Quantity: Sample-level Gradient Variance" (and Sec. 2.3, Var(A(Y) g(Y))):

    V(q) = (1/G) sum_i || A_i g_i - (1/G) sum_j A_j g_j ||^2,
    g_i  = grad_theta log pi_theta(y_i | q)   (summed over the completion's tokens),

with A_i the GRPO advantage of rollout i. V depends on the gradients only through the Gram
matrix K_ij = g_i . g_j, which we compute with ONE batched forward and ONE backward over the G
sequences -- never G copies of the gradient.

How (hand-written: Opacus / private-transformers compute per-sample gradient *norms*, the
diagonal of K, and refuse shared parameters; we need the whole of K and tied weights):
the backward of sum_i log pi(y_i|q) hands each layer the output gradients B_i of every sample
separately (samples do not interact), and forward hooks keep the inputs A_i. Every parameter's
per-sample gradient is then a sum, over the uses of that parameter, of factored terms
``L_i^T R_i`` (T positions contracted):

- Linear  W (p x d), y = x W^T + b:  g_i^W = B_i^T A_i          (L = B, R = A)
- Conv1D  W (d x p), y = x W + b:    g_i^W = A_i^T B_i          (L = A, R = B)
- Embedding E (V x d), ids:          g_i^E = onehot(ids_i)^T B_i (L = one-hot, never built)
- biases: g_i^b = sum_t B_i[t]; norm weights/biases (RMSNorm, LayerNorm): tiny, so their
  per-sample gradients come from ``torch.func.vmap(grad(...))`` of the module on its input.

For one use, <L_i^T R_i, L_j^T R_j> = sum_{s,t} (L_i L_j^T)_{st} (R_i R_j^T)_{st} (the "ghost"
form, cost ~ G^2 T^2 (p + d)); or the per-sample gradients are materialised, a chunk of rows
at a time, and their Gram taken (cost ~ G T p d + G^2 p d): whichever is cheaper per layer.
Uses are grouped by parameter identity, so a weight tied between the input embedding and the
lm_head (SmolLM2) gets its two pure terms and the cross terms: its per-sample gradient is
materialised as the sum of both uses before the Gram. Positions where every sample's output
gradient is zero (prompt positions at the lm_head, padding) are dropped first.

The module runs past ~400 lines because the per-layer rules and the naive reference they are
tested and benchmarked against belong together.
"""
from __future__ import annotations

import inspect

import numpy as np

from .models import require

_CHUNK_FLOATS = 1 << 25  # elements of one materialised per-sample-gradient chunk (128 MB fp32)


def gradient_variance(gram, advantages) -> float:
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


# --------------------------------------------------------------------------- inputs and loss
def _position_ids(attention_mask):
    """Position ids as HF ``generate`` builds them: count of attended tokens before, 1 on pads."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 1)


def _check_batch(input_ids, attention_mask, completion_mask):
    torch = require("torch")
    ids = torch.as_tensor(input_ids)
    am = torch.as_tensor(attention_mask) if attention_mask is not None else torch.ones_like(ids)
    cm = torch.as_tensor(completion_mask)
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be (G, T), got shape {tuple(ids.shape)}")
    for name, t in (("attention_mask", am), ("completion_mask", cm)):
        if tuple(t.shape) != tuple(ids.shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, input_ids has {tuple(ids.shape)}")
    am, cm = am.bool(), cm.bool()
    if cm[:, 0].any():
        raise ValueError("completion_mask[:, 0] is set: the first token has no prediction")
    if (cm & ~am).any():
        row = int(torch.nonzero(cm & ~am)[0, 0])
        raise ValueError(f"completion_mask marks padded positions (attention_mask == 0) in row {row}")
    empty = ~cm.any(1)
    if empty.any():
        raise ValueError(f"row {int(torch.nonzero(empty)[0, 0])} has an empty completion_mask")
    return ids.long(), am, cm


def sequence_logprobs(model, input_ids, attention_mask, completion_mask):
    """log pi(y_i | q) = sum_t completion_mask[i,t] * log softmax(logits[i,t-1])[input_ids[i,t]].

    One batched forward with explicit position ids (so left padding gives the same result as
    each sequence alone). Only the scored positions go through the log-softmax. Returns (G,).
    """
    torch = require("torch")
    ids, am, cm = _check_batch(input_ids, attention_mask, completion_mask)
    dev = next(model.parameters()).device
    ids, am, cm = ids.to(dev), am.to(dev), cm.to(dev)
    kwargs = {}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    if "logits_to_keep" in inspect.signature(type(base).forward).parameters:
        # only positions from the first scored one's predecessor on need logits (saves the
        # lm_head output and its gradient over the prompt)
        kwargs["logits_to_keep"] = ids.shape[1] - int(torch.nonzero(cm.any(0))[0, 0]) + 1
    logits = model(input_ids=ids, attention_mask=am.long(), position_ids=_position_ids(am),
                   use_cache=False, **kwargs).logits
    o = ids.shape[1] - logits.shape[1]  # logits[:, k] predicts token o + k + 1
    target = cm[:, o + 1:]
    rows = torch.nonzero(target)  # (N, 2): (sample, position - o - 1)
    scored = logits[:, :-1][target].float()
    lp = torch.log_softmax(scored, -1).gather(-1, ids[:, o + 1:][target][:, None])[:, 0]
    out = torch.zeros(ids.shape[0], dtype=lp.dtype, device=dev)
    return out.index_add(0, rows[:, 0], lp)


# --------------------------------------------------------------------------- parameter choice
def _select_params(model, params):
    """Selected parameters (deduplicated by identity, so a tied weight counts once)."""
    if isinstance(params, str):
        if params == "all":
            chosen = list(model.parameters())
        elif params == "lora":
            chosen = [p for n, p in model.named_parameters() if "lora_" in n]
            if not chosen:
                raise ValueError("params='lora' but the model has no parameter whose name contains 'lora_'")
        else:
            raise ValueError(f"params must be 'all', 'lora' or an iterable of parameters, got {params!r}")
    else:
        chosen = list(params)
        if not chosen:
            raise ValueError("params is an empty iterable")
    seen, out = set(), []
    for p in chosen:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def _module_kind(module):
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


# --------------------------------------------------------------------------- Gram rules
class _Term:
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
        flat = buf.reshape(G, -1)
        K += (flat @ flat.T).double()
    return K


def _param_gram(terms, vecs, G, n_rows, method="auto"):
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


def _compact(B, *others):
    """Drop positions where every sample's output gradient is zero (they add nothing)."""
    keep = (B != 0).flatten(2).any(-1).any(0) if B.ndim > 2 else (B != 0).any(0)
    if int(keep.sum()) > 0.75 * keep.numel():  # copying would cost more than it saves
        return (B, *others)
    return (B[:, keep], *(o[:, keep] for o in others))


class _Capture:
    """Forward/backward hooks that turn each selected parameter's uses into its K contribution."""

    def __init__(self, model, selected, G, method="auto"):
        torch = require("torch")
        self.method = method
        self.torch, self.G = torch, G
        self.selected = {id(p): p for p in selected}
        self.K = torch.zeros(G, G, dtype=torch.float64)
        self.pending = {}  # id(param) -> outstanding uses
        self.terms, self.vecs = {}, {}
        self.handles = []
        self.sources = []
        self.active = True
        owners = {}
        for mname, module in model.named_modules():
            own = [(n, p) for n, p in module.named_parameters(recurse=False) if id(p) in self.selected]
            if not own:
                continue
            kind = _module_kind(module)
            if kind is None:
                raise ValueError(
                    f"module {mname!r} ({type(module).__name__}) owns selected parameter(s) "
                    f"{[n for n, _ in own]} but has no per-sample gradient rule (supported: "
                    "Linear, Conv1D, Embedding, LayerNorm/RMSNorm); restrict params"
                )
            for _, p in own:
                owners.setdefault(id(p), []).append(mname)
            self.handles.append(module.register_forward_hook(self._forward_hook(mname, module, kind, own)))
        missing = [i for i in self.selected if i not in owners]
        if missing:
            raise ValueError(f"{len(missing)} selected parameter(s) are not owned by any module of the model")

    def _forward_hook(self, mname, module, kind, own):
        def hook(mod, args, output):
            if not self.active:  # the module re-run by _norm_vecs
                return
            if not args or not self.torch.is_tensor(args[0]) or not self.torch.is_tensor(output):
                raise ValueError(f"module {mname!r}: expected one tensor input and a tensor output")
            x = args[0]
            if output.shape[0] != self.G or x.shape[0] != self.G:
                raise ValueError(
                    f"module {mname!r}: batch dimension {output.shape[0]} != G={self.G}; its "
                    "output is shared across samples, so per-sample gradients are undefined here"
                )
            if not output.requires_grad:
                return
            for _, p in own:
                self.pending[id(p)] = self.pending.get(id(p), 0) + 1
            output.register_hook(lambda g: self._on_grad(mname, module, kind, own, x, g))
            if not x.requires_grad:  # a source of the graph: differentiate w.r.t. it
                self.sources.append(output)
        return hook

    def _on_grad(self, mname, module, kind, own, x, B):
        torch, G = self.torch, self.G
        with torch.no_grad():
            B = B.detach().float().reshape(G, -1, B.shape[-1])  # fp32 even for a bf16 model
            for pname, p in own:
                if kind == "linear" or kind == "conv1d":
                    A = x.detach().float().reshape(G, -1, x.shape[-1])
                    if pname == "bias":
                        self.vecs.setdefault(id(p), []).append(B.sum(1))
                    else:
                        Bc, Ac = _compact(B, A)
                        t = _Term(R=Ac, L=Bc) if kind == "linear" else _Term(R=Bc, L=Ac)
                        self.terms.setdefault(id(p), []).append(t)
                elif kind == "embedding":
                    ids = x.detach().reshape(G, -1)
                    if module.padding_idx is not None:  # no gradient reaches the padding row
                        B = B * (ids != module.padding_idx)[..., None].to(B.dtype)
                    Bc, idc = _compact(B, ids)
                    self.terms.setdefault(id(p), []).append(_Term(R=Bc, ids=idc))
            if kind == "norm":
                self._norm_vecs(module, own, x, B)
            for _, p in own:
                self._done(p)
        return None

    def _norm_vecs(self, module, own, x, B):
        """Per-sample gradients of a norm's small weight/bias: vmap of grad of <module(x_i), B_i>."""
        torch = self.torch
        func = torch.func
        params = {n: p.detach() for n, p in own}
        xb = x.detach().reshape(self.G, -1, x.shape[-1])
        Bb = B.reshape(xb.shape[0], xb.shape[1], -1)

        def inner(ps, xi, bi):
            return (func.functional_call(module, ps, (xi[None],))[0].float() * bi.float()).sum()

        self.active = False
        try:
            with torch.enable_grad():
                grads = func.vmap(func.grad(inner), in_dims=(None, 0, 0))(params, xb, Bb)
        finally:
            self.active = True
        for n, p in own:
            self.vecs.setdefault(id(p), []).append(grads[n].reshape(self.G, -1).float())

    def _done(self, p):
        self.pending[id(p)] -= 1
        if self.pending[id(p)] == 0:
            self._finalise(p)

    def _finalise(self, p):
        terms = self.terms.pop(id(p), [])
        vecs = self.vecs.pop(id(p), [])
        if terms or vecs:
            self.K += _param_gram(terms, vecs, self.G, p.shape[0], self.method).cpu()

    def flush(self):
        """Parameters whose outputs never received a gradient: their fired uses are complete."""
        for pid, n in list(self.pending.items()):
            if n > 0:
                self.pending[pid] = 0
                self._finalise(self.selected[pid])

    def remove(self):
        for h in self.handles:
            h.remove()


def group_gradient_gram(model, input_ids, attention_mask, completion_mask, params="all", *,
                        method: str = "auto") -> np.ndarray:
    """K_ij = g_i . g_j with g_i = grad_theta log pi(y_i | q), one forward + one backward.

    See the module docstring for the per-layer rules (docs/conventions.md, gradient variance). ``params``:
    "all" (every parameter of the model), "lora" (names containing "lora_") or an iterable of
    parameters. Left or right padding; completion_mask marks the scored tokens. ``method``:
    "auto" picks the cheaper of the ghost and materialised forms per weight, "ghost" or
    "materialise" force one (for single-use weights; tied ones are always materialised). Returns a
    G x G float64 array. Parameters' ``requires_grad`` flags are restored afterwards and no
    ``.grad`` is written.
    """
    torch = require("torch")
    if method not in ("auto", "ghost", "materialise"):
        raise ValueError(f"method must be 'auto', 'ghost' or 'materialise', got {method!r}")
    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:
        import warnings

        with warnings.catch_warnings():  # the pre-5.x name, deprecated where the new one exists
            warnings.simplefilter("ignore", FutureWarning)
            checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if checkpointing:
        raise ValueError("group_gradient_gram does not support gradient checkpointing (hooks would fire twice)")
    selected = _select_params(model, params)
    ids, am, cm = _check_batch(input_ids, attention_mask, completion_mask)
    G = ids.shape[0]
    flags = {id(p): p.requires_grad for p in model.parameters()}
    sel_ids = {id(p) for p in selected}
    cap = None
    try:
        for p in model.parameters():  # only selected weights need their gradients computed
            p.requires_grad_(id(p) in sel_ids)
        cap = _Capture(model, selected, G, method)
        with torch.enable_grad():
            loss = sequence_logprobs(model, ids, am, cm).sum()
            if not cap.sources:
                raise ValueError("no selected parameter takes part in the model's forward pass")
            # Differentiating w.r.t. the outputs of the source modules (those whose input
            # needs no gradient) runs the backward through every hooked output but never
            # forms the summed weight gradients dL/dW, which nobody needs here.
            torch.autograd.grad(loss, cap.sources, allow_unused=True)
            del loss
            cap.sources.clear()
        cap.flush()
        K = cap.K
    finally:
        if cap is not None:
            cap.remove()
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
    K = 0.5 * (K + K.T)
    return K.numpy()


# --------------------------------------------------------------------------- naive reference
def naive_group_gradients(model, input_ids, attention_mask, completion_mask, params="all"):
    """Reference: G separate backward passes, each sequence alone without its padding.

    Returns a (G, P) float32 CPU tensor of flattened gradients g_i (tied weights counted once,
    their gradient being the sum of both uses). Memory G * P floats: for tests and the bench.
    """
    torch = require("torch")
    selected = _select_params(model, params)
    ids, am, cm = _check_batch(input_ids, attention_mask, completion_mask)
    dev = next(model.parameters()).device
    P = sum(p.numel() for p in selected)
    out = torch.empty(ids.shape[0], P, dtype=torch.float32)
    flags = {id(p): p.requires_grad for p in model.parameters()}
    sel_ids = {id(p) for p in selected}
    try:
        for p in model.parameters():
            p.requires_grad_(id(p) in sel_ids)
        for i in range(ids.shape[0]):
            keep = am[i]
            seq = ids[i][keep][None].to(dev)
            cmi = cm[i][keep][None].to(dev)
            with torch.enable_grad():
                lp = sequence_logprobs(model, seq, torch.ones_like(seq), cmi).sum()
                grads = torch.autograd.grad(lp, selected, allow_unused=True)
            off = 0
            for p, g in zip(selected, grads):
                n = p.numel()
                out[i, off:off + n] = 0 if g is None else g.detach().reshape(-1).float().cpu()
                off += n
    finally:
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
    return out


def flat_gram(grads, chunk: int = 1 << 22) -> np.ndarray:
    """Gram of the rows of a (G, P) tensor, accumulated in float64 over column chunks."""
    torch = require("torch")
    G, P = grads.shape
    K = torch.zeros(G, G, dtype=torch.float64)
    for c0 in range(0, P, chunk):
        block = grads[:, c0:c0 + chunk].double()
        K += block @ block.T
    return K.numpy()


def naive_gram(model, input_ids, attention_mask, completion_mask, params="all") -> np.ndarray:
    """The reference Gram: ``flat_gram(naive_group_gradients(...))``."""
    return flat_gram(naive_group_gradients(model, input_ids, attention_mask, completion_mask, params))
