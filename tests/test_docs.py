"""The documentation says what the code does: the generated reference matches the code, the
architecture map names every package and only paths that exist, and every link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalgate.cli import _reference

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PACKAGE = REPO / "evalgate"
MAP_SECTIONS = ("## The loop", "## Packages, one job each")


@pytest.mark.parametrize("name", sorted(_reference.pages()))
def test_reference_pages_are_generated_from_the_code(name: str) -> None:
    path = DOCS / "reference" / name
    fresh = _reference.pages()[name]
    committed = path.read_text(encoding="utf-8") if path.exists() else ""
    assert committed == fresh, (
        f"{path.relative_to(REPO)} is out of date with the code; regenerate it from the repository "
        f"root with `{_reference.COMMAND}`"
    )


def test_reference_names_every_compare_flag_and_config_key() -> None:
    from evalgate.cli._flags import flag_name
    from evalgate.config import ClientConfig, LlamaCppConfig, SGLangConfig, VariantConfig, VLLMConfig
    from evalgate.request import CompareRequest

    cli = _reference.cli_reference()
    for name, info in CompareRequest.model_fields.items():
        assert f"`{flag_name(name, info)}" in cli, name
    config = _reference.config_reference()
    for model in (LlamaCppConfig, SGLangConfig, VLLMConfig, ClientConfig, VariantConfig):
        for key in model.model_fields:
            assert f"| `{key}` |" in config, (model.__name__, key)


def _map() -> str:
    """ARCHITECTURE.md's map: the loop and the package table (not the rules, which cite code)."""
    text = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")
    parts = []
    for title in MAP_SECTIONS:
        start = text.index(title)
        end = text.find("\n## ", start + len(title))
        parts.append(text[start : end if end != -1 else len(text)])
    return "\n".join(parts)


def _named_paths(text: str) -> set[str]:
    """Paths the map names: code spans and the loop's first column ending in ``/`` or ``.py``."""
    spans = re.findall(r"`([\w./]+(?:/|\.py))`", text)
    loop = re.findall(r"^ {2}([\w./]+(?:/|\.py)) ", text, re.M)
    return set(spans) | set(loop)


def test_architecture_map_names_every_package_and_top_level_module() -> None:
    named = _named_paths(_map())
    packages = {f"{p.parent.relative_to(PACKAGE).as_posix()}/" for p in PACKAGE.glob("*/__init__.py")}
    packages |= {
        f"{p.parent.relative_to(PACKAGE).as_posix()}/" for p in PACKAGE.glob("engines/*/__init__.py")
    }
    modules = {p.name for p in PACKAGE.glob("*.py") if not p.name.startswith("__")}
    missing = sorted((packages | modules) - named)
    assert not missing, f"docs/ARCHITECTURE.md's map does not name {missing}: add each to the package table"


def test_every_path_the_architecture_map_names_exists() -> None:
    gone = sorted(p for p in _named_paths(_map()) if not ((PACKAGE / p).exists() or (REPO / p).exists()))
    assert not gone, f"docs/ARCHITECTURE.md's map names paths that do not exist: {gone}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


DOC_FILES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(doc: Path) -> None:
    """A moved section must not leave a link to where it was (README anchors above all)."""
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{doc.relative_to(REPO)}: links that lead nowhere: {broken}"


def test_readme_is_short_and_the_rest_is_indexed() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, "the README holds the essentials; move detail into docs/"
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if p.parent.name != "schemas"}
    unlisted = sorted(p for p in pages - {"README.md"} if f"]({p})" not in index)
    assert not unlisted, f"docs/README.md does not list {unlisted}"
