"""Run by `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo) from tests/train/test_trl.py: one GCPO step in
which each group of G = 4 completions is split over the two processes (2 per process). Each
rank writes what it saw: the gathered texts and rewards, the weights, and its local advantages
before and after GCPO's multiplication."""

import json
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trl  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from gcpo_train.trl import GCPOConfig, GCPOTrainer  # noqa: E402
from helpers.embedders import HashEmbedder  # noqa: E402
from helpers.trl_setup import config_kwargs, dataset, recording_advantages, word_reward  # noqa: E402

model_dir, out_dir = sys.argv[1], Path(sys.argv[2])
before, after = [], []
trl.GRPOTrainer._generate_and_score_completions = recording_advantages(
    trl.GRPOTrainer._generate_and_score_completions, before
)
args = GCPOConfig(
    modulator="bot_rd", judge="lexical", **config_kwargs(out_dir, per_device_train_batch_size=2, max_steps=1)
)
trainer = GCPOTrainer(
    model=model_dir,
    reward_funcs=word_reward,
    args=args,
    train_dataset=dataset(),
    processing_class=AutoTokenizer.from_pretrained(model_dir),
    embedder=HashEmbedder(),
)
GCPOTrainer._generate_and_score_completions = recording_advantages(GCPOTrainer._generate_and_score_completions, after)
trainer.train()
last = trainer.gcpo_last
rank = trainer.accelerator.process_index
(out_dir / f"rank{rank}.json").write_text(
    json.dumps(
        {
            "rank": rank,
            "world": trainer.accelerator.num_processes,
            "texts": last["texts"],
            "rewards": list(map(float, last["rewards"])),
            "weights": list(map(float, last["weights"])),
            "local": [last["local"].start, last["local"].stop],
            "before": before[-1].tolist(),
            "after": after[-1].tolist(),
        }
    )
)
