"""What a golden generator's side environment must hold, and what it held.

Each generator (make_*_golden.py) documents its environment as one install line in its docstring,
``python -m venv side && side/bin/pip install ...``, and records in its fixture the distributions
its run loaded that nothing else loaded asks for (``loaded_roots``): those the line must name, or
the line as written would not make a working environment (a pycls import that needs submitit, a
Trainer that needs accelerate). tests/test_generators.py holds the lines to both. Standard library
only: the generators import it in their side environments.
"""

from __future__ import annotations

import re
import shlex
import sys
from importlib import metadata

# Come with a virtual environment: never named on an install line.
WITH_THE_VENV = {"pip", "setuptools", "wheel"}


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def install_line(docstring: str) -> list[str]:
    """The requirements of the docstring's one ``side/bin/pip install`` line, as written."""
    lines = [line for line in docstring.splitlines() if "bin/pip install" in line]
    if len(lines) != 1:
        raise ValueError(f"expected one 'side/bin/pip install' line, found {len(lines)}")
    words = shlex.split(lines[0].split("bin/pip install", 1)[1].split("#", 1)[0])
    return [w for w in words if not w.startswith("-")]


def named(requirements: list[str]) -> set[str]:
    """The distributions an install line names (versions and extras dropped)."""
    return {canonical(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]) for r in requirements}


def loaded_roots() -> list[str]:
    """The distributions of the modules loaded in this process that no other loaded distribution
    requires: what an install line must name for this run to work."""
    owners = metadata.packages_distributions()
    loaded = set()
    for name, module in list(sys.modules.items()):
        # A package vendored inside another (setuptools' _vendor folder, which pkg_resources puts on
        # sys.path) comes with that one.
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", []) or []), "")
        if "_vendor" in str(where):
            continue
        for owner in owners.get(name.split(".", 1)[0], ()):
            loaded.add(canonical(owner))
    # What the loaded distributions require, and what each extra they ask for requires in turn
    # (datasets' fsspec[http] brings aiohttp): a worklist of (distribution, extra or None).
    required: set[str] = set()
    todo = [(name, None) for name in loaded]
    seen: set[tuple[str, str | None]] = set()
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            asked = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
            if (asked.group(1) if asked else None) != extra:
                continue
            wanted = canonical(re.split(r"[<>=!~\[; (]", requirement, maxsplit=1)[0])
            required.add(wanted)
            extras = re.match(r"[^\[;]*\[([^\]]*)\]", requirement)
            for each in extras.group(1).split(",") if extras else []:
                todo.append((wanted, canonical(each.strip())))
    return sorted(loaded - required - WITH_THE_VENV)
