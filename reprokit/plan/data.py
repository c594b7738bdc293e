"""Real data: `--data KEY=PATH` names a recipe's data on this machine (or the cluster's storage).

Each recipe declares its keys (dataset.data: the trainer argument a path fills and its layout). A
path is checked for that layout before anything starts, reaches the trainer as its argument,
is mounted read-only at the same path into any container, and is recorded in cell.json and the
results.
"""

from __future__ import annotations

import os
from pathlib import Path

from reprokit.contract.errors import ReprokitError
from reprokit.plan.recipes import DataKey, Recipe

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
LAYOUTS = {
    "imagenet": "<root>/train/<class>/<image>.JPEG",
    "token_labels": "<root>/<class>/<image>.pt",
    "folder": "a folder",
}


def parse(items: list[str]) -> dict[str, str]:
    """KEY=PATH strings (repeatable flags) as a mapping; one line for a malformed one."""
    found: dict[str, str] = {}
    for item in items:
        key, sep, path = item.partition("=")
        if not sep or not key or not path:
            raise ReprokitError(f"--data {item}: give KEY=PATH, e.g. --data imagenet=/datasets/imagenet")
        found[key.strip()] = path.strip()
    return found


def _first(folder: Path, pattern) -> Path | None:
    for entry in sorted(folder.iterdir()):
        if pattern(entry):
            return entry
    return None


def unreadable(where: str, folder: Path) -> None:
    """Refuse a class folder of `folder` that cannot be read (a link to nothing, no permission): the
    trainer would leave its class out, and train on less than was given."""
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.is_symlink() and not entry.is_dir():
            raise ReprokitError(
                f"{where}: class folder {entry.path} is a link to {os.readlink(entry.path)}, which is not a "
                "folder: every class of the given data must be readable (a class left out is not the data "
                "given); fix or remove the link"
            )
        if entry.is_dir() and not os.access(entry.path, os.R_OK | os.X_OK):
            raise ReprokitError(
                f"{where}: class folder {entry.path} cannot be read (no permission): every class of the given "
                "data must be readable"
            )


def check(key: str, spec: DataKey, given: str) -> str:
    """The absolute path of `given` once it has the layout `spec` expects; else one line saying what is wrong."""
    path = Path(given).expanduser().resolve()
    where = f"--data {key}={given}"
    if not path.is_dir():
        raise ReprokitError(f"{where}: no such folder")
    if spec.layout == "imagenet":
        train = path / "train"
        if not train.is_dir():
            raise ReprokitError(
                f"{where}: expected ImageNet's layout {LAYOUTS['imagenet']}; {train} is not there"
            )
        unreadable(where, train)
        classes = [c for c in sorted(train.iterdir()) if c.is_dir()]
        sample = next(
            (i for c in classes[:5] if (i := _first(c, lambda e: e.suffix.lower() in IMAGE_SUFFIXES))), None
        )
        if sample is None:
            raise ReprokitError(f"{where}: no images under {train}/<class>/ (expected {LAYOUTS['imagenet']})")
    elif spec.layout == "token_labels":
        unreadable(where, path)
        classes = [c for c in sorted(path.iterdir()) if c.is_dir()]
        sample = next((f for c in classes[:5] if (f := _first(c, lambda e: e.suffix == ".pt"))), None)
        if sample is None:
            raise ReprokitError(
                f"{where}: no label maps under {path}/<class>/ (expected {LAYOUTS['token_labels']})"
            )
    return str(path)


def resolve(recipes: list[Recipe], given: dict[str, str]) -> dict[str, str]:
    """Check every given key against the recipes of a session: known to one of them, and laid out."""
    declared = {key: spec for recipe in recipes for key, spec in recipe.dataset.data.items()}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        known = ", ".join(f"{k} ({s.help})" for k, s in declared.items()) or "none"
        raise ReprokitError(f"--data {unknown[0]}: no recipe of this session takes it; known keys: {known}")
    return {key: check(key, declared[key], path) for key, path in given.items()}


def apply(recipe: Recipe, args: dict, data: dict[str, str]) -> dict[str, str]:
    """Set a cell's trainer arguments from the data it takes; returns the data the cell uses."""
    used = {key: path for key, path in data.items() if key in recipe.dataset.data}
    for key, path in used.items():
        spec = recipe.dataset.data[key]
        args[spec.arg] = path
        for stand_in in spec.replaces:
            # What was given replaces the stand-in, whatever the scale asked for.
            args.pop(stand_in, None)
    return used
