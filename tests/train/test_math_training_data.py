"""Training on a math benchmark with the study's own data knobs: ``max_int_answer`` filters the
queries before the train/held-out split, and ``prompt`` picks the template that the loop, the
held-out evaluation and the TRL dataset all use (the issue-25 ASDiv protocol needs both)."""

import json

import pytest

from gcpo_analysis.prompts import PROMPT_TEMPLATES, build_prompt
from gcpo_train.config import TrainConfig
from gcpo_train.evaluation.splits import load_split

ONE_SHOT_MARK = "Tom has 3 apples"  # text of math_one_shot's worked example, in no other template
ANSWERS = ["3 apples", "25 pears", "7", "1.5 kg", "10 cars", "0 dogs", "11 cats", "4 birds", "-2 degrees", "9"]


def _asdiv_file(tmp_path):
    path = tmp_path / "asdiv.jsonl"
    rows = [
        {"passage": f"Ann has {i} things.", "question": f"Problem {i}?", "answer": a} for i, a in enumerate(ANSWERS)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_max_int_answer_filters_before_the_split(tmp_path):
    assert ONE_SHOT_MARK in PROMPT_TEMPLATES["math_one_shot"]
    cfg = TrainConfig(
        dataset="asdiv", data_path=str(_asdiv_file(tmp_path)), split_from_single=True, train_frac=0.5, max_int_answer=10
    )
    train, test = load_split(cfg, cfg.train_split), load_split(cfg, cfg.eval_split)
    kept = {a.split()[0] for a in ANSWERS if a.split()[0].isdigit() and int(a.split()[0]) <= 10}
    assert sorted(kept) == ["0", "10", "3", "4", "7", "9"]
    refs = [r[0] for r in list(train["references"]) + list(test["references"])]
    assert sorted(refs) == sorted(kept) and set(train["query_id"]).isdisjoint(test["query_id"])
    unfiltered = TrainConfig(dataset="asdiv", data_path=str(_asdiv_file(tmp_path)), split_from_single=True)
    assert len(load_split(unfiltered, "train")) + len(load_split(unfiltered, "test")) == len(ANSWERS)


@pytest.mark.parametrize("field, value", [("max_int_answer", -1), ("prompt", "no_such_template")])
def test_the_data_knobs_refuse_nonsense(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(dataset="asdiv", **{field: value})


def test_the_loop_and_the_evaluation_use_the_config_s_template(tmp_path):
    pytest.importorskip("peft")
    from helpers.embedders import HashEmbedder
    from helpers.loop_setup import loop_config, queries, word_reward

    from gcpo_train.evaluation.evaluate import evaluate
    from gcpo_train.loop.trainer import GCPOLoopTrainer

    seen = []

    def recording_prompt(row, tokenizer, max_context_tokens, template=None):
        text = build_prompt(row, tokenizer, max_context_tokens=max_context_tokens, template=template)
        seen.append(text)
        return text

    config = TrainConfig(**loop_config(tmp_path, steps=1, prompt="math_one_shot"))
    trainer = GCPOLoopTrainer(
        config, queries=queries(), reward_fn=word_reward, embedder=HashEmbedder(), prompt_fn=recording_prompt
    )
    trainer.train()
    assert len(seen) == config.queries_per_step and all(ONE_SHOT_MARK in p for p in seen)

    import gcpo_analysis.prompts as prompts

    evaluated = []
    original = prompts.build_prompt

    def spy(row, tokenizer, max_context_tokens=None, template=None):
        evaluated.append(template)
        return original(row, tokenizer, max_context_tokens=max_context_tokens, template=template)

    prompts.build_prompt = spy
    try:
        evaluate(trainer.policy, "narrativeqa", queries=queries(2), tokenizer=trainer.tokenizer, config=config)
    finally:
        prompts.build_prompt = original
    assert evaluated == ["math_one_shot", "math_one_shot"]


def test_a_checkpoint_is_evaluated_under_the_config_given_with_it(tmp_path):
    """evaluate(checkpoint) uses the checkpoint's own config, and a config given with it instead
    (gcpo eval CHECKPOINT --config C): C's template here; before, C was ignored without a word."""
    pytest.importorskip("peft")
    from helpers.embedders import HashEmbedder
    from helpers.loop_setup import loop_config, queries, word_reward

    import gcpo_analysis.prompts as prompts
    from gcpo_train.evaluation.evaluate import evaluate
    from gcpo_train.loop.trainer import GCPOLoopTrainer

    config = TrainConfig(**loop_config(tmp_path, steps=1, checkpoint_every=1))
    GCPOLoopTrainer(config, queries=queries(), reward_fn=word_reward, embedder=HashEmbedder()).train()
    checkpoint = tmp_path / "run" / "checkpoints" / "step_000001"
    other = TrainConfig(**loop_config(tmp_path, "other", steps=1, prompt="math_one_shot"))
    evaluated, original = [], prompts.build_prompt

    def spy(row, tokenizer, max_context_tokens=None, template=None):
        evaluated.append(template)
        return original(row, tokenizer, max_context_tokens=max_context_tokens, template=template)

    prompts.build_prompt = spy
    try:
        evaluate(str(checkpoint), "narrativeqa", queries=queries(2), progress=False)
        evaluate(str(checkpoint), "narrativeqa", queries=queries(2), config=other, progress=False)
    finally:
        prompts.build_prompt = original
    assert evaluated == [None, None, "math_one_shot", "math_one_shot"]


def test_the_trl_dataset_uses_the_config_s_template():
    pytest.importorskip("datasets")
    from helpers.loop_setup import queries

    from gcpo_analysis.tiny_models import tiny_tokenizer
    from gcpo_train.trl.backend import prompts_dataset

    cfg = TrainConfig(dataset="narrativeqa", prompt="math_one_shot", max_context_tokens=16)
    rows = prompts_dataset(cfg, tiny_tokenizer(), queries=queries(3))
    assert len(rows) == 3 and all(ONE_SHOT_MARK in p for p in rows["prompt"])
    plain = prompts_dataset(TrainConfig(dataset="narrativeqa", max_context_tokens=16), tiny_tokenizer(), queries(3))
    assert not any(ONE_SHOT_MARK in p for p in plain["prompt"])
