"""Forward/backward hooks that collect each selected parameter's per-sample gradient terms
during one backward and reduce them to its G x G Gram contribution (``rules``).

The backward of sum_i log pi(y_i|q) hands each layer the output gradients B_i of every sample
separately (samples do not interact), and forward hooks keep the inputs A_i. A parameter's
contribution is computed when its last use has received its gradient, so at most one layer's
terms are held at a time. Uses are grouped by parameter identity, so a tied weight's uses are
combined before its Gram is taken.

Hand-written because Opacus / private-transformers compute per-sample gradient *norms*, the
diagonal of K, and refuse shared parameters; we need the whole of K and tied weights.
"""

from __future__ import annotations

from ..models import require
from .rules import Term, compact, module_kind, param_gram


class GramCapture:
    """Forward/backward hooks that turn each selected parameter's uses into its K contribution."""

    def __init__(self, model, selected, G, method="auto", *, on_param=None, keep_float64=False):
        torch = require("torch")
        self.method = method
        self.torch, self.G = torch, G
        # on_param(p, terms, vecs): called with a parameter's factored per-sample terms once its
        # last use has its gradient, instead of adding its Gram to K (gcpo_train's tracking)
        self.on_param = on_param
        self.keep_float64 = keep_float64  # float64 factors stay float64 (exactness tests)
        self.selected = {id(p): p for p in selected}
        self.K = torch.zeros(G, G, dtype=torch.float64)
        self.pending = {}  # id(param) -> outstanding uses
        self.terms, self.vecs = {}, {}
        self.handles = []
        self.sources = []
        self.active = True
        owners: dict = {}
        for mname, module in model.named_modules():
            own = [(n, p) for n, p in module.named_parameters(recurse=False) if id(p) in self.selected]
            if not own:
                continue
            kind = module_kind(module)
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
            B = self._float(B).reshape(G, -1, B.shape[-1])  # fp32 even for a bf16 model
            for pname, p in own:
                if kind == "linear" or kind == "conv1d":
                    A = self._float(x).reshape(G, -1, x.shape[-1])
                    if pname == "bias":
                        self.vecs.setdefault(id(p), []).append(B.sum(1))
                    else:
                        Bc, Ac = compact(B, A)
                        t = Term(R=Ac, L=Bc) if kind == "linear" else Term(R=Bc, L=Ac)
                        self.terms.setdefault(id(p), []).append(t)
                elif kind == "embedding":
                    ids = x.detach().reshape(G, -1)
                    if module.padding_idx is not None:  # no gradient reaches the padding row
                        B = B * (ids != module.padding_idx)[..., None].to(B.dtype)
                    Bc, idc = compact(B, ids)
                    self.terms.setdefault(id(p), []).append(Term(R=Bc, ids=idc))
            if kind == "norm":
                self._norm_vecs(module, own, x, B)
            for _, p in own:
                self._done(p)
        return None

    def _float(self, t):
        t = t.detach()
        return t if (self.keep_float64 and t.dtype == self.torch.float64) else t.float()

    def begin(self, G):
        """Start a new forward/backward over G samples (a micro-batch of a training step)."""
        self.G = G
        self.pending, self.terms, self.vecs = {}, {}, {}
        self.sources = []

    def _norm_vecs(self, module, own, x, B):
        """Per-sample gradients of a norm's small weight/bias: vmap of grad of <module(x_i), B_i>."""
        torch = self.torch
        func = torch.func
        params = {n: p.detach() for n, p in own}
        xb = x.detach().reshape(self.G, -1, x.shape[-1])
        Bb = B.reshape(xb.shape[0], xb.shape[1], -1)

        def inner(ps, xi, bi):
            out = func.functional_call(module, ps, (xi[None],))[0]
            if not (self.keep_float64 and out.dtype == torch.float64):
                out, bi = out.float(), bi.float()
            return (out * bi).sum()

        self.active = False
        try:
            with torch.enable_grad():
                grads = func.vmap(func.grad(inner), in_dims=(None, 0, 0))(params, xb, Bb)
        finally:
            self.active = True
        for n, p in own:
            self.vecs.setdefault(id(p), []).append(self._float(grads[n].reshape(self.G, -1)))

    def _done(self, p):
        self.pending[id(p)] -= 1
        if self.pending[id(p)] == 0:
            self._finalise(p)

    def _finalise(self, p):
        terms = self.terms.pop(id(p), [])
        vecs = self.vecs.pop(id(p), [])
        if (terms or vecs) and self.on_param is not None:
            self.on_param(p, terms, vecs)
        elif terms or vecs:
            self.K += param_gram(terms, vecs, self.G, p.shape[0], self.method).cpu()

    def flush(self):
        """Parameters whose outputs never received a gradient: their fired uses are complete."""
        for pid, n in list(self.pending.items()):
            if n > 0:
                self.pending[pid] = 0
                self._finalise(self.selected[pid])

    def remove(self):
        for h in self.handles:
            h.remove()
