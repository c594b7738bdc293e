"""An acceptance run's cells: the one cell asked for, once per node or device, each under an id of
its own (`bridgetower--workers0--on-n1`) so that each is a series of its own in history and compare
names each node that changed; repeats (--repeat N) of one node share its series."""

from __future__ import annotations

from dataclasses import replace

from reprokit.contract.errors import ReprokitError
from reprokit.fleet.targets import Target
from reprokit.plan.cells import Cell, cell_id
from reprokit.plan.planner import Plan


def one_cell(the_plan: Plan) -> list[Cell]:
    """The plan's cell (its repeats), checked to be one cell that needs no other: an acceptance run
    holds every node to the same measurement."""
    series = list(dict.fromkeys(c.series_id or c.cell_id for c in the_plan.cells))
    if len(series) != 1:
        raise ReprokitError(
            f"an acceptance run measures one cell on every node; these flags plan {len(series)} "
            f"({', '.join(series[:4])}{', ...' if len(series) > 4 else ''}): give one recipe and --variant"
        )
    cell = the_plan.cells[0]
    if cell.needs:
        raise ReprokitError(
            f"{cell.cell_id} needs {', '.join(cell.needs.values())}'s checkpoint: an acceptance run measures "
            "a cell that runs on its own; give another --variant"
        )
    if cell.nodes != 1:
        raise ReprokitError(
            f"{cell.cell_id} runs on {cell.nodes} nodes: an acceptance run runs it on each alone"
        )
    return the_plan.cells


def per_target(cells: list[Cell], targets: list[Target]) -> list[tuple[Target, Cell]]:
    """Each cell (each repeat) on each target, under the target's id."""
    found = []
    for target in targets:
        for cell in cells:
            series = cell_id(cell.recipe, cell.variant, cell.id_suffix.split("--r")[0] + target.suffix)
            repeat = f"--r{cell.repeat}" if cell.repeats > 1 else ""
            found.append(
                (
                    target,
                    replace(
                        cell,
                        cell_id=series + repeat,
                        series_id=series,
                        id_suffix=cell.id_suffix + target.suffix,
                    ),
                )  # fmt: skip
            )
    return found
