"""Ad hoc check beside tables/lipschitz (issue 16, item 3): how much of the per-group
rho(d_g, d_e) is completion length or word overlap?

Per group, over its pairs: rho of d_g = ||g_i - g_j||^2 and of d_e = 1 - cos(e_i, e_j) with the
length gap |n_i - n_j| (tokens) and with the word-set Jaccard distance of the embedded texts,
and the rank partial correlation of d_g and d_e given each of them, and given ||g_i||^2 + ||g_j||^2
(ranks residualised on the control with numpy.linalg.lstsq, then Pearson). Mean over groups with
a 2,000-resample bootstrap over groups. Groups with constant d_e or constant controls are
skipped for that column (n says how many remain). QA folders embed the answer, math folders the
completion (as the measures do).

    PYTHONPATH=$PWD python scripts/lipschitz_confounds.py figures/default_study
"""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from gcpo_analysis.measures.embed import make_embedder
from gcpo_analysis.stats.lipschitz import embedding_distances, gradient_distances
from gcpo_analysis.study.collect import grams_by_query
from gcpo_analysis.vocab import MATH_DATASETS


def _rho(x, y):
    return np.nan if np.ptp(x) == 0 or np.ptp(y) == 0 else stats.spearmanr(x, y).statistic


def _partial(x, y, z):
    if np.ptp(x) == 0 or np.ptp(y) == 0 or np.ptp(z) == 0:
        return np.nan
    Z = np.column_stack([np.ones(len(z)), stats.rankdata(z)])
    res = [v - Z @ np.linalg.lstsq(Z, v, rcond=None)[0] for v in (stats.rankdata(x), stats.rankdata(y))]
    return float(np.corrcoef(*res)[0, 1])


def main(folder: Path) -> pd.DataFrame:
    settings = json.loads((folder / "run_card.json").read_text())["settings"]
    col = "completion" if settings["dataset"] in MATH_DATASETS else "answer"
    r = pd.read_parquet(folder / "rollouts.parquet").sort_values(["query_id", "rollout_id"])
    K = grams_by_query(pd.read_parquet(folder / "grams.parquet"))
    emb = make_embedder(settings.get("embedder"))
    rows = []
    for q, g in r.groupby("query_id", sort=False):
        i, j = np.triu_indices(len(g), 1)
        dg = gradient_distances(K[q])[i, j]
        de = embedding_distances(emb.encode(g[col].tolist()))[i, j]
        n = g["n_tokens"].to_numpy(float)
        dn = np.abs(n[i] - n[j])
        words = [set(t.lower().split()) for t in g[col]]
        dj = np.array([1 - len(words[a] & words[b]) / max(len(words[a] | words[b]), 1) for a, b in zip(i, j)])
        norms = np.diag(K[q])[i] + np.diag(K[q])[j]
        rows.append(
            dict(
                query_id=q,
                rho_g_e=_rho(dg, de),
                rho_g_length=_rho(dg, dn),
                rho_e_length=_rho(de, dn),
                rho_g_jaccard=_rho(dg, dj),
                rho_e_jaccard=_rho(de, dj),
                partial_given_length=_partial(dg, de, dn),
                partial_given_jaccard=_partial(dg, de, dj),
                partial_given_norms=_partial(dg, de, norms),
            )
        )
    f = pd.DataFrame(rows)
    rng = np.random.default_rng(0)
    out = []
    for c in f.columns[1:]:
        v = f[c].dropna().to_numpy()
        boot = [v[rng.integers(0, len(v), len(v))].mean() for _ in range(2000)]
        out.append(
            dict(
                statistic=c,
                mean=v.mean(),
                ci_low=np.quantile(boot, 0.025),
                ci_high=np.quantile(boot, 0.975),
                n_groups=len(v),
            )
        )
    return pd.DataFrame(out)


if __name__ == "__main__":
    table = main(Path(sys.argv[1]))
    print(table.to_markdown(index=False, floatfmt=".3f"))
