"""Every citation resolves: a recipe, a trainer or a rendered script that says `recipes/SOURCES.md §N`
points at a section the repository has (recipes/SOURCES.md ships with the kit)."""

from __future__ import annotations

import re

from tests.conftest import ROOT, run_inv

CITATION = re.compile(r"(\S*)SOURCES\.md(?: §(\d+))?")


def _sections() -> set[str]:
    text = (ROOT / "recipes" / "SOURCES.md").read_text()
    return set(re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE))


def _unresolved(text: str) -> list[str]:
    sections = _sections()
    return [
        match.group(0)
        for match in CITATION.finditer(text)
        if not match.group(1).endswith("recipes/") or (match.group(2) and match.group(2) not in sections)
    ]


def test_every_citation_in_the_repository_names_a_section_of_recipes_sources():
    found = {}
    for folder in ("recipes", "scripts", "reprokit", "docker"):
        for path in (ROOT / folder).rglob("*"):
            if (
                path.is_file()
                and path.suffix in (".py", ".yaml", ".md", ".json", ".j2")
                and path.name != "SOURCES.md"
            ):
                text = path.read_text()
                if path.parent == ROOT / "recipes":  # beside SOURCES.md, a bare name is a relative link
                    text = text.replace("](SOURCES.md", "](recipes/SOURCES.md").replace(
                        "[SOURCES.md]", "[recipes/SOURCES.md]"
                    )
                wrong = _unresolved(text)
                if wrong:
                    found[str(path.relative_to(ROOT))] = wrong
    assert found == {}
    assert _sections() == {"1", "2", "3", "4", "5"}


def test_every_citation_in_the_rendered_scripts_resolves(tmp_path):
    for recipe in ("bridgetower", "volo", "vit-speedups"):
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
    assert any("recipes/SOURCES.md §" in p.read_text() for p in scripts)
