"""A checkpoint file that torch cannot read is refused saying what is wrong with it: bytes that
are no tensor file at all (a corrupt or truncated write, which the previous checkpoint replaces)
are not reported as a crafted pickle whose unpickling "could run code", nor the reverse."""

import pickle

import pytest

torch = pytest.importorskip("torch")

from gcpo_train.runfiles.checkpoint import UnreadableCheckpoint, safe_load  # noqa: E402

CORRUPT = "not a readable tensor file (corrupt or truncated"


def _saved(tmp_path) -> bytes:
    torch.save({"w": torch.zeros(64)}, tmp_path / "real.pt")
    return (tmp_path / "real.pt").read_bytes()


@pytest.mark.parametrize("damage", ["garbage bytes", "empty file", "first half of a torch.save", "plain pickle"])
def test_bytes_that_are_no_tensor_file_are_called_corrupt_not_code(tmp_path, damage):
    data = {
        "garbage bytes": b"garbage",
        "empty file": b"",
        "first half of a torch.save": _saved(tmp_path)[: len(_saved(tmp_path)) // 2],
        "plain pickle": pickle.dumps({"w": 1}, protocol=2),
    }[damage]
    bad = tmp_path / "trainable.pt"
    bad.write_bytes(data)
    with pytest.raises(UnreadableCheckpoint) as err:
        safe_load(bad)
    assert str(bad) in str(err.value) and CORRUPT in str(err.value)
    assert "could run code" not in str(err.value)


def test_a_pickle_of_other_objects_is_still_called_one_and_never_runs(tmp_path):
    from helpers.loop_setup import Exploit

    marker = tmp_path / "code-ran"
    bad = tmp_path / "trainable.pt"
    torch.save({"w": Exploit(marker)}, bad)
    with pytest.raises(UnreadableCheckpoint, match="trainable.pt: it holds objects other than tensors") as err:
        safe_load(bad)
    assert CORRUPT not in str(err.value) and not marker.exists()


def test_a_missing_file_is_not_called_corrupt(tmp_path):
    with pytest.raises(UnreadableCheckpoint, match="FileNotFoundError") as err:
        safe_load(tmp_path / "nope.pt")
    assert CORRUPT not in str(err.value)
