"""Tiny, randomly initialised models and an offline tokenizer, for tests and examples.

Nothing here touches a network: models are built from configs, the tokenizer from a fixed
word-level vocabulary with a minimal chat template.
"""

from __future__ import annotations

import string

from .models import require

_SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|> {{ m['content'] }} "
    "{% else %}<|assistant|> {{ m['content'] }} </s> {% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def tiny_tokenizer():
    """A word-level tokenizer (lower-case words, digits, punctuation) with a chat template."""
    tokenizers = require("tokenizers")
    transformers = require("transformers")
    words = (
        "the a an of to in is was and or not who what where when why how which did does do "
        "he she it they his her their him them this that answer question context passage "
        "yes no one two three four five six seven eight nine ten zero man woman king queen "
        "city house ship war love death father mother son daughter friend boxed final"
    ).split()
    vocab = {tok: i for i, tok in enumerate(_SPECIALS)}
    for tok in list(string.ascii_lowercase) + list(string.digits) + list(string.punctuation) + words:
        vocab.setdefault(tok, len(vocab))
    model = tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>")
    tok = tokenizers.Tokenizer(model)
    tok.normalizer = tokenizers.normalizers.Lowercase()
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Sequence(
        [tokenizers.pre_tokenizers.WhitespaceSplit(), tokenizers.pre_tokenizers.Punctuation()]
    )
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=["<|user|>", "<|assistant|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def tiny_causal_lm(family: str = "llama", *, vocab_size: int = 128, seed: int = 0, **overrides):
    """A randomly initialised causal LM of a given family, small enough for CPU tests.

    family: 'llama' (untied), 'llama-tied' (tie_word_embeddings), 'qwen2' (q/k/v biases),
    'gpt2' (Conv1D, LayerNorm, learned positions). float32, eval mode.
    """
    torch = require("torch")
    transformers = require("transformers")
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    if family in ("llama", "llama-tied"):
        cfg = transformers.LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            tie_word_embeddings=(family == "llama-tied"),
            **common,
        )
    elif family == "qwen2":
        cfg = transformers.Qwen2Config(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            tie_word_embeddings=False,
            **common,
        )
    elif family == "gpt2":
        cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=256, **common)
    else:
        raise ValueError(f"unknown tiny model family {family!r}; use llama, llama-tied, qwen2 or gpt2")
    for key, value in overrides.items():
        setattr(cfg, key, value)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.eval()
    return model
