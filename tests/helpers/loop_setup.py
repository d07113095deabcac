"""A tiny run of gcpo's own loop (GCPOLoopTrainer), shared by the training, export, study and
hostile tests and by the 2-process script gcpo_two_process.py (no network); the TRL
counterpart is trl_setup.py. It imports gcpo_train.loop.trainer: importers skip first when
torch/peft/accelerate are missing (``pytest.importorskip``)."""

import json
from pathlib import Path

import pandas as pd

from gcpo_train.config import TrainConfig
from gcpo_train.loop.trainer import GCPOLoopTrainer
from helpers.embedders import HashEmbedder
from helpers.launch import REPO, accelerate_two_processes

WORDS = "the king queen city house ship war love father son who what answer".split()


def queries(n=6):
    qs = [
        "who is the king ?",
        "what is the city ?",
        "where is the ship ?",
        "who did it ?",
        "what was the war ?",
        "who is his father ?",
    ]
    return pd.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(n)],
            "dataset": "narrativeqa",
            "split": "train",
            "question": qs[:n],
            "context": "the king had a son . the ship was in the city .",
            "references": [["the king"], ["the city"], ["the house"], ["he"], ["the war"], ["the man"]][:n],
            "task": "qa_f1",
        }
    )


def word_reward(task, completion, references):
    # dense, deterministic reward in [0, 2] so groups rarely tie
    toks = completion.split()
    return 2.0 * sum(t in WORDS for t in toks) / max(1, len(toks))


def loop_config(tmp_path, name="run", **kw) -> dict:
    """TrainConfig keywords of a tiny run into tmp_path/name (``kw`` override them)."""
    base = dict(
        model="tiny:llama",
        dataset="narrativeqa",
        modulator="none",
        group_size=4,
        queries_per_step=2,
        steps=2,
        max_new_tokens=6,
        max_context_tokens=16,
        judge="lexical",
        output_dir=str(tmp_path / name),
        checkpoint_every=0,
        progress=False,
        learning_rate=5e-3,
        beta=0.05,
        device="cpu",
        micro_batch_size=8,
    )
    base.update(kw)
    return base


def make(tmp_path, name="run", **kw):
    config = TrainConfig(**loop_config(tmp_path, name, **kw))
    return GCPOLoopTrainer(config, queries=queries(), reward_fn=word_reward, embedder=HashEmbedder())


def launch_two_processes(root: Path, runs: dict) -> None:
    """gcpo_two_process.py under `accelerate launch` with 2 CPU processes (gloo): each run of
    ``runs`` (name -> TrainConfig overrides of ``make``) trains into root/name."""
    accelerate_two_processes(
        REPO / "tests" / "helpers" / "gcpo_two_process.py",
        str(root),
        *[f"{name}={json.dumps(overrides)}" for name, overrides in runs.items()],
    )


class Exploit:
    """A pickle that runs code when loaded (it touches ``marker``): the payload of a crafted
    checkpoint file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def comparison(cfg: TrainConfig, folder: Path, arms, seeds):
    """A ``Comparison`` of ``cfg`` on the six test queries, evaluated every step on four held-out
    queries (the same queries with ids prefixed 'h'), word reward, hash embedder."""
    from gcpo_train.compare.run import Comparison

    held = queries().assign(query_id=lambda d: "h" + d["query_id"])
    return Comparison(
        cfg,
        folder,
        arms,
        seeds,
        eval_every=1,
        eval_n=4,
        trainer_kwargs=dict(queries=queries(), eval_queries=held, reward_fn=word_reward, embedder=HashEmbedder()),
    )
