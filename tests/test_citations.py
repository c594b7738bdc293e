"""Every citation resolves: a recipe, a trainer or a rendered script that says `recipes/<name>/SOURCES.md
§N` points at a section its publication's folder has (each folder's SOURCES.md ships with the kit;
recipes/SOURCES.md says how figures are stated, and has no sections of its own)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from reprokit.plan import recipes
from tests.conftest import ROOT, run_inv

CITATION = re.compile(r"(\S*)SOURCES\.md((?: §\d+)(?:, §\d+)*)?")
# The folder a citation names: recipes/ or a publication's recipes/<name>/ (`<name>`: any publication's,
# said in general, never with a section).
CITED_FOLDER = re.compile(r"recipes/(?:[\w.-]+/|<name>/)?$")


def _sections(folder: str) -> set[str] | None:
    """The sections of `folder`/SOURCES.md (None where the folder has none)."""
    path = ROOT / folder / "SOURCES.md"
    return set(re.findall(r"^## (\d+)\. ", path.read_text(), flags=re.MULTILINE)) if path.is_file() else None


def _unresolved(text: str) -> list[str]:
    wrong = []
    for match in CITATION.finditer(text):
        folder = CITED_FOLDER.search(match.group(1))
        cited = re.findall(r"§(\d+)", match.group(2) or "")
        if folder and folder.group(0) == "recipes/<name>/" and not cited:
            continue
        sections = _sections(folder.group(0)) if folder else None
        if sections is None or not set(cited) <= sections:
            wrong.append(match.group(0))
    return wrong


def _with_relative_links(path: Path, text: str) -> str:
    """Beside a SOURCES.md, a bare name is a relative link to it."""
    if not (path.parent / "SOURCES.md").is_file():
        return text
    here = path.parent.relative_to(ROOT).as_posix()
    return text.replace("](SOURCES.md", f"]({here}/SOURCES.md").replace(
        "[SOURCES.md]", f"[{here}/SOURCES.md]"
    )


def test_every_citation_in_the_repository_names_a_section_of_its_publications_sources():
    found = {}
    for folder in ("recipes", "scripts", "reprokit", "docker"):
        for path in (ROOT / folder).rglob("*"):
            if (
                path.is_file()
                and path.suffix in (".py", ".yaml", ".md", ".json", ".j2")
                and path.name != "SOURCES.md"
            ):
                wrong = _unresolved(_with_relative_links(path, path.read_text()))
                if wrong:
                    found[str(path.relative_to(ROOT))] = wrong
    assert found == {}
    assert _sections("recipes") == set()


def test_each_kit_publication_cites_the_sources_in_its_own_folder():
    for name in recipes.available():
        path = recipes.resolve_path(name)
        source = yaml.safe_load(path.read_text())["publication"]["source"]
        assert source.startswith(f"recipes/{path.parent.name}/SOURCES.md §"), (name, source)
        assert _sections(f"recipes/{path.parent.name}"), name


def test_every_citation_in_the_rendered_scripts_resolves(tmp_path):
    for recipe in recipes.available():
        for runtime in ("local", "slurm"):
            result = run_inv(
                "render",
                recipe,
                "--accelerator",
                "cuda",
                "--runtime",
                runtime,
                "--out",
                str(tmp_path / runtime),
            )
            assert result.returncode == 0, result.stderr
    scripts = [p for p in tmp_path.rglob("*") if p.name in ("run.sh", "sbatch.sh", "cell.json")]
    assert scripts
    assert {str(p): _unresolved(p.read_text()) for p in scripts if _unresolved(p.read_text())} == {}
    assert any(re.search(r"recipes/[\w.-]+/SOURCES\.md §", p.read_text()) for p in scripts)
