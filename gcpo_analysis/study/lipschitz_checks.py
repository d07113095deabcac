"""Every Lipschitz table of a study folder with Grams, from its committed files only:
the check itself (``lipschitz.write_lipschitz``), the same on the queries whose rebuilt Grams
match the sampled tokens exactly (``lipschitz_exact_tokens*``, when the folder holds
``tables/gram_recompute_rollouts.csv`` from ``scripts/recompute_grams.py``), and the confounds
table (``lipschitz_confounds.{md,csv}``, ``stats.lipschitz_confounds``) from the embeddings
sidecar. ``gcpo study`` and ``gcpo study --restat`` both call ``write_lipschitz_checks``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..frames import write_table, write_text
from ..stats.lipschitz import N_BOOT
from ..stats.lipschitz_confounds import group_confounds, summarise_confounds
from .lipschitz import SIDECAR, _by_query, read_embeddings, write_lipschitz

RECOMPUTE = "gram_recompute_rollouts.csv"
EXACT = "lipschitz_exact_tokens"
CONFOUNDS = "lipschitz_confounds"


def exact_token_queries(folder) -> list[str] | None:
    """The queries every rollout of which ``scripts/recompute_grams.py`` rebuilt with the sampled
    tokens (``tokens_match`` in ``tables/gram_recompute_rollouts.csv``), in file order; None when
    the folder has no such file (its Grams came from the run itself)."""
    path = Path(folder) / "tables" / RECOMPUTE
    if not path.exists():
        return None
    check = pd.read_csv(path)
    missing = {"query_id", "tokens_match"} - set(check.columns)
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)} (scripts/recompute_grams.py writes them)")
    if not check["tokens_match"].isin([True, False]).all():
        raise ValueError(f"{path}: column 'tokens_match' must be True/False")
    every = check.groupby("query_id", sort=False)["tokens_match"].all()
    return every.index[every].tolist()


def confounds_table(rollouts: pd.DataFrame, grams, prepared: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0):
    """(per_group, summary) of ``stats.lipschitz_confounds`` from a rollouts frame (``n_tokens``
    and the embedded text column the sidecar's metadata names), the Grams ({query_id: K} or the
    grams.parquet frame) and the embeddings sidecar."""
    from .collect import grams_by_query

    K = grams_by_query(grams) if isinstance(grams, pd.DataFrame) else dict(grams)
    E, _ = _by_query(prepared)
    text = prepared.attrs.get("lipschitz", {}).get("text", "answer")
    for col in ("n_tokens", text):
        if col not in rollouts.columns:
            raise ValueError(f"the Lipschitz confounds need the rollouts column {col!r}")
    rows = []
    df = rollouts.sort_values(["query_id", "rollout_id"], kind="stable")
    for q, g in df.groupby("query_id", sort=False):
        if q not in K or q not in E:
            raise ValueError(f"query {q!r} has no {'Gram matrix' if q not in K else 'embeddings in the sidecar'}")
        stats = group_confounds(K[q], E[q], g["n_tokens"].to_numpy(float), g[text].astype(str).tolist())
        rows.append(dict(query_id=q, **stats))
    per_group = pd.DataFrame(rows)
    return per_group, summarise_confounds(per_group, n_boot=n_boot, seed=seed)


def write_confounds(folder, rollouts, grams, prepared, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """tables/lipschitz_confounds.{md,csv} of a study folder; returns the summary."""
    tables = Path(folder) / "tables"
    _, summary = confounds_table(rollouts, grams, prepared, n_boot=n_boot, seed=seed)
    meta = prepared.attrs.get("lipschitz", {})
    model = meta.get("embedder", {}).get("model", "?") if isinstance(meta.get("embedder"), dict) else "?"
    text = meta.get("text", "answer")
    head = (
        "How much of rho(d_g, d_e) is length, word overlap or gradient size "
        "(gcpo_analysis/stats/lipschitz_confounds.py, from grams.parquet and the embeddings sidecar): per-group "
        "Spearman and rank partial correlations, mean over groups, 95% percentile bootstrap CI over groups "
        f"({n_boot:,} resamples, seed {seed}). d_g = ||g_i - g_j||^2, d_e = 1 - cos of the {text}s' embeddings "
        f"({model}, float16 sidecar), length = |n_i - n_j| tokens, jaccard = word-set Jaccard distance of the "
        f"{text}s, norms = ||g_i||^2 + ||g_j||^2; n_groups = groups where the statistic is defined."
    )
    write_table(summary, tables / f"{CONFOUNDS}.csv")
    write_text(tables / f"{CONFOUNDS}.md", head + "\n\n" + summary.to_markdown(index=False, floatfmt=".3f") + "\n")
    return summary


def write_lipschitz_checks(
    folder,
    *,
    seed: int,
    rollouts,
    grams,
    prepared=None,
    settings: dict | None = None,
    figures: bool = True,
    n_boot: int = N_BOOT,
):
    """All Lipschitz tables of ``folder`` (see the module docstring); returns the main summary.
    ``prepared`` None reads the folder's sidecar (``write_lipschitz`` embeds once where none);
    ``figures`` False draws no figure; ``n_boot`` resamples for every CI (the committed tables:
    ``stats.lipschitz.N_BOOT``)."""
    folder = Path(folder)
    exact = exact_token_queries(folder)  # a bad check file fails before any work
    if exact is not None and not exact:
        raise ValueError(f"{folder / 'tables' / RECOMPUTE}: no query has every rollout's tokens matched")
    if prepared is None and (folder / SIDECAR).exists():
        prepared = read_embeddings(folder / SIDECAR)  # read once, for all three
    common = dict(seed=seed, settings=settings, rollouts=rollouts, grams=grams, figure=figures, n_boot=n_boot)
    _, summary = write_lipschitz(folder, prepared=prepared, **common)
    if prepared is None:
        prepared = read_embeddings(folder / SIDECAR)  # written by write_lipschitz when it was missing
    if exact is not None:
        write_lipschitz(folder, prepared=prepared, queries=exact, name=EXACT, bound=False, **common)
    write_confounds(folder, rollouts, grams, prepared, n_boot=n_boot, seed=seed)
    return summary
