"""The exact gradient variance of every training group, from the training backward itself
(``track_gradvar``; docs/conventions.md, "Gradient variance during training").

With L the step's objective (``loss.grpo_loss`` summed over the step's micro-batches and
processes) written as a sum over rollouts, L = Σ_i L_i, rollout i's contribution is

    h_i = ∇_θ L_i   over the trainable parameters θ (LoRA adapters, or every weight),

    L_i = (1/N) · (1/|o_i|) Σ_t m_{i,t} [−min(ρ Ã_i, clip(ρ) Ã_i) + β·KL_{i,t}]   ("sequence")
    L_i = Σ_t m_{i,t} [...] / n_tokens                                 ("token", "dapo"),
    L_i = Σ_t m_{i,t} [...] / (N · max_new_tokens)                     ("dr_grpo"),

at the first of the μ updates (θ = θ_old, so ρ = 1), before gradient clipping; N and n_tokens
are the step-wide normalisers. Per group q of G rollouts, K_ij = h_i·h_j and

    V_train(q) = (1/G) Σ_i ‖h_i − h̄‖² = (1/G) tr K − (1/G²) 1ᵀK1,    grad_norm2_mean = (1/G) tr K.

K comes from ``gcpo_analysis.gradvar.hooks.GramCapture`` riding the training backward: its
hooks keep each trainable layer's input A and output gradient B per rollout, and each
parameter's per-rollout Gram is taken when its last use has its gradient (``rules.param_gram``).
A chunk whose rollouts share their prompt (``share_prompt``) runs it once, at batch 1, as
the untracked step does: the training backward is untouched, and each rollout's gradient on
the repeated keys/values and the first token's logits is back-propagated through the prompt
on its own (``GramCapture.prompt_backward``: G − 1 input-gradient passes over the prompt, the
last rollout's by subtraction), so the weights are those of the untracked run, bit for bit.
A group split over micro-batches: the factors of its rollouts in earlier micro-batches are
kept, per parameter, until the group is complete, and the cross blocks K_ij (i, j in different
micro-batches) are taken then. A group never spans processes (each process generates whole
groups), and the hooks see the gradient of ``loss · num_processes`` before DDP averages it,
which ``scale`` undoes, so N processes give one process's K.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from gcpo_analysis.gradvar.rules import Term, param_gram
from gcpo_analysis.models import require


def _subset(terms, vecs, idx):
    """The terms and vectors of the samples ``idx`` (a list of row positions); a factor with
    batch 1 is every sample's (a shared prompt's input) and stays as it is."""

    def take(t):
        return None if t is None else (t if t.shape[0] == 1 else t[idx])

    return [Term(R=take(t.R), L=take(t.L), ids=take(t.ids)) for t in terms], [v[idx] for v in vecs]


def _cat_padded(parts):
    """Concatenate (g, T, ...) tensors along samples, zero-padding T (a zero position adds nothing)."""
    torch = require("torch")
    T = max(p.shape[1] for p in parts)
    padded = [
        p if p.shape[1] == T else torch.cat([p, p.new_zeros((p.shape[0], T - p.shape[1], *p.shape[2:]))], 1)
        for p in parts
    ]
    return torch.cat(padded, 0)


def _signature(term):
    """What a term's factors look like: one-hot or dense L, and their widths."""
    return (term.ids is not None, None if term.L is None else term.L.shape[-1], term.R.shape[-1])


def _union(a_terms, a_vecs, b_terms, b_vecs):
    """Terms of the samples of a followed by those of b. A sample's gradient is the sum of its
    terms, so any pairing of a's and b's terms of one shape is exact; uses are paired by shape
    because their hook order can differ between a shared-prompt chunk and a one-row chunk."""
    torch = require("torch")
    if sorted(map(_signature, a_terms), key=str) != sorted(map(_signature, b_terms), key=str) or len(a_vecs) != len(
        b_vecs
    ):
        raise RuntimeError("a parameter's uses differ between micro-batches; cannot join its factors")

    def samples(terms, vecs):  # factors shared by every sample (batch 1) are spelled out
        n = max([f.shape[0] for t in terms for f in (t.R, t.L, t.ids) if f is not None] + [v.shape[0] for v in vecs])

        def full(f):
            return None if f is None else f.expand(n, *f.shape[1:])

        return [Term(R=full(t.R), L=full(t.L), ids=full(t.ids)) for t in terms], [full(v) for v in vecs]

    (a_terms, a_vecs), (b_terms, b_vecs) = samples(a_terms, a_vecs), samples(b_terms, b_vecs)
    rest = list(b_terms)
    terms = []
    for x in a_terms:
        y = rest.pop(next(i for i, t in enumerate(rest) if _signature(t) == _signature(x)))
        terms.append(
            Term(
                R=_cat_padded([x.R, y.R]),
                L=None if x.L is None else _cat_padded([x.L, y.L]),
                ids=None if x.ids is None else _cat_padded([x.ids, y.ids]),
            )
        )
    return terms, [torch.cat([x, y], 0) for x, y in zip(a_vecs, b_vecs)]


# Per-parameter Grams are float32 products (summed in float64): a group whose h_i are all
# (nearly) equal can come out slightly below 0 at this relative size, which is rounding
_ROUNDING = 1e-5


def _variance(K, k: int) -> float:
    """V_train = (1/G) tr K − (1/G²) 1ᵀK1 (``gradient_variance``'s formula with A = 1); a negative value
    within float32 rounding is 0; a larger one (K not PSD: a bug) warns and gives NaN rather
    than stopping a long run."""
    import warnings

    G = K.shape[0]
    first, second = float(np.trace(K)) / G, float(K.sum()) / G**2
    v = first - second
    if v >= 0:
        return v
    if v >= -_ROUNDING * max(abs(first), 1e-300):
        return 0.0
    warnings.warn(
        f"group {k}: V_train = {v:.3e} < 0 beyond float32 rounding (tr K / G = {first:.3e}); recorded as NaN",
        RuntimeWarning,
        stacklevel=2,
    )
    return float("nan")


class GradVarTracker:
    """K of every group of one update pass, from hooks on the trainable layers.

    ``rows`` are the flat batch rows (query-major, G per group). Use ``with tracker.chunk(rows):``
    around each micro-batch's forward and backward, then ``results()``; ``remove()`` the hooks.
    """

    def __init__(self, model, params, group_size: int, n_rows: int, *, scale: float = 1.0, method: str = "auto"):
        from gcpo_analysis.gradvar.hooks import GramCapture

        torch = require("torch")
        if n_rows % group_size:
            raise ValueError(f"{n_rows} rollouts are not whole groups of {group_size}")
        self.torch, self.G, self.method, self.scale = torch, group_size, method, float(scale)
        self.n_groups = n_rows // group_size
        self.K = torch.zeros(self.n_groups, group_size, group_size, dtype=torch.float64)
        self.seen = np.zeros(n_rows, dtype=bool)
        self.held: dict = {}  # (group, id(param)) -> [(positions in group, terms, vecs)] of earlier chunks
        self.rows: range | None = None
        self.seconds = 0.0  # time spent turning factors into Grams (inside the backward)
        self.prompt_seconds = 0.0  # the per-rollout backward passes through shared prompts
        self.capture = GramCapture(model, params, 0, method, on_param=self._on_param, keep_float64=True)

    @contextlib.contextmanager
    def chunk(self, rows: slice, shared_prompt: bool = False):
        """Track the forward and backward of the flat rows ``rows`` (one micro-batch).

        ``shared_prompt``: the rows continue one prompt run once; the forward must pass
        ``self.on_shared`` to ``logprobs.group_logprobs_and_entropy`` and the backward must keep
        the graph (``retain_graph=True``) for the per-rollout prompt passes at the chunk's end."""
        start, stop = rows.start or 0, rows.stop
        if self.seen[start:stop].any():
            raise RuntimeError(f"rows {start}..{stop - 1} were tracked twice in one update")
        self.rows = range(start, stop)
        self.chunk_K = self.torch.zeros(stop - start, stop - start, dtype=self.torch.float64)
        self.capture.begin(stop - start, shared_prompt=shared_prompt)
        try:
            yield
            if shared_prompt:
                gram0, t0 = self.seconds, time.perf_counter()
                self.capture.prompt_backward()
                # the passes themselves; their Gram work is counted in ``seconds``
                self.prompt_seconds += time.perf_counter() - t0 - (self.seconds - gram0)
        except BaseException:  # a failed forward/backward leaves no hook behind
            self.remove()
            raise
        t0 = time.perf_counter()
        self.capture.flush()
        for k in self._groups():  # the within-chunk blocks of each group
            lo, hi = max(k * self.G, start), min((k + 1) * self.G, stop)
            pos = list(range(lo - k * self.G, hi - k * self.G))
            self._add(k, pos, pos, self.chunk_K[lo - start : hi - start, lo - start : hi - start])
        self.seen[start:stop] = True
        for k in self._groups():
            if self.seen[k * self.G : (k + 1) * self.G].all():
                for key in [key for key in self.held if key[0] == k]:
                    del self.held[key]
        self.rows = None
        self.seconds += time.perf_counter() - t0

    def on_shared(self, shared, repeated) -> None:
        """``logprobs``' callback for a shared chunk (``GramCapture.on_shared``)."""
        self.capture.on_shared(shared, repeated)

    def _groups(self):
        return range(self.rows.start // self.G, (self.rows.stop - 1) // self.G + 1)

    def _on_param(self, p, terms, vecs):
        """A parameter's per-rollout factors of this chunk: add its Gram blocks to each group's K."""
        t0 = time.perf_counter()
        G, start = self.G, self.rows.start
        # one Gram over the whole chunk (its cross-group entries are not used): fewer, larger
        # products than one per group; its blocks go to the groups when the chunk ends
        self.chunk_K += param_gram(terms, vecs, len(self.rows), p.shape[0], self.method).cpu()
        for k in self._groups():
            lo, hi = max(k * G, start), min((k + 1) * G, self.rows.stop)
            if hi == (k + 1) * G and (k, id(p)) not in self.held:
                continue  # the whole group is in this chunk
            local = list(range(lo - start, hi - start))
            pos = list(range(lo - k * G, hi - k * G))
            sub = _subset(terms, vecs, local)
            for prev_pos, prev_terms, prev_vecs in self.held.get((k, id(p)), []):
                joined = _union(prev_terms, prev_vecs, *sub)
                Ku = param_gram(*joined, len(prev_pos) + len(local), p.shape[0], self.method).cpu()
                cross = Ku[: len(prev_pos), len(prev_pos) :]
                self._add(k, prev_pos, pos, cross)
                self._add(k, pos, prev_pos, cross.T)
            if hi < (k + 1) * G:  # more of the group comes in a later chunk: keep these factors
                self.held.setdefault((k, id(p)), []).append((pos, *sub))
        self.seconds += time.perf_counter() - t0

    def _add(self, k, rows, cols, block):
        torch = self.torch
        r, c = torch.tensor(rows)[:, None], torch.tensor(cols)[None, :]
        self.K[k][r, c] += block.to(self.K.dtype)

    def results(self) -> list[dict]:
        """Per group: grad_var (V_train), grad_norm2_mean ((1/G) Σ ‖h_i‖²)."""
        if not self.seen.all():
            missing = int(np.flatnonzero(~self.seen)[0])
            raise RuntimeError(f"row {missing} was never tracked: its group's K is incomplete")
        out = []
        for k, K in enumerate(self.K):
            K = (0.5 * (K + K.T)).numpy() / self.scale**2
            out.append({"grad_var": _variance(K, k), "grad_norm2_mean": float(np.trace(K)) / self.G})
        return out

    def remove(self) -> None:
        self.capture.remove()
        self.held.clear()


def study_variances(model, batch, rewards, group_size: int) -> list[dict]:
    """``track_gradvar: full``: per group, the study's V(q) (``gcpo study``; docs/conventions.md,
    "Gradient variance of a query"): g_i = ∇ log π(y_i|q) over all parameters (temperature 1,
    completion tokens), GRPO advantages A_i of the rewards, from ``group_gradient_gram``'s own
    forward and backward at θ_old (one extra pass per group). Returns grad_var_study and
    grad_norm2_study ((1/G) Σ‖g_i‖²) per group."""
    from gcpo_analysis.gradvar import gradient_variance, group_gradient_gram
    from gcpo_analysis.measures.advantages import grpo_advantages

    torch = require("torch")
    cm = torch.zeros_like(batch.attention_mask)
    cm[:, -batch.n_completion :] = batch.completion_mask
    out = []
    for k in range(len(rewards) // group_size):
        rows = slice(k * group_size, (k + 1) * group_size)
        # the step pads every prompt to the longest: drop the group's own (common) left padding, so
        # that group_gradient_gram sees one unpadded prompt and runs it once
        cols = batch.attention_mask[rows].bool().any(0)
        K = group_gradient_gram(
            model, batch.input_ids[rows][:, cols], batch.attention_mask[rows][:, cols], cm[rows][:, cols], params="all"
        )
        out.append(
            {
                "grad_var_study": gradient_variance(K, grpo_advantages(np.asarray(rewards)[rows])),
                "grad_norm2_study": float(np.mean(np.diag(K))),
            }
        )
    return out
