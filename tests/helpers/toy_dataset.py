"""A toy dataset in one file, as a user would add one (docs/guides/extending.md): its parser and
its registration, nothing else. tests/analysis/test_datasets_registry.py imports it."""

from gcpo_analysis.datasets import Example, register_dataset
from gcpo_analysis.datasets.fields import get_field


# "yes indeed" against "yes": 1 shared token of 2 predicted and 1 gold, so P = 1/2, R = 1,
# F1 = 2/3; r = 2 · 2/3 = 4/3.
@register_dataset(
    "toy_echo",
    task="qa_f1",
    source="toy: a JSON-lines file of {prompt, target}",
    example=Example(
        record={"prompt": "Say yes.", "target": "yes"}, references=("yes",), completion="yes indeed", reward=4 / 3
    ),
)
def parse_toy_echo(rec, where):
    """One query per line: the prompt is the question, the target its one reference."""
    yield None, get_field(rec, "prompt", where), "", [get_field(rec, "target", where)]
