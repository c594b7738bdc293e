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
LABEL_SUFFIXES = (".pt",)
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


def _holds(folder: str, suffixes: tuple[str, ...]) -> bool:
    """Whether `folder` holds a file the trainer reads (a name with one of `suffixes`, a file or a link
    to one, as the trainers list them); stops at the first."""
    with os.scandir(folder) as entries:
        return any(e.name.lower().endswith(suffixes) and e.is_file() for e in entries)


def classes_without(where: str, folder: Path, suffixes: tuple[str, ...], what: str, layout: str) -> None:
    """Refuse class folders of `folder` that hold nothing the trainer reads: it would count each as a
    class (num_classes_data) and never train on it, less than was given. One line names them."""
    classes = sorted(entry.path for entry in os.scandir(folder) if entry.is_dir())
    try:
        empty = [path for path in classes if not _holds(path, suffixes)]
    except OSError as error:
        raise ReprokitError(
            f"{where}: class folder {error.filename} cannot be read ({error.strerror}): every class of the "
            "given data must be readable"
        ) from None
    kinds = ", ".join(suffixes)
    if len(empty) == len(classes):
        raise ReprokitError(f"{where}: no {what}s under {folder}/<class>/ (expected {layout})")
    if empty:
        shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        holds = "holds" if len(empty) == 1 else "hold"
        raise ReprokitError(
            f"{where}: {len(empty)} of its {len(classes)} class folders {holds} no {what} ({kinds}): {shown}; "
            f"every class given is trained on (an empty one would be counted, never seen): add its {what}s or "
            "remove the folder"
        )


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
        classes_without(where, train, IMAGE_SUFFIXES, "image", LAYOUTS["imagenet"])
    elif spec.layout == "token_labels":
        unreadable(where, path)
        classes_without(where, path, LABEL_SUFFIXES, "label map", LAYOUTS["token_labels"])
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
