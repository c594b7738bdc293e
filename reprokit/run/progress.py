"""Progress you can read on long sessions: a bar for the matrix (cells done of all) and one for the
running cell (steps done of its total, its samples/s, time left), fed from the run directory's
throughput.csv as the trainer writes it, reading only the rows it appended since the last look."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from reprokit.contract import rundirs


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


class MatrixProgress:
    def __init__(self, console: Console, cells: int) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=30),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.matrix = self.progress.add_task("session", total=cells, detail="")
        self.cell: TaskID | None = None
        self.tail: rundirs.ThroughputTail | None = None
        self.total: float | None = None
        self.started = 0.0

    def __enter__(self) -> MatrixProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def start_cell(self, label: str, total_steps: int | None) -> None:
        self.started = time.monotonic()
        self.total = total_steps
        self.cell = self.progress.add_task(label, total=total_steps, detail="starting")
        self.tail = None

    def update(self, run_dir: Path, text: str) -> None:
        """The running cell's bar from its newest throughput row; `text` where there is none yet."""
        if self.cell is None:
            return
        if self.tail is None or self.tail.path.parent != run_dir:
            self.tail = rundirs.ThroughputTail(run_dir)
        row = self.tail.latest()
        if row is None:
            self.progress.update(self.cell, detail=text)
            return
        step, total, rate = (
            _number(row.get("step")),
            _number(row.get("steps_total")),
            _number(row.get("samples_per_second")),
        )
        total = total or self.total
        detail = f"{rate:,.1f}/s" if rate is not None else ""
        if step and total:
            left = (total - step) * (time.monotonic() - self.started) / step
            detail += f", about {left:,.0f}s left"
        self.progress.update(self.cell, completed=step or 0, total=total, detail=detail)

    def finish_cell(self, line: str) -> None:
        if self.cell is not None:
            self.progress.remove_task(self.cell)
            self.cell = None
        self.progress.advance(self.matrix)
        self.progress.console.print(line)

    def print(self, line: str) -> None:
        self.progress.console.print(line)
