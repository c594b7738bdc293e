"""The trainers package (reprokit_trainers) as the host knows it: where it lives on this machine (to
run it or to put it into an image; the host never imports it: the trainers import torch), its trainers
(the shared package's own and those in publication folders, recipes/<recipe>/<name>/, which the package
adds to its path: reprokit_trainers/__init__.py), and the run-directory contract it owns
(reprokit_trainers/contract.json, and summary.schema.json beside it, with the check both sides type a
summary with), which the host loads."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

from reprokit.contract import layout
from reprokit.contract.errors import ReprokitError

PACKAGE = "reprokit_trainers"


def package_dir() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ReprokitError(
            f"the trainers package {PACKAGE} is not installed with the kit (reinstall reprokit)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def search_path() -> str:
    """What run.sh puts first on PYTHONPATH: REPROKIT_TRAINERS_PATH (a trainer under development,
    the tests' fakes) before the folder that holds the kit's own trainers."""
    kit = str(package_dir().parent)
    given = os.environ.get("REPROKIT_TRAINERS_PATH")
    return f"{given}{os.pathsep}{kit}" if given else kit


def source_folders() -> list[Path]:
    """The folders of trainer code on that path: REPROKIT_TRAINERS_PATH's, the kit's trainers package
    (not the folder around it, which in an installed kit is all of site-packages) and the trainer
    packages of the publication folders."""
    given = os.environ.get("REPROKIT_TRAINERS_PATH", "")
    return [*(Path(p) for p in given.split(os.pathsep) if p), package_dir(), *publication_packages().values()]


def publication_packages() -> dict[str, Path]:
    """The trainer packages that publication folders hold (recipes/<recipe>/<name>/, with its
    `__init__.py` and `arguments.json`), by name: what reprokit_trainers/__init__.py adds to the
    package's path, found by the same rule (the image and the node's bundle copy them in, flat)."""
    found: dict[str, Path] = {}
    for schema in sorted(layout.RECIPES.glob("*/*/arguments.json")):
        package = schema.parent
        if (package / "__init__.py").is_file():
            found.setdefault(package.name, package)
    return found


def package_folder(name: str) -> Path:
    """Where the kit's trainer `name` is: its publication folder's package, else the shared package's."""
    return publication_packages().get(name) or package_dir() / name


@cache
def _summary_checker() -> Any:
    """The trainers' own stdlib-only check of a summary (reprokit_trainers/common/record/summaryschema.py),
    loaded from its file: one implementation on both sides, and nothing of the trainers' package (which
    imports torch) runs on the host."""
    path = package_dir() / "common" / "record" / "summaryschema.py"
    spec = importlib.util.spec_from_file_location("reprokit_summary_schema", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def summary_schema() -> dict[str, Any]:
    """summary.json's fields, typed (the contract's summary_schema, which the trainers own)."""
    return json.loads((package_dir() / contract()["summary_schema"]).read_text())


def summary_problem(summary: Any) -> str | None:
    """What is wrong with a summary.json under the schema, in one line naming the field; None when it
    conforms, or when it was written before the schema (contract version 3 or older: read as then)."""
    checker = _summary_checker()
    return checker.problem(summary, summary_schema()) if checker.typed(summary) else None


@cache
def contract() -> dict[str, Any]:
    """The run-directory contract: schema version, file names, definitions, departure kinds, software keys."""
    return json.loads((package_dir() / "contract.json").read_text())


def kit_trainers() -> list[str]:
    """The kit's own trainers: the packages of reprokit_trainers that `python -m` runs with a schema of
    their arguments (the package's other commands, a device check or a rehearsal, train nothing), in
    the shared package or in a publication's folder."""
    shared = [
        p.parent for p in package_dir().glob("*/__main__.py") if (p.parent / "arguments.json").is_file()
    ]
    published = [p for p in publication_packages().values() if (p / "__main__.py").is_file()]
    return sorted({p.name for p in [*shared, *published]})


def locate(module: str) -> Path | None:
    """Where `python -m module` would find `module` on this machine, found without importing it (the
    trainers import torch): REPROKIT_TRAINERS_PATH, the kit's trainers, then this Python's path, as
    run.sh orders them. None where it is not there."""
    parts = module.split(".")
    roots = [p for p in search_path().split(os.pathsep) if p] + [p or "." for p in sys.path]
    candidates = [Path(root).joinpath(*parts) for root in roots]
    if parts[0] == PACKAGE and len(parts) > 1 and parts[1] in publication_packages():
        # The package's path goes on into the publication folders (reprokit_trainers/__init__.py).
        candidates.append(publication_packages()[parts[1]].joinpath(*parts[2:]))
    for candidate in candidates:
        if (candidate / "__main__.py").is_file():
            return candidate / "__main__.py"
        if candidate.with_suffix(".py").is_file():
            return candidate.with_suffix(".py")
    return None
