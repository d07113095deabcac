"""Judges (NLI on a tiny random model, lexical, math, embedding) and the MiniLM embedder."""

import warnings

import numpy as np
import pytest

from gcpo_analysis.measures.judges import (
    EmbeddingJudge,
    Judge,
    LexicalJudge,
    MathJudge,
    NLIJudge,
    make_judge,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PREMISES = ["the king is dead", "a man", "yes", "who was the father of the queen", "one two three"]
HYPOTHESES = ["he is dead", "a woman and a man who was the king of the city", "no", "the father", "three"]


def _tiny_nli(id2label, seed=0):
    from gcpo_analysis.tiny_models import tiny_tokenizer

    tok = tiny_tokenizer()  # pads on the left; the judge must still pad on the right
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        num_labels=len(id2label),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
        initializer_range=0.5,  # spread the random logits so probabilities differ from 1/3
    )
    return transformers.BertForSequenceClassification(cfg).eval(), tok


def _reference_probs(model, tok, index):
    out = []
    with torch.no_grad():
        for p, h in zip(PREMISES, HYPOTHESES):  # one pair at a time: no padding at all
            enc = tok([p], [h], return_tensors="pt")
            out.append(torch.softmax(model(input_ids=enc["input_ids"]).logits, -1)[0, index].item())
    return np.array(out)


@pytest.mark.parametrize(
    "id2label,index",
    [
        ({0: "contradiction", 1: "neutral", 2: "entailment"}, 2),
        ({0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}, 0),
    ],
)
def test_nli_judge_named_label_and_batching(id2label, index):
    model, tok = _tiny_nli(id2label)
    judge = NLIJudge((model, tok), batch_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a named label must not trigger the fallback warning
        got = judge.entailment(PREMISES, HYPOTHESES)
    np.testing.assert_allclose(got, _reference_probs(model, tok, index), atol=1e-5)
    assert got.std() > 1e-3
    d = judge.describe()
    assert d["entailment_index"] == index and d["entailment_index_source"] == "id2label"
    assert isinstance(judge, Judge) and judge.n_pairs == len(PREMISES)


def test_nli_judge_index_two_rule():
    model, tok = _tiny_nli({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, seed=1)
    judge = NLIJudge(model, tokenizer=tok)
    with pytest.warns(UserWarning, match="index 2"):
        got = judge.entailment(PREMISES, HYPOTHESES)
    np.testing.assert_allclose(got, _reference_probs(model, tok, 2), atol=1e-5)
    assert judge.describe()["entailment_index_source"] == "mnli-default-2"
    two, tok2 = _tiny_nli({0: "yes", 1: "no"})
    with pytest.raises(ValueError, match="none named 'entailment'"):
        NLIJudge((two, tok2)).entailment(["a"], ["b"])
    with pytest.raises(ValueError, match="tokenizer"):
        NLIJudge(two)


def test_make_judge_resolution():
    assert isinstance(make_judge("lexical"), LexicalJudge)
    assert isinstance(make_judge("math"), MathJudge)
    assert isinstance(make_judge("embedding"), EmbeddingJudge)
    nli = make_judge("nli")
    assert isinstance(nli, NLIJudge) and nli.model_name == "roberta-large-mnli"  # lazy: nothing loaded
    assert make_judge("nli:my-local-nli").model_name == "my-local-nli"
    assert make_judge("microsoft/deberta-large-mnli").model_name == "microsoft/deberta-large-mnli"
    assert make_judge("roberta-large-mnli").model_name == "roberta-large-mnli"
    lex = LexicalJudge()
    assert make_judge(lex) is lex
    with pytest.raises(ValueError, match="embedding, lexical, math"):
        make_judge("lexicon")
    with pytest.raises(ValueError, match="not a judge"):
        make_judge(3)


def test_lexical_judge_squad_f1():
    j = LexicalJudge()
    p = j.entailment(
        ["The cat sat.", "cat sat on mat", "An apple!", "Paris", ""],
        ["cat sat on mat", "The cat sat.", "apple", "London", ""],
    )
    # tokens {cat, sat} vs {cat, sat, on, mat}: F1 = 2*2/(2+4); articles and punctuation dropped
    np.testing.assert_allclose(p, [2 / 3, 2 / 3, 1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="2 premises but 1"):
        j.entailment(["a", "b"], ["a"])


def test_math_judge():
    p = MathJudge().entailment(["\\boxed{3}", "3", "$12$", "x+1", "1/2"], ["3", "4", "12.0", "x + 1", "0.5"])
    np.testing.assert_array_equal(p, [1.0, 0.0, 1.0, 1.0, 1.0])


# --------------------------------------------------------------------------- MiniLM
@pytest.fixture(scope="module")
def embedder():
    pytest.importorskip("sentence_transformers")
    from gcpo_analysis.measures.embed import Embedder

    try:
        e = Embedder()
        e.encode(["warm up"])
    except FileNotFoundError as err:  # the offline model package is missing
        pytest.skip(str(err))
    return e


def test_minilm_embeddings(embedder):
    texts = ["He was killed by his brother.", "His brother killed him.", "The ship sailed to France."]
    E = embedder.encode(texts)
    assert E.shape == (3, 384) and E.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    assert E[0] @ E[1] > E[0] @ E[2] + 0.2  # paraphrase closer than unrelated
    empty = embedder.encode([""])
    assert np.linalg.norm(empty) == pytest.approx(1.0, abs=1e-5)


def test_dedup_and_groups(embedder):
    before = embedder.n_encoded
    E = embedder.encode(["Paris", "London", "Paris", "Paris"])
    assert embedder.n_encoded - before == 2  # the repeated text is embedded once
    np.testing.assert_array_equal(E[0], E[2])
    before = embedder.n_encoded
    groups = embedder.encode_groups([["Paris", "Rome"], [], ["Rome", "the city of Paris", "Paris"]])
    assert [g.shape[0] for g in groups] == [2, 0, 3] and embedder.n_encoded - before == 3
    np.testing.assert_allclose(groups[2][2], E[0], atol=1e-6)
    np.testing.assert_allclose(groups[0][1], groups[2][0], atol=1e-6)
    with pytest.raises(ValueError, match="text 1"):
        embedder.encode(["ok", None])


def test_embedding_judge_threshold(embedder):
    j = EmbeddingJudge(embedder)
    p = j.entailment(
        ["Paris", "1865", "the ship sank", "Paris"], ["the city of Paris", "in 1865", "the war ended", "London"]
    )
    assert (p[:2] >= 0.35).all() and (p[2:] < 0.35).all()
    before = embedder.n_encoded
    sym = j.entailment(["the city of Paris", "in 1865"], ["Paris", "1865"])
    np.testing.assert_allclose(sym, p[:2], atol=1e-6)
    assert embedder.n_encoded == before  # every text was memoised by the judge's first call
    assert j.describe()["low"] == 0.6


class FakeSentenceModel:
    """Stands in for a SentenceTransformer: a fixed vector per text, zero for "ZERO"."""

    def __init__(self):
        self.seen = []

    def encode(self, texts, **kwargs):
        self.seen.extend(texts)
        rng = [np.random.default_rng(sum(map(ord, t)) + len(t)) for t in texts]
        return np.stack([np.zeros(8) if t == "ZERO" else r.normal(size=8) for t, r in zip(texts, rng)])


def test_embedder_wraps_objects_and_refuses_zero_vectors():
    from gcpo_analysis.measures.embed import Embedder, make_embedder

    fake = FakeSentenceModel()
    emb = make_embedder(fake)
    assert isinstance(emb, Embedder) and make_embedder(emb) is emb
    E = emb.encode(["b", "a", "b"])
    assert fake.seen == ["a", "b"] and emb.n_encoded == 2 and emb.n_requested == 3
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, rtol=1e-6)
    raw = Embedder(FakeSentenceModel(), normalize=False, dedup=False).encode(["b", "a", "b"])
    np.testing.assert_allclose(E, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-6)
    with pytest.raises(ValueError, match="text 2"):
        emb.encode(["a", "b", "ZERO"])
    with pytest.raises(ValueError, match="cannot make an embedder"):
        make_embedder(3.5)


def test_embedding_judge_memo_is_bounded():
    fake = FakeSentenceModel()
    j = EmbeddingJudge(fake, memo_size=2)
    j.entailment(["a", "b"], ["c", "a"])
    assert fake.seen == ["a", "b", "c"] and len(j._memo) == 2
    p = j.entailment(["x"], ["x"])
    assert p[0] == pytest.approx(1.0)  # cos = 1 maps to 1


def test_the_math_judge_clusters_final_answers_while_full_completions_are_embedded(hash_embedder):
    import pandas as pd

    from gcpo_analysis.measures import score_groups
    from gcpo_analysis.measures.prepare import prepare_groups

    completions = [
        "3 + 6 = 9. The answer is \\boxed{9}.",
        "Nine apples in all, so \\boxed{9}",
        "7 + 2 = 10. The answer is \\boxed{10}.",
        "I think it is \\boxed{9.0}",
    ]
    rollouts = pd.DataFrame(
        {
            "query_id": 0,
            "rollout_id": range(4),
            "completion": completions,
            "answer": ["9", "9", "10", "9.0"],
            "reward": [2.0, 2.0, 0.0, 2.0],
        }
    )
    groups = score_groups(
        rollouts, ["se", "bot", "cd"], judge="math", embedder=hash_embedder, use_full_completion=True, progress=False
    )
    assert groups.loc[0, "n_clusters"] == 2  # {9, 9, 9.0} and {10}; derivations alone: 4 singletons
    assert np.isclose(groups.loc[0, "se"], -(0.75 * np.log(0.75) + 0.25 * np.log(0.25)))
    assert groups.attrs["gcpo"]["judge"]["clusters"] == "extracted answers"
    # the embeddings (CD) are still those of the full completions, not of the answers
    by_answer = score_groups(rollouts, ["cd"], embedder=hash_embedder, progress=False)
    assert groups.loc[0, "cd"] != by_answer.loc[0, "cd"]
    with pytest.raises(ValueError, match="compares final answers: pass answers="):
        prepare_groups([completions], [np.zeros(4)], {"clusters"}, judge="math")
