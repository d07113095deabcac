"""Run by `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo) from tests/test_train_trainer.py:
gcpo's own loop, one step, on a fresh output folder (argv[1]); rank 0 writes the log. Rank 1
looks at the folder 2 s late, so a rank 0 that wrote run.json without waiting is caught."""
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_train_trainer import make  # noqa: E402

from gcpo_train.trainer import GRPOTrainer  # noqa: E402

check_folder = GRPOTrainer._prepare_output


def late_on_rank_1(self):
    if self.accelerator.process_index == 1:
        time.sleep(2)
    return check_folder(self)


GRPOTrainer._prepare_output = late_on_rank_1

out = Path(sys.argv[1])
make(out.parent, out.name, steps=1, queries_per_step=2).train()
