"""A few real steps of each trainer and loader variant, through the runtime and container the session
would use (on the device, inside the image): each must complete, and a published cell's run must record
no departure that would block its verdict (the data, the switches, the software it must run)."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from reprokit.contract import records
from reprokit.contract.console import console
from reprokit.judge import verdicts
from reprokit.plan.cells import Cell
from reprokit.preflight.checks.base import Check
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding
from reprokit.run import supervise

# Steps run: one warm-up step and two measured ones, each logged.
STEPS, WARMUP = 3, 1
# What the stepped runs say about their communication (NCCL's choice of network and card).
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


def signature(cell: Cell) -> tuple[Any, ...]:
    """What makes a cell another trainer or loader variant: its trainer, the arguments that choose its
    data path (the schema's `loader` role), whether loader workers run, and its scale."""
    roles = cell.roles
    loader = tuple((name, str(cell.args.get(name))) for name in roles.get("loader", []))
    workers = cell.args.get(roles.get("workers", ""))
    return cell.trainer, loader, isinstance(workers, int) and workers > 0, cell.scale, cell.nodes


def representatives(cells: list[Cell]) -> list[tuple[Cell, list[Cell]]]:
    """The cells to step, in the plan's order, each with the cells it stands for; the producers of
    what a stepped cell consumes (a finetune's checkpoint) are stepped before it."""
    groups: dict[tuple[Any, ...], list[Cell]] = {}
    for cell in cells:
        groups.setdefault(signature(cell), []).append(cell)
    chosen = {group[0].cell_id: group for group in groups.values()}
    by_id = {c.cell_id: c for c in cells}
    wanted = set(chosen)
    for cell_id in list(chosen):
        stack = list(by_id[cell_id].needed_cells().values())
        while stack:
            producer = stack.pop()
            if producer in by_id and producer not in wanted:
                wanted.add(producer)
                stack += list(by_id[producer].needed_cells().values())
    return [(c, chosen.get(c.cell_id, [c])) for c in cells if c.cell_id in wanted]


def shortened(cell: Cell) -> Cell:
    """The cell, cut to a few logged steps after one warm-up step (roles name the arguments)."""
    short = copy.deepcopy(cell)
    roles = cell.roles
    for role, value in (("max_steps", STEPS), ("warmup_steps", WARMUP), ("logging_steps", 1)):
        if roles.get(role):
            short.args[roles[role]] = value
    return short


@contextmanager
def _environment(context: Context) -> Iterator[None]:
    """What the stepped runs see beyond the session's environment: NCCL's account of its network and,
    where the hub cannot be reached, the hub clients offline (the runs fall back the same, at once)."""
    wanted = dict(DEBUG_ENV)
    if context.hub_unreachable:
        wanted.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    saved = {key: os.environ.get(key) for key in wanted}
    os.environ.update({key: os.environ.get(key) or value for key, value in wanted.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class Steps(Check):
    name = "steps"

    def applies(self, context: Context) -> bool:
        return context.steps

    def run(self, context: Context) -> list[Finding]:
        if context.blocked_everywhere():
            return [self.finding("not run: nothing could run on this machine as it is (above)")]
        runs = (context.out / "preflight" / time.strftime("%Y%m%d-%H%M%S")).resolve() / "runs"
        found = []
        with _environment(context):
            for cell, represented in representatives(context.cells):
                run_dir = runs / cell.cell_id
                failed = [
                    c
                    for c in cell.needed_cells().values()
                    if c in context.stepped and records.read(context.stepped[c]).status != "ok"
                ]
                if failed:
                    continue  # its producer failed, which is said already
                console.print(
                    f"preflight: {STEPS} steps of {cell.cell_id} ({context.plan.runtime}"
                    f"{'' if context.container == 'none' else ' in ' + context.container})"
                )
                started = time.monotonic()
                supervise.run_cell(
                    context.runtime, shortened(cell), run_dir, context.profile, timeout=context.step_timeout
                )
                context.stepped[cell.cell_id] = run_dir
                found.append(self._judged(cell, represented, run_dir, time.monotonic() - started))
        return found

    def _judged(self, cell: Cell, represented: list[Cell], run_dir, seconds: float) -> Finding:
        record = records.read(run_dir)
        names = tuple(c.cell_id for c in represented)
        others = [n for n in names if n != cell.cell_id]
        shown = ", ".join(others[:2]) + (f" and {len(others) - 2} more" if len(others) > 2 else "")
        also = f" (for {shown})" if others else ""
        summary = record.summary
        if record.status != "ok" or summary is None:
            error = summary.error if summary else None
            return self.finding(
                f"{cell.cell_id}{also}: {record.status}: {error or 'no summary'} (see {run_dir / 'stdout.log'})",
                True,
                names,
            )
        # The stepped cell's software is its own: each cell it stands for is held to its own.
        own = set(verdicts.software_departures(record.cell.software, summary.software))
        common = [
            r
            for r in verdicts.blocking(verdicts.departures(record))
            if r != f"{cell.scale} scale" and r not in own
        ]
        reasons = {
            c.cell_id: [*common, *verdicts.software_departures(c.software, summary.software)]
            for c in represented
        }
        # A variant beyond the publication too: its speedup is a verdict, of two runs free of departures.
        published = tuple(c.cell_id for c in represented if c.scale == "published" and reasons[c.cell_id])
        shown = reasons[cell.cell_id] or next((r for r in reasons.values() if r), [])
        rate = summary.samples_per_second
        ran = (
            f"{summary.steps} steps in {seconds:.0f} s, {rate:,.1f} {cell.unit}"
            if rate
            else f"{summary.steps} steps in {seconds:.0f} s"
        )
        if published:
            return self.finding(
                f"{cell.cell_id}{also}: {ran}, but it departed: {'; '.join(shown)}", True, published
            )
        departed = f"; departures: {'; '.join(shown)}" if shown else ""
        return self.finding(f"{cell.cell_id}{also}: {ran}{departed}")
