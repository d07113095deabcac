"""The Lipschitz check of a study folder (``gcpo_analysis.stats.lipschitz`` holds the statistics):
the groups' Grams, embeddings and clusters gathered from the study's frames (``lipschitz_study``)
and written as tables and a figure (``write_lipschitz``).

The embeddings sidecar: ``embeddings.parquet`` beside the frames keeps, per rollout,
the embedding of what the measures embedded (float16) and its cluster id, so every number of the
check can be recomputed from committed files without loading a model (``embed_rollouts`` makes
it once; ``write_lipschitz`` and ``gcpo study --restat`` read it)."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..frames import write_json, write_table, write_text
from ..outputs import atomic_write
from ..stats.lipschitz import LEVEL, N_BOOT, lipschitz_pairs, summarise
from ..vocab import CLUSTERS, EMBEDDINGS, JUDGE, NLI_THRESHOLD, USE_FULL_COMPLETION, full_completion

log = logging.getLogger(__name__)


SIDECAR = "embeddings.parquet"


def _group_inputs(rollouts: pd.DataFrame, grams, text_col: str):
    from .collect import grams_by_query

    K = grams_by_query(grams) if isinstance(grams, pd.DataFrame) else dict(grams)
    df = rollouts.sort_values(["query_id", "rollout_id"], kind="stable")
    order = list(pd.unique(rollouts["query_id"]))
    missing = [q for q in order if q not in K]
    extra = [q for q in K if q not in set(order)]
    if missing or extra:
        raise ValueError(
            f"rollouts and grams disagree: {len(missing)} query(ies) without a Gram matrix "
            f"(e.g. {missing[:1]}), {len(extra)} Gram matrix(es) without rollouts (e.g. {extra[:1]})"
        )
    groups = {q: g for q, g in df.groupby("query_id", sort=False)}
    for q in order:
        ids = groups[q]["rollout_id"].to_numpy()
        if len(ids) != len(K[q]) or not np.array_equal(ids, np.arange(len(ids))):
            raise ValueError(
                f"query {q!r}: rollout ids {ids.tolist()} do not index its {len(K[q])} x {len(K[q])} Gram matrix"
            )
    texts = [groups[q][text_col].astype(str).tolist() for q in order]
    answers = [groups[q]["answer"].astype(str).tolist() for q in order]
    rewards = [groups[q]["reward"].to_numpy(float) for q in order]
    return order, K, texts, answers, rewards


def embed_rollouts(
    rollouts: pd.DataFrame,
    *,
    embedder=None,
    judge=JUDGE,
    use_full_completion: bool | None = USE_FULL_COMPLETION,
    nli_threshold: float = NLI_THRESHOLD,
) -> pd.DataFrame:
    """The sidecar frame: query_id, rollout_id, cluster, embedding (float16 vectors), one row per
    rollout in the rollouts' query order. Embeddings and clusters come from ``prepare_groups``,
    the builder ``score_groups`` uses, with the same embedder, judge and text
    (``use_full_completion``: the completion, as for math; otherwise the extracted answer); the
    math judge clusters the extracted answers, as in ``score_groups``. ``attrs['lipschitz']``
    records all this (and is written into the parquet file's metadata)."""
    from ..measures.embed import make_embedder
    from ..measures.prepare import measurement_tools, prepare_groups

    text_col = "completion" if full_completion(use_full_completion, rollouts.get("dataset")) else "answer"
    df = rollouts.sort_values(["query_id", "rollout_id"], kind="stable")
    order = list(pd.unique(rollouts["query_id"]))
    by = {q: g for q, g in df.groupby("query_id", sort=False)}
    groups = [by[q] for q in order]
    needs = {EMBEDDINGS, CLUSTERS}
    # as score_groups: an embedder object is wrapped (de-duplicated, normalised), then the tools
    embedder, judge = measurement_tools(needs, make_embedder(embedder), judge)
    prepared, cl_stats = prepare_groups(
        [g[text_col].astype(str).tolist() for g in groups],
        [g["reward"].to_numpy(float) for g in groups],
        needs,
        embedder=embedder,
        judge=judge,
        nli_threshold=nli_threshold,
        answers=[g["answer"].astype(str).tolist() for g in groups],
    )
    out = pd.DataFrame(
        {
            "query_id": np.concatenate([g["query_id"].to_numpy() for g in groups]),
            "rollout_id": np.concatenate([g["rollout_id"].to_numpy() for g in groups]),
            "cluster": np.concatenate([np.asarray(p.clusters, np.int64) for p in prepared]),
            "embedding": [row for p in prepared for row in np.asarray(p.embeddings, np.float16)],
        }
    )
    out.attrs["lipschitz"] = dict(
        text=text_col,
        cluster_text="answer" if getattr(judge, "clusters_answers", False) else text_col,
        embedder=embedder.describe(),
        judge=judge.describe(),
        nli_threshold=nli_threshold,
        clustering=cl_stats,
        embedding_dtype="float16",
    )
    return out


def _without_machine_paths(meta: dict) -> dict:
    """``meta`` with a packaged embedder's path given from site-packages on: the package's file,
    not this machine's, in files that are committed and compared byte for byte."""
    emb = meta.get("embedder")
    if isinstance(emb, dict) and isinstance(emb.get("path"), str) and "site-packages/" in emb["path"]:
        return dict(meta, embedder=dict(emb, path=emb["path"].split("site-packages/", 1)[1]))
    return dict(meta)


def write_embeddings(frame: pd.DataFrame, path) -> None:
    """The sidecar as parquet: embeddings as list<float16>, ``attrs['lipschitz']`` as metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "query_id": pa.array(frame["query_id"].astype(str)),
            "rollout_id": pa.array(frame["rollout_id"].to_numpy(np.int64)),
            "cluster": pa.array(frame["cluster"].to_numpy(np.int64)),
            "embedding": pa.array(list(frame["embedding"]), type=pa.list_(pa.float16())),
        }
    )
    meta = _without_machine_paths(frame.attrs.get("lipschitz", {}))
    table = table.replace_schema_metadata({"gcpo_lipschitz": json.dumps(meta, default=str)})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))  # the one safe writer


def read_embeddings(path) -> pd.DataFrame:
    """Read a sidecar written by ``write_embeddings`` (column and shape checks name the file)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    missing = {"query_id", "rollout_id", "cluster", "embedding"} - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: not an embeddings sidecar, missing column(s) {sorted(missing)}")
    frame = table.to_pandas()
    frame["embedding"] = [np.asarray(e, np.float16) for e in frame["embedding"]]
    if len({len(e) for e in frame["embedding"]}) > 1:
        raise ValueError(f"{path}: embeddings of different lengths")
    frame.attrs["lipschitz"] = json.loads((table.schema.metadata or {}).get(b"gcpo_lipschitz", b"{}"))
    return frame


def _by_query(prepared: pd.DataFrame) -> tuple[dict, dict]:
    df = prepared.sort_values(["query_id", "rollout_id"], kind="stable")
    E, cl = {}, {}
    for q, g in df.groupby("query_id", sort=False):
        E[q] = np.stack(g["embedding"].to_list()).astype(np.float64)
        cl[q] = g["cluster"].to_numpy()
    return E, cl


BOUND_NOTE = (
    "App. C's inequality ||g_i - g_j|| <= L ||e_i - e_j|| (gcpo_analysis/stats/lipschitz_bound.py): per pair "
    "ratio_raw = ||g_i - g_j|| / ||e_i - e_j|| and ratio = ratio_raw / sqrt(mean_i ||g_i||^2) of its group; "
    "L_group = a group's largest ratio; share_pairs_break_at_median_L = pairs above the median L_group; "
    "share_pairs_equal_e_unequal_g = same embedding, different gradient (breaks any finite L). 95% percentile "
    "bootstrap CIs over groups. The simulator's planted Lipschitz and non-Lipschitz gradients (theory.simulate, "
    "200 groups of 8, 200 resamples) are the reference rows."
)


def _bound_table(rollouts, grams, prepared, n_boot: int, seed: int) -> pd.DataFrame:
    from ..stats.lipschitz_bound import bound_summary, planted
    from .collect import grams_by_query

    K = grams_by_query(grams) if isinstance(grams, pd.DataFrame) else dict(grams)
    E, _ = _by_query(prepared)
    order = [q for q in pd.unique(rollouts["query_id"]) if q in K]
    parts = [
        bound_summary({q: K[q] for q in order}, {q: E[q] for q in order}, n_boot=n_boot, seed=seed, column=c).assign(
            source="this study", ratio=c
        )
        for c in ("ratio", "ratio_raw")
    ]
    parts.append(planted(n_queries=200, G=8, seed=seed, n_boot=200))  # a reference: 200 resamples
    cols = ["source", "ratio", "statistic", "estimate", "ci_low", "ci_high", "n_groups", "n_pairs"]
    return pd.concat(parts, ignore_index=True)[cols]


def _parquet_columns(path) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)


def _clusters_check(folder: Path, prepared: pd.DataFrame) -> dict | None:
    """Do the sidecar's clusters give the groups frame's n_clusters? (A judge changed since the
    run, e.g. the math grader, gives other clusters than the measures used: said, not hidden.)"""
    path = folder / "groups.parquet"
    if not path.exists() or "n_clusters" not in _parquet_columns(path):
        return None  # no groups frame, or measures that cluster nothing: nothing to compare with
    n = pd.read_parquet(path, columns=["query_id", "n_clusters"]).set_index("query_id")["n_clusters"]
    k = prepared.groupby("query_id", sort=False)["cluster"].nunique().reindex(n.index)
    agree = int((k == n).sum())
    if agree < len(n):
        warnings.warn(
            f"{folder}: the sidecar's clusters give the groups frame's n_clusters in {agree} of {len(n)} groups "
            "(the judge differs from the run's); the Lipschitz check uses the sidecar's",
            stacklevel=3,
        )
    return {"groups": int(len(n)), "n_clusters_equal": agree}


def lipschitz_study(
    rollouts: pd.DataFrame,
    grams,
    *,
    embedder=None,
    judge=JUDGE,
    use_full_completion: bool | None = USE_FULL_COMPLETION,
    nli_threshold: float = NLI_THRESHOLD,
    n_boot: int = N_BOOT,
    seed: int = 0,
    return_pairs: bool = False,
    prepared: pd.DataFrame | None = None,
):
    """(per_group, summary) frames -- and the pairs frame with ``return_pairs`` -- from a
    rollouts frame and the groups' Gram matrices (a ``grams.parquet`` frame or {query_id: K}).

    ``prepared``: the embeddings sidecar (``embed_rollouts``), used as it is; None embeds and
    clusters here with ``embed_rollouts`` (embedder, judge, text, threshold as described there).
    The summary's ``attrs['lipschitz']`` records what was embedded and clustered.
    """
    if prepared is None:
        prepared = embed_rollouts(
            rollouts,
            embedder=embedder,
            judge=judge,
            use_full_completion=use_full_completion,
            nli_threshold=nli_threshold,
        )
    text_col = prepared.attrs.get("lipschitz", {}).get("text", "answer")
    order, K, *_ = _group_inputs(rollouts, grams, text_col)
    E, cl = _by_query(prepared)
    missing = [q for q in order if q not in E]
    if missing:
        raise ValueError(f"{len(missing)} query(ies) have no embeddings in the sidecar, e.g. {missing[0]!r}")
    pairs, per_group = lipschitz_pairs(K, {q: E[q] for q in order}, {q: cl[q] for q in order})
    summary = summarise(pairs, per_group, n_boot=n_boot, seed=seed)
    summary.attrs["lipschitz"].update(prepared.attrs.get("lipschitz", {}))
    return (per_group, summary, pairs) if return_pairs else (per_group, summary)


# --------------------------------------------------------------------------- a study folder
def _card_settings(folder: Path, settings: dict | None = None) -> dict:
    card_file = folder / "run_card.json"
    source = "the settings given" if settings is not None else str(card_file)
    if settings is None:
        if not card_file.exists():
            raise FileNotFoundError(f"{card_file} is missing: the judge, embedder and dataset come from it")
        settings = json.loads(card_file.read_text()).get("settings", {})
    for key in ("dataset", "judge"):
        if key not in settings:
            raise ValueError(f"{source}: settings has no {key!r}")
    return settings


def to_markdown(summary: pd.DataFrame, title: str = "") -> str:
    meta = summary.attrs.get("lipschitz", {})
    head = (
        f"{title}\n\nDo gradients follow the embedding? d_g = ||g_i - g_j||^2 from each group's Gram "
        f"matrix, d_e = 1 - cos(e_i, e_j) of the measures' embeddings ({meta.get('text', '?')}), clusters of "
        f"the {meta.get('judge', {}).get('kind', '?')} judge on the {meta.get('cluster_text', '?')}, "
        f"{meta.get('n_groups', '?')} groups, {meta.get('n_pairs', '?')} pairs; "
        f"{int(meta.get('level', LEVEL) * 100)}% percentile bootstrap CIs over groups "
        f"({meta.get('n_boot', '?')} resamples, seed {meta.get('seed', '?')}). "
        "See gcpo_analysis/lipschitz.py for the definitions.\n\n"
    )
    cols = ["statistic", "estimate", "ci_low", "ci_high", "p", "n_groups", "n_excluded", "excluded", "description"]
    return head + summary[cols].to_markdown(index=False, floatfmt=".3f") + "\n"


def write_lipschitz(
    folder,
    *,
    embedder=None,
    n_boot: int = N_BOOT,
    seed: int = 0,
    queries=None,
    name: str = "lipschitz",
    settings: dict | None = None,
    rollouts: pd.DataFrame | None = None,
    grams: pd.DataFrame | None = None,
    prepared: pd.DataFrame | None = None,
    bound: bool = True,
    figure: bool = True,
):
    """Run ``lipschitz_study`` on a study folder and write tables/<name>.{md,csv},
    tables/<name>_groups.csv, tables/<name>_meta.json, figures/<name>.{png,svg} and (``bound``)
    the inequality's table tables/<name>_bound.{md,csv}; ``figure`` False draws no figure.

    What the study already holds is taken as given, not read again: ``rollouts``, ``grams`` (the
    grams.parquet frame) and ``prepared`` (the embeddings sidecar); each one not given is read
    from ``folder`` (rollouts.parquet, grams.parquet, embeddings.parquet). Only when the folder
    has no sidecar are the rollouts embedded and clustered (``embed_rollouts``, with the card's
    embedder, judge and nli_threshold, or ``embedder`` for tests) and the sidecar written, said
    in the log. ``settings`` (a StudyConfig as a dict) stands in for the card's, for a study that
    has not written its card yet; ``queries`` keeps only those query ids (a sensitivity check;
    None keeps all). Returns (per_group, summary)."""
    from .. import plots
    from ..frames import read_frame

    folder = Path(folder)
    settings = _card_settings(folder, settings)
    grams_file = folder / "grams.parquet"
    if grams is None:
        if not grams_file.exists():
            raise FileNotFoundError(f"{grams_file} is missing (older runs: scripts/recompute_grams.py rebuilds it)")
        grams = pd.read_parquet(grams_file)
    if rollouts is None:
        rollouts = read_frame(folder / "rollouts.parquet", kind="rollouts")
    threshold = settings.get("nli_threshold", settings.get("threshold", NLI_THRESHOLD))
    if prepared is None and (folder / SIDECAR).exists():
        prepared = read_embeddings(folder / SIDECAR)
    elif prepared is None:
        log.info("%s has no %s: embedding and clustering the rollouts once, written there", folder, SIDECAR)
        prepared = embed_rollouts(
            rollouts,
            embedder=embedder if embedder is not None else settings.get("embedder"),
            judge=settings["judge"],
            use_full_completion=full_completion(None, settings["dataset"]),
            nli_threshold=threshold,
        )
        write_embeddings(prepared, folder / SIDECAR)
    if queries is not None:
        keep = set(queries)
        unknown = keep - set(rollouts["query_id"])
        if unknown:
            raise ValueError(f"{len(unknown)} query id(s) to keep are not in {folder}, e.g. {sorted(unknown)[0]!r}")
        rollouts, grams = rollouts[rollouts["query_id"].isin(keep)], grams[grams["query_id"].isin(keep)]
    per_group, summary, pairs = lipschitz_study(
        rollouts, grams, n_boot=n_boot, seed=seed, return_pairs=True, prepared=prepared
    )
    meta = dict(
        summary.attrs["lipschitz"],
        dataset=settings["dataset"],  # not the folder's name: a moved or renamed study must rewrite the same bytes
        queries="all" if queries is None else sorted(keep),
    )
    meta = _without_machine_paths(meta)
    meta["clusters_vs_groups_frame"] = _clusters_check(folder, prepared)
    tables, figs = folder / "tables", folder / "figures"
    tables.mkdir(exist_ok=True)
    write_table(summary, tables / f"{name}.csv")
    write_table(per_group, tables / f"{name}_groups.csv")
    subset = "" if queries is None else f" ({len(keep)} selected queries)"
    write_text(tables / f"{name}.md", to_markdown(summary, f"# Lipschitz check: {settings['dataset']}{subset}"))
    write_json(tables / f"{name}_meta.json", meta, default=str)
    if bound:
        table = _bound_table(rollouts, grams, prepared, n_boot=n_boot, seed=seed)
        write_table(table, tables / f"{name}_bound.csv")
        write_text(
            tables / f"{name}_bound.md", BOUND_NOTE + "\n\n" + table.to_markdown(index=False, floatfmt=".3f") + "\n"
        )
    if figure:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # tight_layout notes on tiny test figures
            fig = plots.lipschitz_plot(pairs, per_group, summary, path=figs / name, title=settings["dataset"])
        import matplotlib.pyplot as plt

        plt.close(fig)
    return per_group, summary
