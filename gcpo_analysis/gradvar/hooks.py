"""Forward/backward hooks that collect each selected parameter's per-sample gradient terms
during one backward and reduce them to its G x G Gram contribution (``rules``).

The backward of sum_i log pi(y_i|q) hands each layer the output gradients B_i of every sample
separately (samples do not interact), and forward hooks keep the inputs A_i. A parameter's
contribution is computed when its last use has received its gradient, so at most one layer's
terms are held at a time. Uses are grouped by parameter identity, so a tied weight's uses are
combined before its Gram is taken.

A shared prompt (``begin(G, shared_prompt=True)``): the G samples continue one prompt that ran
once, at batch 1, so a prompt layer's output gradient in the backward is the *sum* of the
samples' B_i. Those layers' uses are kept aside (``prompt_uses``); ``prompt_backward`` then
back-propagates the samples' own cotangents on the shared tensors (the repeated keys/values,
the first completion token's logits) through the prompt, one autograd.grad per sample but the
last, whose B is the summed gradient minus the others' (the backward is linear in its
cotangent), and hands each use its stacked (G, ...) B with its one input, a factor shared by
every sample (``rules.Term``): the per-sample terms a forward of G prompt copies would give, at
one prompt forward. The samples must read the prompt only through ``shared`` (a transformers
cache's keys/values and the last logits, as ``gcpo_train.model.logprobs`` runs it): a path that
bypassed them would land, unseen, on the last sample.

Hand-written because Opacus / private-transformers compute per-sample gradient *norms*, the
diagonal of K, and refuse shared parameters; we need the whole of K and tied weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..models import require
from .rules import Term, compact, module_kind, param_gram


@dataclass
class _PromptUse:
    """A selected layer's use in a shared prompt's forward (batch 1) and its output gradients."""

    args: tuple  # (module name, module, kind, own parameters, input x)
    summed: Any = None  # B of the training backward: the sum over the samples
    own: list = field(default_factory=list)  # B of each sample's prompt pass but the last


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
        self.prompt_uses: list | None = None  # shared-prompt uses of this pass (``begin``)
        self.prompt_sources: list = []
        self.prompt_phase: int | None = None  # the sample whose prompt backward runs, if any
        self.shared_outputs: list = []
        self.shared_grads: list = []
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
            if self.prompt_uses is not None and output.shape[0] == 1 and x.shape[0] == 1 and self.G > 1:
                self._prompt_use(mname, module, kind, own, x, output)
                return
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

    def _prompt_use(self, mname, module, kind, own, x, output):
        """A use in the shared prompt's forward: its B per sample comes from ``prompt_backward``."""
        if not output.requires_grad:
            return
        assert self.prompt_uses is not None  # only called in a shared-prompt pass
        use = _PromptUse((mname, module, kind, own, x))
        self.prompt_uses.append(use)
        for _, p in own:
            self.pending[id(p)] = self.pending.get(id(p), 0) + 1
        output.register_hook(lambda g: self._on_prompt_grad(use, g))
        if not x.requires_grad:
            self.prompt_sources.append(output)

    def _on_prompt_grad(self, use: _PromptUse, B: Any) -> None:
        B = self._float(B)  # fp32 before the subtraction in prompt_backward, even for a bf16 model
        if self.prompt_phase is None:  # the training backward: the sum over the samples
            use.summed = B
        else:
            use.own.append(B)

    def on_shared(self, shared: list, repeated: list) -> None:
        """``prompt_cache``'s callback: the prompt's outputs (batch 1) that the samples read, before
        and after their repeat; keeps each sample's gradient on them from the backward."""
        for s, r in zip(shared, repeated):
            if not r.requires_grad:  # nothing selected upstream (a LoRA-free layer's keys)
                continue
            k = len(self.shared_outputs)
            self.shared_outputs.append(s)
            self.shared_grads.append(None)
            r.register_hook(lambda g, k=k: self.shared_grads.__setitem__(k, g.detach()))

    def prompt_backward(self) -> None:
        """The per-sample terms of the shared prompt's uses (module docstring), after a backward
        that kept its graph (``retain_graph=True``) and gave each sample's gradient on the
        outputs ``on_shared`` was handed."""
        torch, G = self.torch, self.G
        shared, per_sample = self.shared_outputs, self.shared_grads
        uses = [u for u in (self.prompt_uses or []) if u.summed is not None]
        pairs = [(s, g) for s, g in zip(shared, per_sample) if g is not None]
        if uses and self.prompt_sources and pairs:
            outs = [s for s, _ in pairs]
            try:
                for i in range(G - 1):
                    self.prompt_phase = i
                    torch.autograd.grad(
                        outs,
                        self.prompt_sources,
                        grad_outputs=[g[i : i + 1] for _, g in pairs],
                        retain_graph=True,
                        allow_unused=True,
                    )
            finally:
                self.prompt_phase = None
        for use in uses:
            if len(use.own) != G - 1:
                raise RuntimeError(
                    f"module {use.args[0]!r}: {len(use.own)} of {G - 1} per-sample prompt gradients arrived"
                )
            last = use.summed - sum(use.own) if use.own else use.summed
            B = torch.cat([*use.own, last], 0)
            mname, module, kind, own, x = use.args
            self._on_grad(mname, module, kind, own, x, B, shared_input=True)
        self.prompt_uses, self.prompt_sources = [], []
        self.shared_outputs, self.shared_grads = [], []

    def _on_grad(
        self, mname: str, module: Any, kind: str, own: list, x: Any, B: Any, shared_input: bool = False
    ) -> None:
        """A use's per-sample terms from its input x and output gradient B. ``shared_input``:
        x has batch 1 and is every sample's (a shared prompt), kept so (``rules.Term``); such a
        prompt's positions all carry gradient, so nothing is compacted."""
        torch, G = self.torch, self.G
        n = 1 if shared_input else G

        def keep(B, *others):
            return (B, *others) if shared_input else compact(B, *others)

        with torch.no_grad():
            B = self._float(B).reshape(G, -1, B.shape[-1])  # fp32 even for a bf16 model
            for pname, p in own:
                if kind == "linear" or kind == "conv1d":
                    A = self._float(x).reshape(n, -1, x.shape[-1])
                    if pname == "bias":
                        self.vecs.setdefault(id(p), []).append(B.sum(1))
                    else:
                        Bc, Ac = keep(B, A)
                        t = Term(R=Ac, L=Bc) if kind == "linear" else Term(R=Bc, L=Ac)
                        self.terms.setdefault(id(p), []).append(t)
                elif kind == "embedding":
                    ids = x.detach().reshape(n, -1)
                    if module.padding_idx is not None:  # no gradient reaches the padding row
                        B = B * (ids != module.padding_idx)[..., None].to(B.dtype)
                    Bc, idc = keep(B, ids)
                    self.terms.setdefault(id(p), []).append(Term(R=Bc, ids=idc))
            if kind == "norm":
                self._norm_vecs(module, own, x.expand(G, *x.shape[1:]) if shared_input else x, B)
            for _, p in own:
                self._done(p)
        return None

    def _float(self, t):
        t = t.detach()
        return t if (self.keep_float64 and t.dtype == self.torch.float64) else t.float()

    def begin(self, G: int, shared_prompt: bool = False) -> None:
        """Start a new forward/backward over G samples (a micro-batch of a training step);
        ``shared_prompt``: they continue one prompt run at batch 1 (``prompt_backward``)."""
        self.G = G
        self.pending, self.terms, self.vecs = {}, {}, {}
        self.sources = []
        self.prompt_uses, self.prompt_sources = ([] if shared_prompt else None), []
        self.shared_outputs = []  # the prompt's outputs the samples read (``on_shared``) ...
        self.shared_grads = []  # ... and each sample's gradient on them

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
