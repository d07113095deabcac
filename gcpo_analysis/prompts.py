"""Generation prompts of the benchmarks (paper Appendix D training setup): one user message
per query from its task's template, the passage cut to a token budget, then the tokenizer's
chat template. Shared by the study, gcpo_train's loop, evaluation and the TRL backend."""

from __future__ import annotations

import re

PROMPT_TEMPLATES = {
    "qa_f1": (
        "Answer the question based on the passage. Give only a short answer.\n\n"
        "Passage: {context}\n\nQuestion: {question}\nAnswer:"
    ),
    "hotpot": (
        "Answer the question based on the passages. Give only a short answer "
        "(yes or no for yes/no questions).\n\nPassages:\n{context}\n\nQuestion: {question}\nAnswer:"
    ),
    "math": "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
    # Multiple choice written as QA (gcpo pilot choice-as-qa puts the options in the question):
    # the reference is the right option's text, so token-F1 rewards copying the right option.
    "choice": (
        "Read the passage, then answer the question with the correct option, copied exactly.\n\n"
        "Passage: {context}\n\nQuestion: {question}\nAnswer:"
    ),
    # One worked one-line example before the problem: a 135M policy told to "reason step by step"
    # rambles past any small token budget (cpu-math pilot: 96% of completions cut at 48 tokens,
    # 5% correct); shown the format, it often writes "a + b = c. The answer is \boxed{c}.".
    "math_one_shot": (
        "Example: Tom has 3 apples. He buys 4 more apples. How many apples does Tom have now?\n"
        "Solution: 3 + 4 = 7. The answer is \\boxed{{7}}.\n\n"
        "Now solve this problem the same way.\n{question}\nSolution:"
    ),
}


def _truncate(text: str, max_tokens: int | None, tokenizer) -> str:
    """The longest prefix of ``text`` holding ``max_tokens`` tokens of ``tokenizer`` (whitespace
    words without one). Cut at the character offset of the last kept token, so the text is
    not re-decoded (decoding can change case and spacing)."""
    if max_tokens is None:
        return text
    if tokenizer is None:
        words = list(re.finditer(r"\S+", text))
        return text if len(words) <= max_tokens else text[: words[max_tokens - 1].end()] if max_tokens else ""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=getattr(tokenizer, "is_fast", False))
    ids = enc["input_ids"]
    if len(ids) <= max_tokens:
        return text
    if max_tokens == 0:
        return ""
    if "offset_mapping" in enc:
        return text[: enc["offset_mapping"][max_tokens - 1][1]]
    return tokenizer.decode(ids[:max_tokens], skip_special_tokens=True)


def build_messages(
    row, max_context_tokens: int | None = 256, tokenizer=None, template: str | None = None
) -> list[dict]:
    """[{"role": "user", "content": PROMPT_TEMPLATES[task].format(question, context)}] with no
    system message; the passage keeps its first ``max_context_tokens`` tokens (paper Appendix D
    training setup; None keeps it whole). Math prompts carry no passage. ``template`` names
    another entry of PROMPT_TEMPLATES (e.g. "math_one_shot") to use instead of the task's."""
    task = row["task"] if "task" in row else None
    if task not in PROMPT_TEMPLATES:
        raise ValueError(f"row {row.get('query_id', '?')!r}: unknown task {task!r}")
    if template is not None and template not in PROMPT_TEMPLATES:
        raise ValueError(f"unknown prompt template {template!r}; choices: {', '.join(PROMPT_TEMPLATES)}")
    if max_context_tokens is not None and max_context_tokens < 0:
        raise ValueError(f"max_context_tokens must be >= 0, got {max_context_tokens}")
    context = _truncate(str(row.get("context") or ""), max_context_tokens, tokenizer)
    content = PROMPT_TEMPLATES[template or task].format(question=str(row["question"]).strip(), context=context)
    return [{"role": "user", "content": content}]


def build_prompt(
    row, tokenizer, max_context_tokens: int | None = 256, chat: bool = True, template: str | None = None
) -> str:
    """The generation prompt: ``tokenizer.apply_chat_template(build_messages(...), tokenize=False,
    add_generation_prompt=True)``; ``chat=False`` gives the plain user text."""
    messages = build_messages(row, max_context_tokens=max_context_tokens, tokenizer=tokenizer, template=template)
    if not chat:
        return messages[0]["content"]
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "the tokenizer has no chat template; use chat=False (--no-chat-template) for a plain-text prompt"
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
