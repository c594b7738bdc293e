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

import yaml
from pydantic import ValidationError

from reprokit.errors import ReprokitError
from reprokit.layout import RECIPES
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
        if path.resolve() not in [d.resolve() for d in _user_dirs]:
            _user_dirs.append(path)


def search_dirs() -> list[Path]:
    return [RECIPES_DIR, *_user_dirs]


def available() -> list[str]:
    """Recipe names, the kit's first; a user's recipe of the same name as a kit one is shadowed."""
    names: dict[str, Path] = {}
    for folder in search_dirs():
        for path in sorted(folder.glob("*.yaml")):
            names.setdefault(path.stem, path)
    return list(names)


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
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ReprokitError(f"{path}{where}: not valid YAML: {problem}") from None
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
