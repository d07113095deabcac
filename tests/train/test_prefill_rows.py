"""``sampling.prefixes.prefill_rows``: the prefill's distinct (prefix, position) rows of a
left-padded batch, against a brute force that keys every real position by its whole prefix."""

import pytest

torch = pytest.importorskip("torch")

from gcpo_analysis.tokens import position_ids  # noqa: E402
from gcpo_train.sampling.prefixes import prefill_rows  # noqa: E402


def _left_padded(prompts: list[list[int]]):
    n = max(map(len, prompts))
    tokens = torch.tensor([[0] * (n - len(p)) + p for p in prompts])
    real = torch.tensor([[False] * (n - len(p)) + [True] * len(p) for p in prompts])
    return tokens, real, position_ids(real.long())


def _brute_force(tokens, real, positions):
    """Each real position keyed by the tuple of its prompt's real (token, position) pairs up to it."""
    Q, n = tokens.shape
    first: dict[tuple, int] = {}
    key_of = {}
    for i in range(Q):
        for p in range(n):
            if real[i, p]:
                key = tuple((int(tokens[i, q]), int(positions[i, q])) for q in range(p + 1) if real[i, q])
                first.setdefault(key, i * n + p)
                key_of[i * n + p] = key
    rows = sorted(first.values())
    index = {r: k for k, r in enumerate(rows)}
    return rows, {flat: index[first[key]] for flat, key in key_of.items()}


@pytest.mark.parametrize("seed", range(6))
def test_rows_and_where_are_the_brute_forces(seed):
    """Random prompts from a 3-token vocabulary (many shared prefixes), some repeated, some a
    prefix of another, left-padded to the longest."""
    gen = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(1, 4, (int(torch.randint(1, 9, (1,), generator=gen)),), generator=gen).tolist() for _ in range(7)
    ]
    prompts += [prompts[0], prompts[1][:-1] or [1]]
    tokens, real, positions = _left_padded(prompts)
    rows, where = prefill_rows(tokens, real, positions)
    want_rows, want_where = _brute_force(tokens, real, positions)
    assert rows.tolist() == want_rows
    for flat, k in want_where.items():
        assert int(where[flat]) == k
    # every real position reads a row holding its own token at its own position
    flat_tokens, flat_pos = tokens.reshape(-1), positions.reshape(-1)
    for flat in want_where:
        src = int(rows[where[flat]])
        assert flat_tokens[src] == flat_tokens[flat] and flat_pos[src] == flat_pos[flat]


def test_edge_cases():
    # one prompt, nothing to share: every real position is a row
    tokens, real, positions = _left_padded([[5, 6, 7]])
    rows, where = prefill_rows(tokens, real, positions)
    assert rows.tolist() == [0, 1, 2] and where.tolist() == [0, 1, 2]
    # the same prompt three times: one prompt's rows
    tokens, real, positions = _left_padded([[5, 6, 7]] * 3)
    rows, where = prefill_rows(tokens, real, positions)
    assert rows.tolist() == [0, 1, 2] and where.tolist() == [0, 1, 2] * 3
    # all prompts distinct from their first token: nothing shared (padding reads row 0)
    tokens, real, positions = _left_padded([[1, 2], [3, 4, 5]])
    rows, where = prefill_rows(tokens, real, positions)
    assert rows.tolist() == [1, 2, 3, 4, 5] and where.tolist() == [0, 0, 1, 2, 3, 4]
    # the same tokens at other positions are not the same states
    tokens = torch.tensor([[1, 2], [1, 2]])
    rows, where = prefill_rows(tokens, torch.ones(2, 2, dtype=torch.bool), torch.tensor([[0, 1], [1, 2]]))
    assert len(rows) == 4
    # an empty prefill (one-token prompts)
    rows, where = prefill_rows(
        torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.bool), torch.zeros(2, 0)
    )
    assert rows.numel() == 0 and where.numel() == 0


def test_right_padding_and_mismatched_shapes_are_refused():
    tokens = torch.tensor([[1, 2, 0]])
    with pytest.raises(ValueError, match="prompt 0: padding at position 2 after its first real token"):
        prefill_rows(tokens, torch.tensor([[True, True, False]]), torch.tensor([[0, 1, 2]]))
    with pytest.raises(ValueError, match="one shape: tokens"):
        prefill_rows(tokens, torch.ones(1, 2, dtype=torch.bool), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="one shape: tokens"):
        prefill_rows(tokens[0], torch.ones(3, dtype=torch.bool), torch.zeros(3))
