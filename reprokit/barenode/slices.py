"""The bare node's slices (slices.yaml beside this file, or a file of the user's): which cells each
runs, in what order, how long each is expected to take, and the cells a slice leaves out and why.

A slice's cells are the recipes' own (cells.expand at the slice's scale on one device), changed only
as a node run needs: offline (no hub), shortened to a few measured steps, and, where a slice says so,
an argument of its own under a new variant name (the ViT ladder's true fp32 baseline). Every change is
checked against the trainer's argument schema before anything runs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reprokit.contract.errors import ReprokitError
from reprokit.plan import arguments, cells, recipes
from reprokit.plan.validation import one_line

SLICES_FILE = Path(__file__).resolve().parent / "slices.yaml"
CHECKS = ("device", "matmul", "energy")


class SliceCell(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    recipe: str
    variant: str
    seconds: float = Field(gt=0, description="expected wall time on the node, start-up included")
    # A cell of the slice's own: the variant with `args` on top, under this variant name.
    as_: str | None = Field(default=None, alias="as", pattern=r"^[a-z0-9][a-z0-9-]*$")
    args: dict[str, Any] = Field(default_factory=dict)
    note: str | None = None


class LeftOut(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    recipe: str
    variant: str
    why: str


class Slice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str
    checks: list[Literal["device", "matmul", "energy"]] = Field(default_factory=list)
    # A few steps only (one warm-up step, each logged); None: the warm-up and `measured_steps`.
    steps: int | None = Field(default=None, ge=1)
    scale: str = "published"
    cells: list[SliceCell] = Field(default_factory=list)
    left_out: list[LeftOut] = Field(default_factory=list)


class SlicesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    measured_steps: int = Field(ge=1)
    slices: dict[str, Slice]


@dataclass
class Planned:
    """A slice's cell as the node runs it, with its expected seconds; `left_out` says why it does not
    run at all (it still gets a row that says so)."""

    cell: cells.Cell
    seconds: float
    left_out: str | None = None


@cache
def load(path: Path = SLICES_FILE) -> SlicesFile:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ReprokitError(f"{path}: cannot read the slices: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise ReprokitError(f"{path}: not valid YAML: {str(error).splitlines()[0]}") from None
    try:
        return SlicesFile.model_validate(raw)
    except ValidationError as error:
        raise ReprokitError(one_line(str(path), error)) from None


def offline_args(recipe: str) -> dict[str, Any]:
    """What a cell of `recipe` needs to run with no network (random weights, synthetic data): the
    recipe's own `node: offline:`, in its folder beside it."""
    return dict(recipes.load(recipe).node.offline)


def get(name: str, path: Path = SLICES_FILE) -> Slice:
    known = load(path).slices
    if name not in known:
        raise ReprokitError(f"no slice {name!r} in {path}; its slices: {', '.join(known)}")
    return known[name]


def _one_cell(entry: SliceCell | LeftOut, scale: str, accelerator: str, where: str) -> cells.Cell | None:
    recipe = recipes.load(entry.recipe)
    found = cells.expand(recipe, entry.recipe, accelerator, scale, [entry.variant], devices=1)
    if not found:
        if isinstance(entry, LeftOut):
            return None
        why = cells.nothing_to_run(recipe, accelerator, scale, [entry.variant])
        raise ReprokitError(f"{where}: {why}")
    return next(c for c in found if c.variant == entry.variant)


def warmup_steps(cell: cells.Cell) -> int:
    """The cell's warm-up steps (role `warmup_steps`), 0 where it has none."""
    return int(cell.args.get(cell.roles.get("warmup_steps", ""), 0) or 0)


def fit_synthetic_rows(cell: cells.Cell) -> None:
    """A trainer that makes its synthetic rows up front names their count (role `synthetic_rows`): only
    as many as the cell's steps consume."""
    roles = cell.roles
    if roles.get("synthetic_rows"):
        batch = int(cell.args[roles["batch_per_device"]])
        cell.args[roles["synthetic_rows"]] = batch * (int(cell.args[roles["max_steps"]]) + 1)


def shorten(cell: cells.Cell, steps: int | None, measured_steps: int) -> None:
    """A few steps, or the warm-up and `measured_steps` after it (the roles name the arguments); the
    synthetic rows of a trainer that makes them all up front, only as many as the steps consume."""
    roles = cell.roles
    if steps is not None:
        wanted = {"max_steps": steps, "warmup_steps": 1, "logging_steps": 1}
    else:
        wanted = {"max_steps": warmup_steps(cell) + measured_steps}
    for role, value in wanted.items():
        if roles.get(role):
            cell.args[roles[role]] = value
    fit_synthetic_rows(cell)


def plan(name: str, accelerator: str = "cuda", path: Path = SLICES_FILE) -> list[Planned]:
    """The cells of slice `name` in its order, then the ones it leaves out; one-line errors name the
    slices file and the cell."""
    chosen = get(name, path)
    spec = load(path)
    planned: list[Planned] = []
    for index, entry in enumerate(chosen.cells):
        where = f"{path} (slice {name}, cell {index + 1}: {entry.recipe} {entry.variant})"
        cell = _one_cell(entry, chosen.scale, accelerator, where)
        assert cell is not None
        cell.args.update(offline_args(entry.recipe))
        cell.args.update(entry.args)
        if entry.as_:
            cell = _renamed(cell, entry.as_, entry.note)
        shorten(cell, chosen.steps, spec.measured_steps)
        wrong = arguments.problems(cell.trainer, cell.args)
        if wrong:
            raise ReprokitError(f"{where}: {wrong[0]}")
        planned.append(Planned(cell, entry.seconds))
    ids = [p.cell.cell_id for p in planned]
    if len(set(ids)) != len(ids):
        raise ReprokitError(f"{path} (slice {name}): a cell appears twice; give one an `as` name")
    for entry in chosen.left_out:
        cell = _one_cell(entry, chosen.scale, accelerator, f"{path} (slice {name})")
        if cell is not None:
            planned.append(Planned(cell, 0.0, left_out=entry.why))
    return planned


def _renamed(cell: cells.Cell, variant: str, note: str | None) -> cells.Cell:
    """The cell under a variant name of the slice's own: not the recipe's baseline, nor a variant
    the publication measured (its figures are not this cell's)."""
    renamed = copy.deepcopy(cell)
    renamed.variant = variant
    renamed.cell_id = cells.cell_id(cell.recipe, variant, cell.id_suffix)
    renamed.series_id = renamed.cell_id
    renamed.baseline = False
    renamed.references = []
    renamed.other_references = []
    renamed.notes = [*cell.notes, *([note] if note else [])]
    return renamed
