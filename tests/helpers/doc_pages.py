"""The user-facing text whose quoted numbers the integration tests hold to the committed files:
README.md and every written page of the docs site (docs/**/*.md). A number may move between
them; wherever it is, it is checked."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def doc_pages() -> dict[str, str]:
    """{path relative to the repo: text} of README.md and every docs/**/*.md page."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def quoted_text() -> str:
    """Every page of ``doc_pages`` with its whitespace collapsed, one page after another: where a
    sentence that quotes a number is searched for wherever it is (README.md or a docs page)."""
    return "\n\n".join(" ".join(text.split()) for text in doc_pages().values())
