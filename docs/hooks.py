"""mkdocs hooks: the pages that are generated from the code and the committed files at build time.

Nothing here is typed by hand that the code or a committed file already says: the CLI page is
`gcpo ... --help`, the configuration page is `dataclasses.fields(...)` with each field's
``metadata["help"]``, the frame page is the column tuples of `gcpo_analysis.frames` and
the measure registry, the run pages include every committed table of `figures/<run>/`
with `pymdownx.snippets` (a missing file fails the strict build), and the proofs page is
`figures/proofs.json`. The notebooks and the figures' images are added from their folders outside
`docs/`, so they are rendered from where they live; mkdocs-jupyter executes each notebook at build
time (`execute: true` in mkdocs.yml), reading the committed folders under `figures/`, so the
site shows every notebook's tables and figures as they are today.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document the checkout being built, not another install of gcpo
sys.path.insert(0, str(Path(__file__).parent))
import study_numbers  # noqa: E402  (docs/study_numbers.py: the results pages' generated numbers)

NOTEBOOKS = (
    "notebooks/01_gap_study.ipynb",
    "notebooks/02_gap_proofs.ipynb",
    "notebooks/03_training_comparison.ipynb",
    "notebooks/04_update_alignment.ipynb",
    "notebooks/05_training_gradvar.ipynb",
)
# The notebooks executed at build time read the committed runs, never a local runs/ folder, and write
# their figures outside figures/ (each notebook's FIGURES_DIR default is under runs/).
NOTEBOOK_ENV = {"STUDY_DIR": "../figures/default_study"}
# The committed runs, in the order the results section lists them: folder -> page title.
RUNS = {
    "default_study": "NarrativeQA, default study (`gcpo study`)",
    "cpu_large": "NarrativeQA, cpu-large study (`gcpo study --preset cpu-large`)",
    "cpu_math": "ASDiv math study (`gcpo study --preset cpu-math`)",
    "train_gradvar": "Training run with `track_gradvar` (`configs/cpu_gradvar.yaml`)",
}
# argparse wraps --help at the terminal width; fix it so the page is stable and each line fits the
# page's code block without scrolling (80 columns of the site's monospace font at 1280 px).
CLI_COLUMNS = "80"


# --------------------------------------------------------------------------- files
def _outside_file(rel: str, config) -> File:
    """A file of the repository outside docs/, published at the same relative path."""
    return File(rel, src_dir=str(ROOT), dest_dir=config["site_dir"], use_directory_urls=config["use_directory_urls"])


@event_priority(100)  # before mkdocs-jupyter's on_files, so that it converts the notebooks added here
def on_files(files: Files, config) -> Files:
    for key, value in NOTEBOOK_ENV.items():  # the notebooks' kernels inherit this process's environment
        os.environ[key] = value
    for rel in NOTEBOOKS:
        files.append(_outside_file(rel, config))
    # every committed figure, so that any page can show one (from docs/results/: ../figures/...)
    for image in sorted((ROOT / "figures").rglob("*.png")):
        files.append(_outside_file(image.relative_to(ROOT).as_posix(), config))
    pages = {
        "reference/cli.md": cli_page(),
        "reference/config.md": config_page(),
        "reference/frames.md": frames_page(),
        "results/proofs.md": proofs_page(),
    }
    pages.update({f"results/runs/{run}.md": run_page(run, title) for run, title in RUNS.items()})
    for src_uri, content in pages.items():
        files.append(File.generated(config, src_uri, content=content))
    return files


# --------------------------------------------------------------------------- the tracker's numbers
# Some committed tables were written by tools that named the tracker's issue behind them (a title
# such as "What V is made of (issue N; our addition)", N a number). The files stay byte for byte as
# committed (tests regenerate them); the site, which speaks to users, drops the reference where a
# page includes them.
_ISSUE = r"issues? \d+(?:,? items? \d+)?"  # "issue N", "issue N, item K", "issue N item K"
ISSUE_REFERENCES = (  # in this order: "(issue N; our addition)" -> "(our addition)", "(issue N)" -> ""
    (re.compile(rf"\s*\({_ISSUE}(?:, {_ISSUE})*\)", re.IGNORECASE), ""),
    (re.compile(rf"\({_ISSUE}[;,] ", re.IGNORECASE), "("),
    (re.compile(rf"[;,]\s+{_ISSUE}\)", re.IGNORECASE), ")"),
    (re.compile(rf"{_ISSUE}; ", re.IGNORECASE), ""),
    (re.compile(r"\bissues? \d+'s\s+", re.IGNORECASE), lambda m: "The " if m.group(0)[0].isupper() else "the "),
    (re.compile(rf"\b{_ISSUE}:\s+", re.IGNORECASE), ""),
)


def drop_issue_references(text: str) -> str:
    for pattern, replacement in ISSUE_REFERENCES:
        text = pattern.sub(replacement, text)
    return text


# A notebook links a page as the repository holds it (../docs/results/training.md, what Jupyter and
# the forge open); on the site the notebook's page sits at notebooks/<name>/ and the page at results/training/.
NOTEBOOK_DOC_LINK = re.compile(r'href="\.\./docs/([^"#]+)\.md(#[^"]*)?"')


def on_post_page(output: str, page, config) -> str:
    """The whole page as written (its content, its table of contents, its title)."""
    if page.file.src_uri.endswith(".ipynb"):
        output = NOTEBOOK_DOC_LINK.sub(lambda m: f'href="../../{m.group(1)}/{m.group(2) or ""}"', output)
    return drop_issue_references(output)


# --------------------------------------------------------------------------- tables inside written pages
def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace each ``<!-- gcpo:NAME -->`` marker of a written page with the table it names."""
    for name, make in MARKERS.items():
        marker = f"<!-- gcpo:{name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return study_numbers.render(markdown)  # the studies' sentences, from their committed tables


def modulators_table() -> str:
    from gcpo_analysis.measures.modulators import MODULATORS

    rows = ["| name | method | reads | kind |", "|---|---|---|---|"]
    for name, m in MODULATORS.items():
        reads = ", ".join(f"`{n}`" for n in sorted(m.needs)) or "rewards only"
        kind = "group weight ω(q)" if m.weight is not None else f"per-rollout advantages ({m.no_weight})"
        rows.append(f"| `{name}` | {_cell(m.source)} | {reads} | {_cell(kind)} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- the CLI
def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_page() -> str:
    from gcpo_analysis.cli import build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = CLI_COLUMNS
    try:
        parser = build_parser()
        helps = [("", parser.format_help())]
        for name, sub in _subparsers(parser).items():  # and a command's own steps (gcpo compare publish, ...)
            helps += [(name, sub.format_help())]
            helps += [(f"{name} {step}", p.format_help()) for step, p in _subparsers(sub).items()]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    out = [
        "# The command line",
        "",
        "Generated at build time from `gcpo --help` and each subcommand's `--help` (`gcpo_analysis.cli.build_parser`).",
    ]
    for name, text in helps:
        out += [""] + ([f"## `gcpo {name}`", ""] if name else []) + ["```text", text.rstrip(), "```"]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- configuration
def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


_REQUIRED = object()


def _default_value(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _REQUIRED


def _default(f: dataclasses.Field) -> str:
    value = _default_value(f)
    return "required" if value is _REQUIRED else f"`{value!r}`"


def _type(f: dataclasses.Field) -> str:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", repr(f.type))
    return f"`{t}`"


def field_table(cls, skip: frozenset[str] = frozenset()) -> str:
    """One row per field of a config dataclass: name, type, default, help (its metadata)."""
    return "\n".join(["| field | type | default | help |", "|---|---|---|---|", *_field_rows(cls, skip, "")])


def _field_rows(cls, skip: frozenset[str], prefix: str) -> list[str]:
    """The rows of ``cls``'s fields; a field holding a config dataclass (settings nested in
    another config) is listed field by field, as ``outer.inner``."""
    rows = []
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        if "help" not in f.metadata:
            raise ValueError(f"{cls.__name__}.{f.name} has no metadata['help']: every config field needs one")
        value = _default_value(f)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            rows += _field_rows(type(value), frozenset(), f"{prefix}{f.name}.")
            continue
        from gcpo_analysis.knob import cli_help  # a registry's choices (datasets, modulators) as built

        rows.append(f"| `{prefix}{f.name}` | {_type(f)} | {_cell(_default(f))} | {_cell(cli_help(f))} |")
    return rows


def config_page() -> str:
    from trl import GRPOConfig

    from gcpo_analysis.study.config import StudyConfig
    from gcpo_train.config import TrainConfig
    from gcpo_train.trl import GCPOConfig

    trl_fields = frozenset(f.name for f in dataclasses.fields(GRPOConfig))
    return "\n".join(
        [
            "# Configuration fields",
            "",
            "Generated at build time from `dataclasses.fields(...)` and each field's"
            ' `metadata["help"]`: the defaults and help strings are the code\'s own.',
            "",
            "## `TrainConfig` (`gcpo train`, the YAML files in `configs/`)",
            "",
            field_table(TrainConfig),
            "",
            "## `GCPOConfig` (`GCPOTrainer`)",
            "",
            "`trl.GRPOConfig` plus the fields below; every other field is TRL's own"
            " (see TRL's `GRPOConfig` documentation).",
            "",
            field_table(GCPOConfig, skip=trl_fields),
            "",
            "## `StudyConfig` (`gcpo study`; each field is the flag of the same name)",
            "",
            field_table(StudyConfig),
            "",
        ]
    )


# --------------------------------------------------------------------------- frames
def frames_page() -> str:
    from gcpo_analysis import frames
    from gcpo_analysis.measures.registry import frame_order

    def cols(names) -> str:
        return ", ".join(f"`{c}`" for c in names)

    return "\n".join(
        [
            "# Frame schemas",
            "",
            "Generated at build time from the column tuples of `gcpo_analysis.frames` and"
            " the measure registry (`gcpo_analysis.measures.registry`); what each column means is in"
            " [the conventions](../conventions.md#the-frames).",
            "",
            "| frame | columns | where |",
            "|---|---|---|",
            f"| rollouts, required | {cols(frames.ROLLOUT_REQUIRED)} | `frames.ROLLOUT_REQUIRED` |",
            f"| rollouts, numeric (checked finite) | {cols(frames.ROLLOUT_NUMERIC)} | `frames.ROLLOUT_NUMERIC` |",
            f"| rollouts, the policy's own (π_θ at temperature 1) | {cols(frames.POLICY_COLUMNS)}"
            " | `frames.POLICY_COLUMNS` |",
            f"| rollouts, written by the trainer | {cols(frames.TRAINER_COLUMNS)} | `frames.TRAINER_COLUMNS` |",
            f"| groups, required | {cols(frames.GROUP_REQUIRED)} | `frames.GROUP_REQUIRED` |",
            f"| groups, measure columns as `gcpo score` orders them | {cols(frame_order())}"
            " | `measures.registry.frame_order()` |",
            "",
            "## Reading and validating frames",
            "",
            "::: gcpo_analysis.frames",
            "    options:",
            "      show_root_heading: false",
            "      members: [read_frame, read_table, validate_rollouts, validate_groups, map_rollout_columns,"
            " write_frame, FrameError]",
            "",
        ]
    )


# --------------------------------------------------------------------------- results
def proofs_page() -> str:
    blob = json.loads((ROOT / "figures" / "proofs.json").read_text())
    keys = ["claim", "holds", "worst_violation", "worst_ratio", "median"]
    rows = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for claim in blob["claims"]:
        rows.append("| " + " | ".join(_cell(_fmt(claim.get(k))) for k in keys) + " |")
    settings = ", ".join(f"{k} = {v}" for k, v in blob["settings"].items())
    return "\n".join(
        [
            "# The propositions, checked numerically",
            "",
            "`gcpo proofs --json figures/proofs.json` wrote the committed file this table is generated"
            " from at build time (a test checks that the command still writes it). The notebook"
            " [the propositions and the two gaps](../notebooks/02_gap_proofs.ipynb) runs the same checks.",
            "",
            f"Settings: {settings}.",
            "",
            *rows,
            "",
        ]
    )


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else str(value)


def run_page(run: str, title: str) -> str:
    folder = ROOT / "figures" / run
    card = json.loads((folder / "run_card.json").read_text())
    settings = card.get("settings", card.get("config", {}))
    rows = ["| setting | value |", "|---|---|"]
    rows += [f"| `{k}` | {_cell(json.dumps(v))} |" for k, v in settings.items() if v is not None]
    out = [
        f"# {title}",
        "",
        f"Generated at build time from the committed folder `figures/{run}/`: the settings of its"
        " `run_card.json`, every table in `tables/` (included from the committed files, never"
        " retyped) and every figure.",
        "",
        "## Settings",
        "",
        *rows,
    ]
    for md in sorted((folder / "tables").rglob("*.md")):
        rel = md.relative_to(ROOT).as_posix()
        first = md.read_text(encoding="utf-8").split("\n", 1)[0]
        if first.startswith("#"):  # the table's own title: this page's heading stands for it
            out += ["", f"## `{md.relative_to(folder / 'tables').as_posix()}`: {first.lstrip('# ')}", ""]
            out.append(f'--8<-- "{rel}:2"')  # from line 2
        else:
            out += ["", f"## `{md.relative_to(folder / 'tables').as_posix()}`", "", f'--8<-- "{rel}"']
    for png in sorted(folder.rglob("*.png")):
        rel = png.relative_to(ROOT).as_posix()
        out += ["", f"## Figure `{png.relative_to(folder).as_posix()}`", "", f"![{png.stem}](../../{rel})"]
    return "\n".join(out) + "\n"


MARKERS = {"modulators": modulators_table}
