"""collect_rollouts on a tiny llama: schema, gradient variance, resume after a crash."""

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gcpo_analysis.frames import validate_rollouts  # noqa: E402
from gcpo_analysis.gradvar import gradient_variance, naive_gram  # noqa: E402
from gcpo_analysis.measures.advantages import grpo_advantages  # noqa: E402
from gcpo_analysis.study.collect import collect_rollouts  # noqa: E402
from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer  # noqa: E402

G = 4


def _reward(task, completion, references):
    """Deterministic reward in [0, 2] that varies across completions."""
    return float(len(completion.split()) % 3)


def _answer(completion, task):
    return completion.split()[-1] if completion.split() else ""


def _success(task, reward):
    return reward > 1.0


@pytest.fixture(scope="module")
def setup():
    tok = tiny_tokenizer()
    model = tiny_causal_lm("llama", vocab_size=len(tok), seed=1)
    qs = ["who was the king ?", "where is the city ?", "what did she answer ?"]
    queries = pd.DataFrame(
        {
            "query_id": ["q/0", "q 1", "q2"],
            "prompt": [
                tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
                for q in qs
            ],
            "references": [["the king"], ["a city"], ["yes"]],
            "task": "qa_f1",
            "dataset": "narrativeqa",
        }
    )
    return model, tok, queries


def _run(setup, n_queries=None, **kw):
    model, tok, queries = setup
    queries = queries.iloc[:n_queries]
    args = dict(
        G=G, max_new_tokens=8, reward_fn=_reward, answer_fn=_answer, success_fn=_success, progress=False, seed=3
    )
    args.update(kw)
    return collect_rollouts(model, tok, queries, **args)


def test_schema_and_grad_var(setup):
    model, tok, queries = setup
    ro, gr = _run(setup)
    validate_rollouts(ro)
    assert len(ro) == G * len(queries) and list(gr["query_id"]) == list(queries["query_id"])
    for col in ("token_entropy", "logprob", "success", "n_tokens", "references", "dataset"):
        assert col in ro.columns
    for col in ("grad_var", "mean_reward", "success_rate", "grad_norm2_mean", "t_generate", "t_gradvar"):
        assert col in gr.columns
    assert (ro["n_tokens"] >= 1).all() and (ro["n_tokens"] <= 8).all()
    assert (ro["logprob"] < 0).all() and (ro["token_entropy"] > 0).all()
    assert np.allclose(gr["mean_reward"], ro.groupby("query_id", sort=False)["reward"].mean().to_numpy())

    # recompute one query's V with the naive Gram, rebuilding the token ids independently
    k = int(np.argmax(gr["grad_var"].to_numpy()))
    assert gr["grad_var"].iloc[k] > 0
    prompt = tok(queries["prompt"].iloc[k], add_special_tokens=False)["input_ids"]
    sub = ro[ro["query_id"] == queries["query_id"].iloc[k]]
    torch.manual_seed(3 + k)  # regenerate to get token ids (text decoding loses nothing here)
    gen = model.generate(
        input_ids=torch.tensor([prompt]),
        do_sample=True,
        temperature=0.9,
        top_p=1.0,
        top_k=0,
        max_new_tokens=8,
        num_return_sequences=G,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )[:, len(prompt) :]
    seqs, cms = [], []
    for i in range(G):
        toks = gen[i].tolist()
        n = toks.index(tok.eos_token_id) + 1 if tok.eos_token_id in toks else len(toks)
        assert n == sub["n_tokens"].iloc[i]
        seqs.append(prompt + toks[:n])
        cms.append([0] * len(prompt) + [1] * n)
    T = max(map(len, seqs))
    ids = torch.tensor([s + [0] * (T - len(s)) for s in seqs])
    am = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs])
    cm = torch.tensor([c + [0] * (T - len(c)) for c in cms])
    r = sub["reward"].to_numpy()
    adv = (r - r.mean()) / (r.std() + 1e-6)
    expected = gradient_variance(naive_gram(model, ids, am, cm), adv)
    assert abs(gr["grad_var"].iloc[k] - expected) <= 1e-4 * expected


def test_resume_after_crash(setup, tmp_path):
    full_ro, full_gr = _run(setup)
    calls = {"n": 0}

    def flaky(task, completion, references):
        calls["n"] += 1
        if calls["n"] == 2 * G + 1:  # first rollout of the third query, first time only
            raise RuntimeError("simulated crash")
        return _reward(task, completion, references)

    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(setup, reward_fn=flaky, out_dir=tmp_path)
    assert len(list((tmp_path / "parts").glob("*.groups.parquet"))) == 2
    ro, gr = _run(setup, reward_fn=flaky, out_dir=tmp_path)
    assert calls["n"] == 2 * G + 1 + G  # only the third query was redone
    cols = ["t_generate", "t_gradvar"]
    pd.testing.assert_frame_equal(ro, full_ro)
    pd.testing.assert_frame_equal(gr.drop(columns=cols), full_gr.drop(columns=cols))
    with pytest.raises(ValueError, match="other settings"):
        _run(setup, out_dir=tmp_path, G=2)


def test_no_grad_var_and_equal_rewards(setup):
    ro, gr = _run(setup, 1, grad_var=False, reward_fn=lambda t, c, r: 1.0, batch_generate=False)
    assert "grad_var" not in gr.columns and len(ro) == G
    assert np.all(grpo_advantages([1.0, 1.0, 1.0]) == 0)
    _, gr = _run(setup, 1, reward_fn=lambda t, c, r: 1.0)
    assert (gr["grad_var"] == 0).all()


def test_bad_inputs(setup):
    model, tok, queries = setup
    with pytest.raises(ValueError, match="missing column"):
        collect_rollouts(model, tok, queries.drop(columns="task"), G=2, progress=False)
    with pytest.raises(ValueError, match=r"rollout 0: reward 3\.0"):
        _run(setup, 1, reward_fn=lambda t, c, r: 3.0)


def test_grams_sidecar_matches_grad_var_and_resumes(setup, tmp_path):
    from gcpo_analysis.study.collect import gram_frame, grams_by_query

    ro, gr, gm = _run(setup, n_queries=2, out_dir=tmp_path, return_grams=True)
    grams = grams_by_query(gm)
    assert list(grams) == list(gr["query_id"])
    for qid, K in grams.items():
        rewards = ro.loc[ro.query_id == qid, "reward"].to_numpy()
        assert K.shape == (G, G) and np.allclose(K, K.T)
        row = gr.set_index("query_id").loc[qid]
        assert np.isclose(gradient_variance(K, grpo_advantages(rewards)), row["grad_var"], rtol=1e-12)
        assert np.isclose(np.diag(K).mean(), row["grad_norm2_mean"], rtol=1e-12)
    again = _run(setup, n_queries=2, out_dir=tmp_path, return_grams=True)[2]  # read back from the parts
    pd.testing.assert_frame_equal(again, gm)
    broken = gm.iloc[1:]
    with pytest.raises(ValueError, match="not a full 4 x 4 matrix"):
        grams_by_query(broken)
    assert len(gram_frame("x", np.eye(3))) == 9
