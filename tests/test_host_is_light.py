"""The host side stays light and one-directional: it never imports torch, and no module of the kit
imports another that imports it back."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "reprokit"


def test_the_kit_and_its_tasks_do_not_import_torch():
    code = (
        "import sys; sys.path.insert(0, '.');"
        "import tasks, reprokit.cli.main, reprokit.run.session, reprokit.collect.collect, reprokit.report.report, reprokit.images;"
        "import reprokit.run.runtimes.local, reprokit.run.runtimes.slurm;"
        "import reprokit.run.containers.none, reprokit.run.containers.docker, reprokit.run.containers.pyxis, reprokit.run.containers.apptainer;"
        "bad = [m for m in ('torch', 'transformers', 'timm', 'reprokit_trainers') if m in sys.modules]; print(bad); assert not bad"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every kit module `path` imports, at module level or inside a function, type-checking ones too."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {t for t in targets if t in modules}
    found.discard(name)
    return found


def test_no_module_of_the_kit_imports_one_that_imports_it_back():
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(f) for f in files}
    graph = {_module_name(f): _imports(f, modules) for f in files}
    # A package's __init__ that only names its own modules is how a package is read, not a circle.
    for name in modules:
        graph[name] = {t for t in graph[name] if not (name.startswith(t + ".") or t.startswith(name + "."))}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            current = todo.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                todo.extend(graph.get(current, ()))
        return False

    circles = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if reaches(b, a)})
    assert not circles, f"modules that import each other (directly or through others): {circles}"
