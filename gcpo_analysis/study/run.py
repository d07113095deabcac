"""Running the gap study end to end (``run_study``): collection or re-analysis, measures,
statistics, tables, figures and the run card, in one resumable folder (see ``gcpo_analysis.study.cli``
for what the folder holds)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from ..frames import note_logprob_convention, read_frame, write_frame, write_json, write_text
from ..measures.registry import rollouts_columns
from ..measures.score import parse_measures
from ..vocab import full_completion
from .config import StudyConfig
from .covariates import with_covariates
from .output import (  # noqa: F401
    GAP_KEYS,
    RESTAT_OVERRIDES,
    _card_statistics,
    _draw_figures,
    _json_default,
    _versions,
    _write_paper_tables,
    restat,
    write_untrimmed,
)
from .vtables import write_v_tables

log = logging.getLogger(__name__)


def reanalysis_folder(rollouts_file) -> Path:
    """Default output of ``--from-rollouts``: a new folder ``reanalysis-N`` beside the source
    run (N = 1, 2, ...), so a re-analysis never writes over the run it reads."""
    from ..outputs import claim_numbered_folder

    return claim_numbered_folder(Path(rollouts_file).resolve().parent, "reanalysis")  # created: two runs never share N


def _check_reanalysis_output(cfg: StudyConfig, out: Path) -> None:
    """A re-analysis must not replace the frames it reads (nor any other run's frames)."""
    assert cfg.from_rollouts is not None  # called for a re-analysis only
    sources = [Path(cfg.from_rollouts)]
    sources.append(Path(cfg.target_from) if cfg.target_from else Path(cfg.from_rollouts).with_name("groups.parquet"))
    for name in ("rollouts.parquet", "groups.parquet"):
        target = out / name
        if any(target.resolve() == src.resolve() for src in sources if src.exists()):
            raise ValueError(
                f"--output {out} would replace {target}, which this re-analysis reads; "
                f"choose a new folder (the default is a new reanalysis-N beside the source)"
            )
        if target.exists():
            raise ValueError(
                f"--output {out} already holds {name}; a re-analysis writes to a new folder "
                f"(omit --output for reanalysis-N beside the source)"
            )
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if held:  # a user's summary.md or tables are never replaced
        raise ValueError(
            f"--output {out} already holds {', '.join(held[:5])}{', ...' if len(held) > 5 else ''}; "
            f"a re-analysis writes to a new or empty folder (omit --output for reanalysis-N beside the source)"
        )


# --------------------------------------------------------------------------- stages
class _Timer:
    """Times named stages: ``with timer("stage"): ...`` records seconds in ``timer.seconds``."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name):
        log.info("%s ...", name)
        t0 = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - t0, 2)


def _settings_hash(settings: dict) -> str:
    blob = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


_ROLLOUT_KEYS = (
    "dataset",
    "data_path",
    "split",
    "model",
    "n_queries",
    "group_size",
    "temperature",
    "max_new_tokens",
    "max_context_tokens",
    "params",
    "seed",
)
_OPTIONAL_ROLLOUT_KEYS = ("max_int_answer", "prompt")  # hashed only when set, so older runs still resume
PILOT_SUCCESS = (0.1, 0.9)
PILOT_MIN_NONZERO_V = 0.4


def _rollout_settings(cfg: StudyConfig) -> dict:
    keys = _ROLLOUT_KEYS + tuple(k for k in _OPTIONAL_ROLLOUT_KEYS if getattr(cfg, k) is not None)
    return {k: getattr(cfg, k) for k in keys}


def pilot_gate(groups: pd.DataFrame) -> dict:
    """The pilot gate of a study's first queries: mean success in [0.1, 0.9] (neither hopeless nor
    solved) and at least 40% of groups with V > 0 (mixed rewards, so a gradient to measure)."""
    success = float(groups["success_rate"].mean())
    nonzero = float((groups["grad_var"] > 0).mean())
    passed = PILOT_SUCCESS[0] <= success <= PILOT_SUCCESS[1] and nonzero >= PILOT_MIN_NONZERO_V
    return {
        "n_queries": int(len(groups)),
        "mean_success": success,
        "frac_v_positive": nonzero,
        "success_range": list(PILOT_SUCCESS),
        "min_frac_v_positive": PILOT_MIN_NONZERO_V,
        "passed": passed,
    }


def _collect(cfg: StudyConfig, out: Path, timer: _Timer, card: dict):
    from ..data import load_queries
    from ..models import describe_policy, load_policy
    from ..prompts import build_prompt
    from .collect import collect_rollouts

    stamp = out / "parts" / "settings.json"
    settings = _rollout_settings(cfg)
    wanted = _settings_hash(settings)
    if stamp.exists() and json.loads(stamp.read_text())["hash"] != wanted:
        raise ValueError(
            f"{out} holds a study made with other settings ({stamp}); choose another --output or delete that folder"
        )
    with timer("load queries and policy"):
        queries = load_queries(
            cfg.dataset,
            path=cfg.data_path,
            split=cfg.split,
            n=cfg.n_queries,
            seed=cfg.seed,
            max_int_answer=cfg.max_int_answer,
        )
        model, tokenizer = load_policy(cfg.model, device=cfg.device or _default_device())
        queries = queries.assign(
            prompt=[
                build_prompt(row, tokenizer, max_context_tokens=cfg.max_context_tokens, template=cfg.prompt)
                for row in queries.to_dict("records")
            ]
        )
    stamp.parent.mkdir(parents=True, exist_ok=True)
    write_json(stamp, {"hash": wanted, "settings": settings}, indent=None)
    card["model"] = describe_policy(cfg.model)
    card["policy_load"] = getattr(model, "gcpo_policy_load", None)  # the GGUF file read, and why, when so

    def collect(qs):
        return collect_rollouts(
            model,
            tokenizer,
            qs,
            G=cfg.group_size,
            temperature=cfg.temperature,
            max_new_tokens=cfg.max_new_tokens,
            grad_var=True,
            params=cfg.params,
            out_dir=out / "parts",
            seed=cfg.seed,
            progress=True,
            return_grams=True,
        )

    with timer("rollouts, rewards and gradient variance"):
        gate_file = out / "pilot_gate.json"
        if not cfg.pilot and gate_file.exists():  # an earlier gate of this folder, overridden with --pilot 0
            card["pilot_gate"] = dict(json.loads(gate_file.read_text()), overridden=True)
            warnings.warn(
                f"{out}: the pilot gate failed earlier ({gate_file}); running on with --pilot 0, "
                "as the run card records",
                stacklevel=2,
            )
        if cfg.pilot:  # the first queries of the run itself: a passed pilot is not collected again
            gate = pilot_gate(collect(queries.iloc[: cfg.pilot])[1])
            card["pilot_gate"] = gate
            write_json(out / "pilot_gate.json", gate)
            if not gate["passed"]:
                raise RuntimeError(
                    f"pilot gate failed after {gate['n_queries']} queries: mean success "
                    f"{gate['mean_success']:.2f} (wanted {PILOT_SUCCESS[0]}-{PILOT_SUCCESS[1]}), "
                    f"{gate['frac_v_positive']:.0%} of groups with V > 0 (wanted >= {PILOT_MIN_NONZERO_V:.0%}); "
                    f"change the prompt, token budget or filter, or run on regardless with --pilot 0 (the run "
                    f"card then records the failed gate; recorded in {out / 'pilot_gate.json'})"
                )
        rollouts, groups, grams = collect(queries)
    return rollouts, groups, grams


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _from_rollouts(cfg: StudyConfig, timer: _Timer, card: dict):
    assert cfg.from_rollouts is not None  # called for a re-analysis only
    with timer("read rollouts"):
        rollouts = read_frame(cfg.from_rollouts, kind="rollouts")
        target_file = Path(cfg.target_from) if cfg.target_from else Path(cfg.from_rollouts).with_name("groups.parquet")
        if cfg.target == "success_rate" and "success" not in rollouts.columns:
            # checked here, before the measures run: success_rate is the mean of this column
            raise ValueError(
                f"--target success_rate needs a 'success' column in {cfg.from_rollouts} (a bool per "
                f"rollout); add it, or give --target-from GROUPS_FILE with the target column"
            )
        groups = None
        if target_file.exists():
            groups = read_frame(target_file, kind="groups")
            card["target_from"] = str(target_file)
        # success_rate is recomputed from the rollouts; any other target must come from a groups frame
        if cfg.target != "success_rate" and (groups is None or cfg.target not in groups.columns):
            raise ValueError(
                f"no {cfg.target!r} for these rollouts: give --target-from GROUPS_FILE with that "
                f"column, or --target success_rate"
            )
    grams_file = Path(cfg.from_rollouts).with_name("grams.parquet")
    grams = pd.read_parquet(grams_file) if grams_file.exists() else None
    if groups is None:
        return rollouts, pd.DataFrame({"query_id": rollouts["query_id"].unique()}), grams
    known = set(groups["query_id"])
    matched = [q for q in rollouts["query_id"].unique() if q in known]
    if not matched:
        raise ValueError(
            f"none of the {rollouts['query_id'].nunique()} query ids of {cfg.from_rollouts} "
            f"is in {target_file} (e.g. {rollouts['query_id'].iloc[0]!r} vs "
            f"{groups['query_id'].iloc[0]!r})"
        )
    unmatched = [q for q in rollouts["query_id"].unique() if q not in known]
    if unmatched:  # named as what they are, not later as "non-finite" targets
        card["unmatched_queries"] = len(unmatched)
        warnings.warn(
            f"{len(unmatched)} of the {rollouts['query_id'].nunique()} query ids of {cfg.from_rollouts} are not "
            f"in {target_file} (e.g. {unmatched[0]!r}): no {cfg.target}, left out of the study",
            stacklevel=2,
        )
        # dropped here, so the statistics do not report them again as rows with a non-finite target
        rollouts = rollouts[rollouts["query_id"].isin(known)].reset_index(drop=True)
    # Every column of the source groups frame is carried over (grad_norm2_mean, t_generate, ...):
    # a re-analysis adds what it computes and never drops what it did not.
    return rollouts, groups, grams


def _lipschitz_skip_reason(measures) -> str | None:
    """Why the Lipschitz check (and its embeddings sidecar) cannot run on these measures, or None.

    The check compares gradient distances with the distances of the measures' embeddings and
    within their semantic clusters; measures that need neither (``rd,token_entropy``) give the
    groups frame no ``n_clusters`` and the study nothing to compare with."""
    from ..measures.registry import MEASURE_REGISTRY
    from ..vocab import CLUSTERS, EMBEDDINGS

    provided = set().union(*(MEASURE_REGISTRY[m].needs for m in measures))
    missing = [need for need in (EMBEDDINGS, CLUSTERS) if need not in provided]
    if not missing:
        return None
    helpers = [name for name, m in MEASURE_REGISTRY.items() if set(missing) <= m.needs]
    return (
        f"the measures ({', '.join(measures)}) provide no {' and no '.join(missing)}; the check compares "
        f"gradient distances with the measures' embeddings and clusters"
        + (f" (adding {' or '.join(helpers)} to --measures runs it)" if helpers else "")
    )


def run_study(cfg: StudyConfig):
    """Run the whole study into ``cfg.output``; returns (groups frame, GapStudyResult)."""
    from ..measures.score import score_groups
    from ..stats.gap import gap_study

    measures = parse_measures(cfg.measures)
    if cfg.reference not in measures:
        raise ValueError(f"reference measure {cfg.reference!r} is not among the measures {measures}")
    out = Path(cfg.output)
    if cfg.from_rollouts:
        _check_reanalysis_output(cfg, out)
    out.mkdir(parents=True, exist_ok=True)
    timer = _Timer()
    card: dict = {"settings": asdict(cfg), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    t_start = time.perf_counter()

    if cfg.from_rollouts:
        rollouts, collected, grams = _from_rollouts(cfg, timer, card)
    else:
        rollouts, collected, grams = _collect(cfg, out, timer, card)
    if "token_entropy" in measures and "token_entropy" not in rollouts.columns:
        raise ValueError("measure 'token_entropy' needs the rollouts column 'token_entropy'")
    if cfg.from_rollouts is not None:  # a frame from elsewhere: its token_entropy/logprob may be tempered
        note_logprob_convention(rollouts, rollouts_columns(measures), card, cfg.from_rollouts)

    with timer("measures (embedding, clustering, scores)"):
        use_full = full_completion(None, cfg.dataset)  # the study has no setting of its own: auto
        scored = score_groups(
            rollouts,
            measures,
            embedder=cfg.embedder,
            judge=cfg.judge,
            nli_threshold=cfg.nli_threshold,
            use_full_completion=use_full,
            progress=True,
        )
        meta = scored.attrs.get("gcpo", {})
        scored.attrs = {}
        extra = [c for c in collected.columns if c == "query_id" or c not in scored.columns]
        groups = scored.merge(collected[extra], on="query_id", how="left")
        # V = N + C and the completion-length controls (issue 26), from the frames and Grams
        groups = with_covariates(groups, rollouts, grams, cfg.max_new_tokens)
        write_frame(rollouts, out / "rollouts.parquet")
        write_frame(groups, out / "groups.parquet")
        if grams is not None:  # the groups' Gram matrices K (docs/conventions.md, the gap study)
            write_frame(grams, out / "grams.parquet")
    card["judge"] = meta.get("judge")
    card["embedder"] = meta.get("embedder")
    card["measures_meta"] = meta

    with timer("statistics"):
        trim = int(cfg.trim) if cfg.trim >= 1 else cfg.trim
        result = gap_study(
            groups,
            measures=measures,
            target=cfg.target,
            reference=cfg.reference,
            trim=trim,
            n_boot=cfg.n_boot,
            k_folds=cfg.k_folds,
            seed=cfg.seed,
            name=cfg.dataset,
        )
        tables = out / "tables"
        result.save(tables)
        _write_paper_tables(result, tables, cfg.dataset)
        write_untrimmed(out, groups, {k: result.settings[k] for k in GAP_KEYS}, cfg.dataset)
        card["trim_note"] = write_v_tables(tables, groups, measures, trim, cfg.n_boot, cfg.seed)
    with timer("figures"):
        _draw_figures(result, out / "figures", cfg.dataset)
    skip = _lipschitz_skip_reason(measures) if grams is not None else None
    if skip is not None:  # said and recorded, never a crash after every V is computed (issue 38)
        warnings.warn(f"{out}: the Lipschitz check is skipped: {skip}", stacklevel=2)
        card["skipped_stages"] = [{"stage": "lipschitz", "reason": skip}]
    elif grams is not None:
        from .lipschitz import SIDECAR, embed_rollouts, write_embeddings
        from .lipschitz_checks import write_lipschitz_checks

        with timer("Lipschitz check (gradient vs embedding distances)"):
            # embedded and clustered once, kept as the sidecar so every number can be recomputed
            prepared = embed_rollouts(
                rollouts,
                embedder=cfg.embedder,
                judge=cfg.judge,
                use_full_completion=use_full,
                nli_threshold=cfg.nli_threshold,
            )
            write_embeddings(prepared, out / SIDECAR)
            lipschitz = write_lipschitz_checks(
                out, seed=cfg.seed, settings=asdict(cfg), rollouts=rollouts, grams=grams, prepared=prepared
            )
            card["lipschitz"] = lipschitz.attrs.get("lipschitz")

    card["timings_s"] = dict(timer.seconds, total=round(time.perf_counter() - t_start, 2))
    card["n_queries"] = int(len(groups))
    card["n_after_trim"] = int(result.n_queries)
    card.update(_card_statistics(result))
    card["versions"] = _versions()
    write_json(out / "run_card.json", card, default=_json_default)
    write_text(out / "summary.md", result.to_markdown())
    log.info("wrote %s/ (timings: %s)", out, card["timings_s"])
    return groups, result
