"""The host's folders stand on floors, each importing only those under it: a request goes up through the
stages once (contract -> plan -> render -> images -> run -> judge -> collect -> report -> preflight ->
pipeline -> cli) and never comes back down a folder it left. Read from the source (ast), nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "reprokit"
# One place for the order (ARCHITECTURE.md draws it). A part of the package not named here is refused,
# so a new folder is placed on purpose. `reprokit` itself: the package's __init__ (its version).
FLOORS = {
    "reprokit": 0,
    "contract": 0,
    "schemas": 0,
    "plan": 1,
    "render": 2,
    "images": 3,
    "run": 4,
    # The rules of judging stand under collect: collect judges each row as it writes it (results.csv
    # carries the verdicts), and the row type carries them.
    "judge": 5,
    "collect": 6,
    "report": 7,
    "preflight": 8,
    "pipeline": 9,
    "fleet": 9,
    "barenode": 9,
    "cli": 10,
    "__main__": 11,
}


def part(module: str) -> str:
    """The floor's name of a dotted module inside the package (reprokit.run.session -> run)."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[1] not in {"__version__", "DISTRIBUTION"} else "reprokit"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[dotted.removesuffix(".__init__")] = path
    return found


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every import of the kit in a file, inside functions too."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return [(line, name) for line, name in names if name.split(".")[0] == "reprokit"]


def backward_edges(found: dict[str, Path], root: Path = ROOT) -> list[str]:
    edges = []
    for module, path in found.items():
        here = part(module)
        for line, name in imported(path):
            there = part(name)
            if FLOORS[there] > FLOORS[here] or (FLOORS[there] == FLOORS[here] > 0 and there != here):
                edges.append(
                    f"{path.relative_to(root)}:{line}: {here} imports {name} ({there} is not under it)"
                )
    return edges


def test_every_part_of_the_package_has_a_floor():
    unplaced = sorted({part(m) for m in modules()} - set(FLOORS))
    assert not unplaced, f"give each a floor in FLOORS: {unplaced}"


def test_no_folder_imports_one_above_it_or_beside_it():
    assert not backward_edges(modules()), "\n".join(backward_edges(modules()))


@pytest.mark.parametrize(
    ("importer", "statement", "name"),
    [
        ("plan/planner.py", "from reprokit.run import runtimes", "reprokit.run.runtimes"),  # the edge removed
        ("collect/collect.py", "def f():\n    from reprokit.pipeline import run", "reprokit.pipeline.run"),
        ("judge/verdicts.py", "from reprokit.collect import collect", "reprokit.collect.collect"),
        ("collect/collect.py", "from reprokit.report import report", "reprokit.report.report"),
        ("render/templates.py", "from reprokit.images import context", "reprokit.images.context"),
        ("images/context.py", "from reprokit.run import supervise", "reprokit.run.supervise"),
        ("contract/errors.py", "import reprokit.cli.tasks", "reprokit.cli.tasks"),
        ("run/supervise.py", "from reprokit.report import terminal", "reprokit.report.terminal"),
        ("pipeline.py", "from reprokit.barenode import runner", "reprokit.barenode.runner"),  # beside it
    ],
)
def test_an_edge_that_runs_back_is_named_with_its_file_and_line(tmp_path, importer, statement, name):
    # The check itself, on a copy of one module given a backward import (in a function body too).
    copy = tmp_path / "reprokit" / importer
    copy.parent.mkdir(parents=True, exist_ok=True)
    text = (PACKAGE / importer).read_text() + "\n" + statement + "\n"
    copy.write_text(text)
    dotted = ".".join(Path("reprokit", importer).with_suffix("").parts).removesuffix(".__init__")
    line = len(text.splitlines())  # the import: the statement's last line
    assert backward_edges({dotted: copy}, tmp_path) == [
        f"reprokit/{importer}:{line}: {part(dotted)} imports {name} ({part(name)} is not under it)"
    ]


# A host module owns one thing: one that grows past this is split by what it holds (CONTRIBUTING.md).
MODULE_LINES = 350


def test_no_host_module_is_over_350_lines():
    over = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MODULE_LINES
    }
    assert over == {}, f"split these by what they hold: {over}"
