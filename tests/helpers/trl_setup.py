"""A tiny TRL/GCPO run shared by tests/train/test_trl.py and the 2-process script (no network)."""

WORDS = {"king", "city", "house", "war", "man", "the"}
PROMPTS = ["who is the king ?", "what is the city ?", "where is the house ?", "who won the war ?"]


def word_reward(completions, **kwargs):
    """Dense deterministic reward in [0, 2] so groups rarely tie."""
    return [2.0 * sum(t in WORDS for t in c.split()) / max(1, len(c.split())) for c in completions]


word_reward.reward_bounds = (0.0, 2.0)  # type: ignore[attr-defined]  # GCPOTrainer's declared reward range


def recording_advantages(method, store: list):
    """``method`` (a trainer's ``_generate_and_score_completions``) that also appends a copy of
    each batch's advantages to ``store``."""

    def recording(self, inputs):
        out = method(self, inputs)
        store.append(out["advantages"].clone())
        return out

    return recording


def config_kwargs(output_dir, **overrides):
    kw = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        max_steps=2,
        logging_steps=1,
        seed=0,
        learning_rate=1e-2,
        beta=0.04,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        temperature=1.0,
        disable_tqdm=True,
    )
    kw.update(overrides)
    return kw


def dataset():
    from datasets import Dataset

    return Dataset.from_dict({"prompt": PROMPTS * 4})
