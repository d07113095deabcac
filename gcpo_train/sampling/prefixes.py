"""The prefill's distinct rows: left-padded prompts that begin alike share their keys and values.

In a causal decoder the hidden state at position p of a prompt is a function of the prompt's
tokens up to p and their positions alone. Two prompts that begin with the same k real tokens (at
the same positions) therefore hold the same states at those k positions, and a prefill needs to
compute each distinct prefix once. Held-out questions on one passage share the whole
[template | passage] and differ in the question's few tokens, so a batch of them computes a
fraction of its rows (``FusedKernels(share_prefixes=True)``, ``bench/eval_prefill.py``).

``prefill_rows`` numbers the nodes of the batch's token trie (a node = one (token, position)
after a given parent): the rows to compute are one position per node, and every real position
reads its node's row. The code is ours: no library builds a prefix trie over token tensors.
"""

from __future__ import annotations

from gcpo_analysis.models import require


def prefill_rows(tokens, real, positions):
    """(rows, where) for prompts ``tokens`` (Q, n) whose real tokens are ``real`` (Q, n) (left
    padding: False before a row's first token) at ``positions`` (Q, n):

    * rows (R,): the flat indices (into Q·n, row-major) of the positions to compute, one per
      distinct (prefix, position) sequence, each the first position in row order that holds it;
    * where (Q·n,): for every position the index into ``rows`` of the row that holds its state
      (a padding position reads row 0: its state is never read, attention masks it).

    Padding positions are never rows: R is the number of real positions when no two prompts begin
    alike, the number of distinct (prefix, position) sequences otherwise.
    """
    torch = require("torch")
    if tokens.dim() != 2 or real.shape != tokens.shape or positions.shape != tokens.shape:
        raise ValueError(
            f"prefill_rows takes (prompts, positions) tensors of one shape: tokens {tuple(tokens.shape)}, "
            f"real {tuple(real.shape)}, positions {tuple(positions.shape)}"
        )
    Q, n = tokens.shape
    toks, mask, pos = tokens.tolist(), real.tolist(), positions.tolist()
    nodes: dict[tuple[int, int, int], int] = {}  # (parent node, token, position) -> node = index into rows
    rows: list[int] = []
    where = [0] * (Q * n)
    for i in range(Q):
        parent = -1
        for p in range(n):
            if not mask[i][p]:
                if parent != -1:  # padding after a real token: a right-padded row, whose states would differ
                    raise ValueError(f"prompt {i}: padding at position {p} after its first real token (left padding)")
                continue
            key = (parent, toks[i][p], pos[i][p])
            node = nodes.get(key)
            if node is None:
                node = nodes[key] = len(rows)
                rows.append(i * n + p)
            where[i * n + p] = node
            parent = node
    return torch.tensor(rows, dtype=torch.long), torch.tensor(where, dtype=torch.long)
