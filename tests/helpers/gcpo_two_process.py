"""Run by `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo) from tests/train/test_trainer.py:
gcpo's own loop on fresh output folders. argv: ROOT, then NAME=JSON-overrides per run (each
trains into ROOT/NAME). Rank 1 looks at each folder 2 s late, so a rank 0 that wrote run.json
without waiting is caught."""

import json
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gcpo_train.loop.trainer import GCPOLoopTrainer  # noqa: E402
from helpers.loop_setup import make  # noqa: E402

check_folder = GCPOLoopTrainer._prepare_output


def late_on_rank_1(self, *args):
    if self.accelerator.process_index == 1:
        time.sleep(2)
    return check_folder(self, *args)


GCPOLoopTrainer._prepare_output = late_on_rank_1

root = Path(sys.argv[1])
for arg in sys.argv[2:]:
    name, overrides = arg.split("=", 1)
    make(root, name, **json.loads(overrides)).train()
