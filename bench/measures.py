"""Benchmark of the measures pipeline; prints markdown tables.

(a) CD, BoT, RD (gcpo_analysis.measures.dispersion) and SE, KLE (entropy) over 10,000 groups of
    G = 16 with random 384-d unit embeddings, cluster labels and rewards (target: CD + BoT + RD
    < 1 s); time is the best of --repeats, memory the tracemalloc peak of one run.
(b) clustering 1,000 groups of G = 16 synthetic short answers with paraphrases: batched greedy
    (one judge call per round) vs per-group greedy vs lm-polygraph-style all ordered pairs, with
    the LexicalJudge and the EmbeddingJudge (a fresh judge, hence text memo, per method).
(c) MiniLM embedding throughput on the same 16,000 answers with and without de-duplication.

    python -u bench/measures.py [--groups 1000] [--threads 1] [--skip-embedding] [--progress]
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gcpo_analysis.measures import dispersion  # noqa: E402
from gcpo_analysis.measures.clustering import (  # noqa: E402
    all_pairs_clusters,
    batched_greedy_clusters,
    greedy_nli_clusters,
)
from gcpo_analysis.measures.entropy import kernel_language_entropy_batch, semantic_entropy_batch  # noqa: E402
from gcpo_analysis.measures.judges import EmbeddingJudge, LexicalJudge  # noqa: E402

FIRST = (
    "John Mary Henry Elizabeth Thomas Anne William Jane George Emma Charles Lucy Edward "
    "Clara Arthur Alice Walter Rose Frederick Grace Albert Helen Robert Ada Samuel"
).split()
LAST = (
    "Smith Darcy Bennet Ahab Holmes Watson Carter Hale Grey Morland Price Ward Lane Shaw "
    "Reed Fairfax Rochester Woodhouse Knightley Tilney"
).split()
PLACES = (
    "Paris London Rome Vienna Boston Dublin Lisbon Venice Cairo Bombay Quebec Madrid "
    "Edinburgh Bath York Oxford Calais Geneva Naples Hamburg"
).split()
THINGS = ("ring letter sword horse ship castle garden portrait map key diary coin lamp necklace will").split()
ADJ = "silver old stolen hidden golden broken secret red forgotten royal".split()
TEMPLATES = [
    "{x}",
    "{x}.",
    "It was {x}.",
    "The answer is {x}.",
    "I think {x}",
    "{x}, according to the story",
    "Probably {x}",
    "{X}",
    "It is {x}",
    "{x} (from the passage)",
]


def _meaning(rng) -> str:
    kind = rng.integers(4)
    if kind == 0:
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    if kind == 1:
        return f"in {rng.choice(PLACES)}" if rng.random() < 0.3 else str(rng.choice(PLACES))
    if kind == 2:
        return f"the {rng.choice(ADJ)} {rng.choice(THINGS)}"
    return str(int(rng.integers(1700, 2000)))


def synthetic_groups(n_groups: int, G: int = 16, seed: int = 0) -> list[list[str]]:
    """Short answers like a QA policy's: 1-4 meanings per query (from ~20k people, places,
    objects and years) with Dirichlet(0.7) mass, each written in one of three paraphrase
    templates the group favours, so exact repeats and paraphrases are both common within a
    group while different queries rarely share answers."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(n_groups):
        k = int(rng.integers(1, 5))
        meanings = [_meaning(rng) for _ in range(k)]
        mass = rng.dirichlet(np.full(k, 0.7))
        styles = rng.choice(len(TEMPLATES), size=3, replace=False)
        group = []
        for _ in range(G):
            x = meanings[rng.choice(k, p=mass)]
            t = TEMPLATES[styles[rng.integers(3)]]
            group.append(t.format(x=x, X=x.upper()))
        groups.append(group)
    return groups


def _best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _peak_mib(fn) -> float:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def bench_dispersion(N: int = 10_000, G: int = 16, d: int = 384, repeats: int = 3) -> None:
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(N, G, d)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=-1, keepdims=True)
    clusters = rng.integers(0, 4, size=(N, G))
    rewards = rng.uniform(0.0, 2.0, size=(N, G))
    cases = [
        ("CD  cosine_dispersion_batch", lambda: dispersion.cosine_dispersion_batch(emb)),
        ("BoT barycentric_transport_batch", lambda: dispersion.barycentric_transport_batch(emb, clusters)),
        ("RD  reward_dispersion_batch", lambda: dispersion.reward_dispersion_batch(rewards)),
        ("SE  semantic_entropy_batch", lambda: semantic_entropy_batch(clusters)),
        ("KLE kernel_language_entropy_batch", lambda: kernel_language_entropy_batch(emb)),
    ]
    print(f"\n### (a) measures over N = {N:,} groups, G = {G}, d = {d} (float32 unit embeddings)\n")
    print(f"| measure | best of {repeats} (s) | peak extra memory (MiB) |")
    print("|---|---:|---:|")
    total = 0.0
    for i, (name, fn) in enumerate(cases):
        t = _best_time(fn, repeats)
        total += t if i < 3 else 0.0
        print(f"| {name} | {t:.3f} | {_peak_mib(fn):.0f} |")
    verdict = "meets" if total < 1.0 else "misses"
    print(f"| **CD + BoT + RD** | **{total:.3f}** | target < 1 s: {verdict} |")


def bench_clustering(groups: list[list[str]], judges: dict, progress: bool, per_group_limit: dict) -> None:
    from tqdm.auto import tqdm

    print(f"\n### (b) clustering {len(groups):,} groups of G = {len(groups[0])} synthetic answers\n")
    print("| judge | method | judge calls | pairs scored | seconds | clusters/group | same partition as greedy |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for jname, make in judges.items():
        judge = make()
        t0 = time.perf_counter()
        ref, stats = batched_greedy_clusters(groups, judge, progress=progress)
        dt = time.perf_counter() - t0
        k = np.mean([lab.max() + 1 for lab in ref])
        print(
            f"| {jname} | batched greedy (lock-step rounds) | {stats['judge_calls']:,} | "
            f"{stats['pairs_scored']:,} | {dt:.2f} | {k:.2f} | 100% |"
        )

        judge = make()
        sub = groups[: per_group_limit.get(jname, len(groups))]
        t0 = time.perf_counter()
        per = [greedy_nli_clusters(g, judge) for g in tqdm(sub, disable=not progress, desc="per-group")]
        dt = time.perf_counter() - t0
        same = np.mean([np.array_equal(a, b) for a, b in zip(per, ref)])
        label = "" if len(sub) == len(groups) else f" (first {len(sub)} groups only)"
        print(
            f"| {jname} | greedy, one group at a time{label} | {judge.n_calls:,} | {judge.n_pairs:,} | "
            f"{dt:.2f} | {np.mean([p.max() + 1 for p in per]):.2f} | {same:.0%} |"
        )

        judge = make()
        t0 = time.perf_counter()
        out = [all_pairs_clusters(g, judge) for g in tqdm(groups, disable=not progress, desc="all pairs")]
        dt = time.perf_counter() - t0
        same = np.mean([np.array_equal(a, b) for (a, _), b in zip(out, ref)])
        print(
            f"| {jname} | all ordered pairs, bidirectional (lm-polygraph) | {judge.n_calls:,} | "
            f"{sum(n for _, n in out):,} | {dt:.2f} | {np.mean([a.max() + 1 for a, _ in out]):.2f} | {same:.0%} |"
        )


def bench_embedding(groups: list[list[str]]) -> None:
    from sentence_transformers import SentenceTransformer

    from gcpo_analysis.measures.embed import Embedder
    from gcpo_analysis.models import resolve_embedder

    model = SentenceTransformer(resolve_embedder(None), device="cpu")
    model.encode(["warm up"])
    flat = [t for g in groups for t in g]
    print(
        f"\n### (c) MiniLM embedding, {len(groups):,} groups x {len(groups[0])} answers "
        f"({len(flat):,} texts, {len(set(flat)):,} distinct)\n"
    )
    print("| mode | texts sent to model | seconds | texts/s (requested) |")
    print("|---|---:|---:|---:|")
    results = {}
    for dedup in (False, True):
        emb = Embedder(model, dedup=dedup)
        t0 = time.perf_counter()
        results[dedup] = emb.encode_groups(groups)
        dt = time.perf_counter() - t0
        print(
            f"| {'de-duplicated' if dedup else 'every text'} | {emb.n_encoded:,} | {dt:.2f} | {len(flat) / dt:,.0f} |"
        )
    diff = max(float(np.abs(a - b).max()) for a, b in zip(results[False], results[True]))
    print(f"\nmax |difference| between the two modes: {diff:.1e}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=1000, help="groups for (b) and (c)")
    ap.add_argument("--dispersion-groups", type=int, default=10_000)
    ap.add_argument("--skip-embedding", action="store_true", help="skip everything that loads MiniLM")
    ap.add_argument("--progress", action="store_true", help="show tqdm bars")
    ap.add_argument(
        "--per-group-limit", type=int, default=200, help="groups for the slow one-group-at-a-time embedding-judge row"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads for MiniLM (1 is much faster on a CPU shared with other jobs)",
    )
    args = ap.parse_args(argv)
    if args.threads and not args.skip_embedding:
        import torch

        torch.set_num_threads(args.threads)
    print(f"torch threads: {args.threads or 'default'}; groups: {args.groups}", flush=True)
    t0 = time.perf_counter()
    bench_dispersion(args.dispersion_groups)
    groups = synthetic_groups(args.groups)
    judges = {"lexical": LexicalJudge}
    if not args.skip_embedding:
        shared = {}

        def make_embedding_judge():
            # one loaded model for all methods, but a fresh judge (and text memo) per method
            from gcpo_analysis.measures.embed import Embedder

            if "model" not in shared:
                shared["model"] = Embedder().model
            return EmbeddingJudge(Embedder(shared["model"]))

        judges["embedding (MiniLM)"] = make_embedding_judge
    bench_clustering(groups, judges, args.progress, {"embedding (MiniLM)": args.per_group_limit})
    if not args.skip_embedding:
        bench_embedding(groups)
    print(f"\ntotal bench time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
