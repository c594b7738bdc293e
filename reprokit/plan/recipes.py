"""Recipes: one YAML file per published benchmark, validated against a strict schema.

A publication is a folder, `recipes/<name>/`: its recipe (`recipe.yaml`, named by the folder) and
the sources it cites (recipes/<name>/SOURCES.md). A recipe folder is searched for both that shape and flat
`<name>.yaml` files (a user's `--recipes` folder of files keeps working), and found, never listed.

A recipe pins what the publication depends on (model and dataset revisions, hyperparameters as
published, reference numbers) and what is needed to run it offline (the architecture, the data's
shapes). Every error names the file, the key path and what was expected, on one line.

The kit's own recipes ship in this package, beside this file; a user's recipe folders (`--recipes
DIR`, or the `recipes` setting) are searched after them, and any recipe file can be given by path.
A name is one recipe: cells, results and their history are named by it, so two files that take one
name (a file's name, or the `name:` it declares) are refused by every command that finds a recipe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import yaml
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
# A publication's folder holds its recipe under this name; the folder's name is the recipe's file name.
RECIPE_FILE = "recipe.yaml"
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


def recipe_files(folder: Path) -> list[tuple[str, Path]]:
    """The recipes of one recipe folder with the name each goes by besides its `name:`, in the order
    of those names: each `<name>/recipe.yaml` (a publication's folder) and each flat `<name>.yaml` (a
    user's folder of files)."""
    flat = [(path.stem, path) for path in folder.glob("*.yaml")]
    return sorted([*flat, *((path.parent.name, path) for path in folder.glob(f"*/{RECIPE_FILE}"))])


def clash(name: str, first: Path, second: Path) -> ReprokitError:
    """Two recipe files of one name: cells, results and history are named by a recipe's name, so one
    would hide the other or two would mix under it."""
    own = f"its folder if it is {name}/" if second.name == RECIPE_FILE else f"its file if it is {name}.yaml"
    return ReprokitError(
        f"two recipes named {name!r}: {first} and {second}; a session's cells and results are named by "
        f"the recipe, so rename the second (its `name:`, and {own})"
    )


# The `name:` each recipe file declares, by (file, mtime, size): read once a process per version.
_declared: dict[tuple[str, int, int], str | None] = {}
_STR = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()


def declared_name(path: Path) -> str | None:
    """The `name:` the recipe file `path` declares, read from its top level as a stream of parser events
    (libyaml's: a few ms, nothing built, no recursion however deep the file); None where it declares
    none that reads as a name (a file that is not a recipe is named by its file name alone, and
    refused when it is loaded)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _declared:
        _declared[key] = _read_name(path) if stat.st_size <= boundedyaml.MAX_BYTES else None
    return _declared[key]


class _Indirect(Exception):
    """The name is an alias, or a merge key (`<<: *base`) may bring it: read it as loading does."""


def _read_name(path: Path) -> str | None:
    try:
        return _scan_name(path.read_bytes())
    except _Indirect:
        try:
            raw = boundedyaml.load(path, "recipe")
        except ReprokitError:
            return None
        return raw.get("name") if isinstance(raw, dict) and isinstance(raw.get("name"), str) else None
    except (OSError, yaml.YAMLError):
        return None


def _scan_name(data: bytes) -> str | None:
    depth, is_key, key, name = 0, True, None, None
    documents = 0
    for event in yaml.parse(data, Loader=boundedyaml.LOADER):
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                return None  # loading refuses a file of several documents
        elif isinstance(event, yaml.CollectionStartEvent):
            if depth == 0 and not isinstance(event, yaml.MappingStartEvent):
                return None
            if depth == 1 and not is_key and key == "name":
                name = None  # a collection is no name
            depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            if depth == 1:
                is_key = not is_key
        elif depth == 1 and isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            if is_key:
                key = event.value if isinstance(event, yaml.ScalarEvent) else None
                if key == "<<" and event.implicit[0]:
                    raise _Indirect
            elif key == "name":
                # As loading does: the last `name:` of the top level is the recipe's.
                if isinstance(event, yaml.AliasEvent):
                    raise _Indirect
                tag = (
                    event.tag
                    if event.tag not in (None, "!")
                    else _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)
                )
                name = event.value if tag == _STR else None
            is_key = not is_key
    return name


def catalog() -> dict[str, Path]:
    """Every name in the recipe folders (the kit's, then the user's), to its one file: a file is named
    by its file name (a publication folder's recipe.yaml: the folder's) and by the `name:` it declares.
    A name two files take is refused, naming both: one would hide the other, or run under its cell ids
    and mix into its results."""
    return _scan()[0]


def available() -> list[str]:
    """Recipe names (their file names, or their folders'), the kit's first, then the user's folders'; a
    name two files take is refused (catalog)."""
    return list(_scan()[1])


def _scan() -> tuple[dict[str, Path], dict[str, Path]]:
    """The catalog, and each file name (a folder's, for a publication) to its file, in one pass over
    the folders; a name two files take is refused (a file name then belongs to one file)."""
    names: dict[str, Path] = {}
    file_names: dict[str, Path] = {}
    for folder in search_dirs():
        for file_name, path in recipe_files(folder):
            file_names.setdefault(file_name, path)
            for name in dict.fromkeys((file_name, declared_name(path))):
                if name is None:
                    continue
                if name in names and names[name].resolve() != path.resolve():
                    raise clash(name, names[name], path)
                names.setdefault(name, path)
    return names, file_names


def load_unique(names_or_paths: list[str]) -> dict[str, Recipe]:
    """The recipes of a session, each file once, by what named it; two files whose recipes have one
    `name:` (a user's file given by path beside the kit's recipe of that name) are refused."""
    loaded: dict[str, Recipe] = {}
    files: dict[Path, str] = {}
    named: dict[str, Path] = {}
    for given in names_or_paths:
        path = resolve_path(given).resolve()
        if path in files:
            continue  # the same file named twice (volo,recipes/volo/recipe.yaml): its cells once
        recipe = load(given)
        if recipe.name in named:
            raise clash(recipe.name, named[recipe.name], path)
        files[path], named[recipe.name], loaded[given] = given, path, recipe
    return loaded


def kit_name(path: Path) -> str | None:
    """The file name of the kit's own recipe `path` is (its publication folder's), None for any other
    file."""
    return next(
        (name for name, found in recipe_files(RECIPES_DIR) if found.resolve() == path.resolve()), None
    )


def resolve_path(name_or_path: str) -> Path:
    """A recipe is named (``bridgetower``) or given by path (``path/to/my.yaml``,
    ``recipes/volo/recipe.yaml``, or a publication's folder: ``recipes/volo``)."""
    candidate = Path(name_or_path)
    if candidate.is_dir() and candidate.parent != Path("."):
        if not (candidate / RECIPE_FILE).is_file():
            raise ReprokitError(f"recipe folder {name_or_path} has no {RECIPE_FILE}")
        candidate = candidate / RECIPE_FILE
    if candidate.suffix in (".yaml", ".yml") or candidate.parent != Path("."):
        if not candidate.is_file():
            raise ReprokitError(f"recipe file {name_or_path} does not exist")
        # A file given by path runs under the name it declares: another recipe's is refused (the kit's
        # own file given by path is that recipe, not a clash).
        name = declared_name(candidate)
        known = catalog().get(name) if name else None
        if known is not None and known.resolve() != candidate.resolve():
            raise clash(name, known, candidate)
        return candidate
    path = _scan()[1].get(name_or_path)
    if path is not None:
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
