"""A stand-in for the bare GPU node's Python, for the tests: a fresh venv holding only the node's
package list (reprokit/barenode/node.yaml) as far as it can be had here.

- This machine's Python (3.11) stands in for the node's 3.12, and the bundle is made for it.
- The node's packages and what they need are linked from the kit's own environment (this Python's
  site-packages), so torch is this machine's 2.14.1 (CPU run, CUDA build) standing in for the node's
  2.11: a second torch would be a multi-GB download. Its pip is linked the same way (a node has one;
  ensurepip would cost 3 CPU-s a venv).
- transformers, tokenizers and huggingface-hub are installed from PyPI at the node's own versions
  (5.17, 0.23, 1.33): what the bundle's transformers 4.49 must win over.
- What the node lacks (node.yaml `lacks`: invoke, pydantic, datasets, ...) is not there, even where
  the newer packages' requirements would bring it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from reprokit.barenode.node import canonical, load_node

# Installed from PyPI at the node's versions instead of linked (the kit's environment holds the kit's).
FROM_PYPI = ("transformers", "tokenizers", "huggingface-hub")


def _closure(roots: list[str], lacks: set[str]) -> list[metadata.Distribution]:
    """The distributions of this Python reachable from `roots` by their requirements (no extras)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = canonical(todo.pop())
        if name in found or name in lacks or name in FROM_PYPI:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[name] = dist
        for text in dist.requires or []:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values())


def _top_levels(dist: metadata.Distribution) -> set[str]:
    tops = set()
    for item in dist.files or []:
        first = item.parts[0]
        if first not in ("..", "__pycache__") and not first.endswith(".pth"):
            tops.add(first)
    return tops


def make(venv: Path) -> Path:
    """The stand-in node's python (venv/bin/python)."""
    node = load_node()
    lacks = {canonical(n) for n in node.lacks}
    # No ensurepip: pip is linked in below with the node's packages.
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    for dist in [*_closure(list(node.packages), lacks), metadata.distribution("pip")]:
        where = Path(str(dist.locate_file("")))
        for top in _top_levels(dist):
            source, target = where / top, site / top
            if source.exists() and not target.exists():
                target.symlink_to(source)
    pins = []
    for name in FROM_PYPI:
        version = node.packages[name]
        pins.append(f"{name}=={version}" if version else name)
    subprocess.run(
        # No bytecode: the stand-in's transformers is what the bundle's must win over; the tests import
        # no more of it than its version, and compiling all of it was most of this venv's 10 CPU-s.
        [str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check", *pins],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    # What the newer packages' requirements brought that the node lacks (typer's pydantic): removed.
    for entry in list(site.iterdir()):
        match = re.match(r"(.+?)-\d[^-]*\.dist-info$", entry.name)
        if match and canonical(match.group(1)) in lacks and not entry.is_symlink():
            subprocess.run(
                [str(python), "-m", "pip", "uninstall", "--quiet", "-y", match.group(1)],
                check=True, capture_output=True,
            )  # fmt: skip
    return python


def without_pip(venv: Path) -> None:
    """The stand-in node with no pip (the bootstrap unpacks the wheels itself)."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    for entry in site.glob("pip*"):
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
