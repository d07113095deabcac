"""A comparison's data by content: compare.json records the SHA-256 of each data file, the held-out
predictions carry a content id beside the positional query id, and a resume or an added seed on
data rewritten in place is refused naming the file. A folder made before these records resumes,
with a warning, and its old predictions (no content id) pair with the new ones on query_id."""

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from helpers.story_data import STORIES, write_stories

from gcpo_train.compare.data_identity import check_content_ids, content_id

pytest.importorskip("torch")
pytest.importorskip("peft")

OTHER = [*STORIES[:2], ("s2", "the house stood by the sea . a cat slept under the new tree .")]


def test_content_id_is_a_short_hash_of_question_and_passage():
    assert content_id("who ?", "a b") == hashlib.sha256(b"who ?\0a b").hexdigest()[:16]
    assert content_id("who ?", "a b") != content_id("who ? a", "b")  # the separator keeps them apart


def test_content_ids_pair_where_both_files_have_them():
    old = pd.DataFrame({"query_id": ["q/0", "q/1"], "score": [1.0, 2.0]})  # written before the column
    new = old.assign(content_id=["aa", "bb"])
    check_content_ids([(Path("old"), old), (Path("new"), new), (Path("again"), new)])
    with pytest.raises(ValueError, match=r"other scores query 'q/1' with content id cc, but new scores it with bb"):
        check_content_ids([(Path("new"), new), (Path("other"), new.assign(content_id=["aa", "cc"]))])


def _comparison(root: Path, seeds):
    from helpers.loop_setup import loop_config

    from gcpo_train.compare.run import Comparison
    from gcpo_train.config import TrainConfig

    kw = loop_config(root, "unused", data_path=str(root / "data"), split_from_single=False, eval_max_new_tokens=4)
    return Comparison(TrainConfig(**kw), root / "cmp", ["none"], seeds, eval_n=None)


@pytest.mark.slow
def test_data_rewritten_in_place_is_refused_and_an_older_folder_still_resumes(tmp_path):
    data = Path(write_stories(tmp_path / "data"))
    _comparison(tmp_path, [0]).run(progress=False)
    spec = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    for split in ("train", "test"):
        file = data / f"{split}.jsonl"
        assert spec["data"][split] == {"file": str(file), "sha256": hashlib.sha256(file.read_bytes()).hexdigest()}
    run_eval = tmp_path / "cmp" / "runs" / "none" / "seed_0" / "eval" / "step_000002.predictions.parquet"
    pred = pd.read_parquet(run_eval)
    assert pred["query_id"].tolist() == ["narrativeqa/test/2-0", "narrativeqa/test/2-1"]  # unchanged ids
    assert pred["content_id"].tolist() == [content_id(q, STORIES[2][1]) for q in ("who had a son ?", "where was it ?")]

    # the data rewritten in place: the same query ids, another passage. Before: seed 1 trained on it
    # and was reported paired with seed 0
    kept = (data / "test.jsonl").read_bytes()
    (data / "test.jsonl").unlink(), (data / "train.jsonl").unlink()
    data.rmdir()
    write_stories(data, stories=OTHER)
    with pytest.raises(ValueError, match=r"made on other data: its 'test' data .*test.jsonl has sha256"):
        _comparison(tmp_path, [1]).run(progress=False)
    assert not (tmp_path / "cmp" / "runs" / "none" / "seed_1").exists()

    # a folder whose compare.json predates the record: resumed with a warning, the record written;
    # the content ids still catch the rewritten data when the new seed's evaluations land
    spec.pop("data")
    (tmp_path / "cmp" / "compare.json").write_text(json.dumps(spec))
    with pytest.raises(
        ValueError, match=r"seed_1\.predictions\.parquet scores query 'narrativeqa/test/2-0' with content"
    ):
        with pytest.warns(UserWarning, match="records no data hash"):
            _comparison(tmp_path, [1]).run(progress=False)

    # the old data back (OTHER changed the test split only), and the old predictions without the
    # column (written by an older gcpo): the folder resumes and the new seed pairs with seed 0 on query_id
    (data / "test.jsonl").write_bytes(kept)
    for path in (tmp_path / "cmp").rglob("*.predictions.parquet"):
        if "seed_1" in str(path):
            path.unlink()
            path.with_name(path.name.replace(".predictions.parquet", ".json")).unlink(missing_ok=True)
        else:
            pd.read_parquet(path).drop(columns="content_id").to_parquet(path)
    import shutil

    shutil.rmtree(tmp_path / "cmp" / "runs" / "none" / "seed_1", ignore_errors=True)
    spec = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    spec.pop("data")
    (tmp_path / "cmp" / "compare.json").write_text(json.dumps(spec))
    with pytest.warns(UserWarning, match="records no data hash"):
        summary = _comparison(tmp_path, [1]).run(progress=False)
    assert "data" in json.loads((tmp_path / "cmp" / "compare.json").read_text())
    results = pd.read_parquet(tmp_path / "cmp" / "results.parquet")
    assert sorted(results.query("arm == 'none'")["seed"].unique()) == [0, 1] and summary["markdown"]
    assert list(results.columns) == ["arm", "seed", "step", "query_id", "score"]  # results.parquet as before
