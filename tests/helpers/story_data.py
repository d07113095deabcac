"""A three-story NarrativeQA-shaped data folder (train.jsonl, test.jsonl) for tiny comparisons:
the no-passage control and the data-identity tests train and evaluate on it (no network)."""

import json
from pathlib import Path

STORIES = [
    ("s0", "the king had a son . the ship was in the city . the queen sang ."),
    ("s1", "a war began in the north . the father of the boy was a sailor ."),
    ("s2", "the house stood by the river . a dog slept under the old tree ."),
]


def write_stories(folder: Path, blank: bool = False, drop: str | None = None, stories=STORIES) -> str:
    """folder/train.jsonl (stories 0 and 1) and folder/test.jsonl (story 2), two questions each;
    ``blank``: every passage "(no passage)"; ``drop``: leave out the query of that id."""
    folder.mkdir()
    rows: dict[str, list] = {"train": [], "test": []}
    for i, (story, passage) in enumerate(stories):
        for j, (question, answer) in enumerate((("who had a son ?", "the king"), ("where was it ?", "the city"))):
            split = "test" if i == 2 else "train"
            qid = f"{i}-{j}"
            if qid != drop:
                text = "(no passage)" if blank else passage
                rows[split].append(dict(id=qid, question=question, passage=text, answer=answer, story=story))
    for split, items in rows.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    return str(folder)
