"""What a BoolQ-as-QA policy answers on the held-out set (issue 25's pilot log): for each
predictions file of ``gcpo eval``, token-F1, the share of answers that are exactly yes / no,
accuracy (answer == reference), and the token-F1 of the constant answers "yes" and "no" on the
same queries (the majority-class baselines a collapsed policy would reach), and the paired
difference from always "yes" with its 95% bootstrap CI over queries (``heldout.paired_gain``).

    python scripts/boolq_pilot_stats.py base.predictions.parquet trained.predictions.parquet
"""

from __future__ import annotations

import sys

import pandas as pd

from gcpo_analysis.rewards import normalize_answer, token_f1
from gcpo_train.evaluation.heldout import paired_gain


def stats(path: str) -> dict:
    df = pd.read_parquet(path)
    answers = df["answer"].map(normalize_answer)
    refs = df["references"].map(lambda r: normalize_answer(list(r)[0]))
    always_yes = df.assign(score=100 * df["references"].map(lambda r: token_f1("yes", list(r))))
    gain = paired_gain(always_yes, df)
    return {
        "file": path,
        "n": len(df),
        "F1": float(df["score"].mean()),
        "yes": float((answers == "yes").mean()),
        "no": float((answers == "no").mean()),
        "accuracy": float((answers == refs).mean()),
        "F1 of always 'yes'": 100 * float(df["references"].map(lambda r: token_f1("yes", list(r))).mean()),
        "F1 of always 'no'": 100 * float(df["references"].map(lambda r: token_f1("no", list(r))).mean()),
        "Δ vs always 'yes'": gain["diff"],
        "CI low": gain["ci_low"],
        "CI high": gain["ci_high"],
    }


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print(pd.DataFrame([stats(p) for p in sys.argv[1:]]).round(3).to_string(index=False))
