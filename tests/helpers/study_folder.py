"""A finished study folder made up without a model (rollouts, Grams, groups with the target and
the measures' columns, and a run card), for `gcpo study --restat` (tests/analysis/study/test_restat.py,
tests/integration/test_plugins.py)."""

import json

import numpy as np
import pandas as pd

from gcpo_analysis.gradvar import gradient_variance
from gcpo_analysis.measures.advantages import grpo_advantages
from gcpo_analysis.study.collect import gram_frame


def study_folder(tmp_path, measures, n=30, G=4, cap=6, seed=0, reference="bot"):
    """tmp_path/run: n queries of G rollouts, each measure's column a seeded normal draw."""
    rng = np.random.default_rng(seed)
    rows, grams, groups = [], [], []
    for q in range(n):
        qid = f"q{q}"
        n_tok = rng.integers(2, cap + 1, size=G)
        g = rng.normal(size=(G, 7)) * np.sqrt(n_tok)[:, None]
        K = g @ g.T
        r = (rng.random(G) < 0.5).astype(float) * 2
        for i in range(G):
            rows.append(
                dict(query_id=qid, rollout_id=i, completion="x", answer="x", reward=r[i], n_tokens=int(n_tok[i]))
            )
        grams.append(gram_frame(qid, K))
        groups.append(
            dict(
                query_id=qid,
                G=G,
                success_rate=float(np.mean(r > 0)),
                grad_var=gradient_variance(K, grpo_advantages(r)),
                grad_norm2_mean=float(np.mean(np.diag(K))),
                **{m: float(rng.normal()) for m in measures},
            )
        )
    folder = tmp_path / "run"
    folder.mkdir()
    pd.DataFrame(rows).to_parquet(folder / "rollouts.parquet")
    pd.concat(grams, ignore_index=True).to_parquet(folder / "grams.parquet")
    pd.DataFrame(groups).to_parquet(folder / "groups.parquet")
    settings = dict(dataset="narrativeqa", measures=",".join(measures), trim=0.1, n_boot=40, k_folds=3, seed=0)
    settings.update(target="grad_var", reference=reference, max_new_tokens=cap, judge="embedding")
    (folder / "run_card.json").write_text(json.dumps({"settings": settings}))
    return folder
