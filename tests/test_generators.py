"""The golden generators run as written: each one's documented install line names every distribution
the generator imports and every one its run loaded that nothing else pulls in (recorded in its
fixture when it was made), so a side environment made from the line alone regenerates the fixture."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests import conformance
from tests.conformance import environment

SHARED = Path(conformance.__file__).parent
# Each publication's generator (recipes/<name>/conformance/make_<trainer>_golden.py) beside its fixture.
GENERATORS = {p.name: p for f in conformance.folders() for p in f.glob("make_*_golden.py")}
# Modules whose distribution has another name.
DISTRIBUTION = {"cv2": "opencv-python-headless", "yaml": "pyyaml", "PIL": "pillow", "sklearn": "scikit-learn"}


def local(path: Path) -> set[str]:
    """The modules a generator takes from the checkout: its folder's, the shared helpers, the tests."""
    return {p.stem for folder in (path.parent, SHARED) for p in folder.glob("*.py")} | {"tests"}


def imported_modules(path: Path) -> set[str]:
    """The top-level modules a generator imports anywhere (functions and workers included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def upstream_modules(path: Path) -> set[str]:
    """The modules of the upstream checkouts the generator imports (its UPSTREAM_MODULES)."""
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "UPSTREAM_MODULES" for t in targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{path.name} names no UPSTREAM_MODULES")


def documented(path: Path) -> set[str]:
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    return environment.named(environment.install_line(docstring))


def test_every_publications_golden_fixture_has_its_generator_beside_it():
    fixtures = conformance.goldens()
    assert fixtures, "no publication folder holds a golden fixture"
    assert {f"make_{trainer}_golden.py" for trainer in fixtures} == set(GENERATORS)


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_a_generators_install_line_names_every_distribution_it_imports(generator):
    path = GENERATORS[generator]
    third_party = imported_modules(path) - set(sys.stdlib_module_names) - local(path) - upstream_modules(path)
    needed = {environment.canonical(DISTRIBUTION.get(module, module)) for module in third_party}
    missing = needed - documented(path)
    assert not missing, f"{generator}'s install line does not name {sorted(missing)}"


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_a_generators_install_line_names_what_its_run_loaded_that_nothing_else_pulls_in(generator):
    path = GENERATORS[generator]
    recorded = json.loads((path.parent / f"{path.stem.removeprefix('make_')}.json").read_text())
    # Where the fixture records what the run loaded (its `made_with` or `made_by`).
    (made,) = [recorded[key] for key in ("made_with", "made_by") if key in recorded]
    missing = set(made["loaded_roots"]) - documented(path)
    assert not missing, f"{generator}'s run loaded {sorted(missing)}, which its install line does not name"


def test_the_install_line_is_read_as_pip_reads_it():
    line = 'python -m venv side && side/bin/pip install torch "timm==0.4.5" "numpy<1.24" PyYAML -q  # why'
    assert environment.named(environment.install_line(line)) == {"torch", "timm", "numpy", "pyyaml"}
    with pytest.raises(ValueError, match="one 'side/bin/pip install' line"):
        environment.install_line("no line here")


def test_the_roots_of_a_run_leave_out_what_a_loaded_distribution_requires(monkeypatch):
    spec = importlib.util.find_spec("transformers")
    if spec is None:
        pytest.skip("transformers is not installed")
    import transformers  # noqa: F401  (loads tokenizers, huggingface-hub, ...: all its requirements)

    roots = environment.loaded_roots()
    assert "transformers" in roots and "tokenizers" not in roots and "huggingface-hub" not in roots


def test_the_roots_of_a_run_leave_out_what_an_extra_a_loaded_distribution_asks_for_requires():
    # datasets requires fsspec[http], whose extra brings aiohttp: a side environment made from a line
    # naming datasets has it, so the line need not name it.
    pytest.importorskip("datasets")
    pytest.importorskip("aiohttp")
    import aiohttp  # noqa: F401
    import datasets  # noqa: F401

    roots = environment.loaded_roots()
    assert "datasets" in roots and "aiohttp" not in roots and "fsspec" not in roots
