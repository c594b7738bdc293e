"""Recipes: one YAML file per published benchmark, validated against a strict schema.

A recipe pins what the publication depends on (model and dataset revisions, hyperparameters as
published, reference numbers) and what is needed to run it offline (the architecture, the data's
shapes). Every error names the file, the key path and what was expected, on one line.

The kit's own recipes ship in this package, beside this file; a user's recipe folders (`--recipes
DIR`, or the `recipes` setting) are searched after them, and any recipe file can be given by path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from reprokit.contract.errors import ReprokitError
from reprokit.contract.layout import RECIPES
from reprokit.plan import boundedyaml
from reprokit.plan.recipe_schema import (
    SCALES,
    SOFTWARE_KEYS,
    DataKey,
    Recipe,
    Reference,
    Variant,
    trainer_module,
)
from reprokit.plan.validation import one_line

__all__ = ["SCALES", "SOFTWARE_KEYS", "DataKey", "Recipe", "Reference", "Variant", "trainer_module"]
RECIPES_DIR = RECIPES
# The user's recipe folders, searched after the kit's own (set once by the command line).
_user_dirs: list[Path] = []


def use_dirs(dirs: Iterable[str | Path]) -> None:
    """Add the user's recipe folders to the search (after the kit's own); each must exist."""
    for folder in dirs:
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise ReprokitError(f"recipe folder {folder} does not exist (--recipes or the 'recipes' setting)")
        if path.resolve() not in [d.resolve() for d in search_dirs()]:
            _user_dirs.append(path)


def search_dirs() -> list[Path]:
    return [RECIPES_DIR, *_user_dirs]


def clash(name: str, first: Path, second: Path) -> ReprokitError:
    """Two recipe files of one name: cells, results and history are named by a recipe's name, so one
    would hide the other or two would mix under it."""
    return ReprokitError(
        f"two recipes named {name!r}: {first} and {second}; a session's cells and results are named by "
        "the recipe, so rename one (its file and its `name:`)"
    )


def available() -> list[str]:
    """Recipe names, the kit's first, then the user's folders'; a user's recipe named like another is
    refused, naming both files (it would be hidden by it)."""
    names: dict[str, Path] = {}
    for folder in search_dirs():
        for path in sorted(folder.glob("*.yaml")):
            if path.stem in names and names[path.stem].resolve() != path.resolve():
                raise clash(path.stem, names[path.stem], path)
            names.setdefault(path.stem, path)
    return list(names)


def load_unique(names_or_paths: list[str]) -> dict[str, Recipe]:
    """The recipes of a session, each file once, by what named it; two files whose recipes have one
    `name:` (a user's file given by path beside the kit's recipe of that name) are refused."""
    loaded: dict[str, Recipe] = {}
    files: dict[Path, str] = {}
    named: dict[str, Path] = {}
    for given in names_or_paths:
        path = resolve_path(given).resolve()
        if path in files:
            continue  # the same file named twice (volo,recipes/volo.yaml): its cells once
        recipe = load(given)
        if recipe.name in named:
            raise clash(recipe.name, named[recipe.name], path)
        files[path], named[recipe.name], loaded[given] = given, path, recipe
    return loaded


def is_kit_recipe(path: Path) -> bool:
    return path.resolve().parent == RECIPES_DIR.resolve()


def resolve_path(name_or_path: str) -> Path:
    """A recipe is named (``bridgetower``) or given by path (``path/to/my.yaml``)."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.parent != Path("."):
        if not candidate.is_file():
            raise ReprokitError(f"recipe file {name_or_path} does not exist")
        return candidate
    for folder in search_dirs():
        path = folder / f"{name_or_path}.yaml"
        if path.is_file():
            return path
    raise ReprokitError(f"unknown recipe {name_or_path!r}; known recipes: {', '.join(available()) or 'none'}")


def load(name_or_path: str) -> Recipe:
    path = resolve_path(name_or_path)
    raw = boundedyaml.load(path, "recipe")
    if not isinstance(raw, dict):
        raise ReprokitError(f"{path}: expected a mapping of recipe keys at the top level")
    try:
        return Recipe.model_validate(raw)
    except ValidationError as exc:
        raise ReprokitError(one_line(str(path), exc)) from None


def load_all() -> list[Recipe]:
    return [load(name) for name in available()]


def recipe_hash(name_or_path: str) -> str:
    """A short content hash: results carry it, so a number is traced to the exact recipe text."""
    return hashlib.sha256(resolve_path(name_or_path).read_bytes()).hexdigest()[:12]
