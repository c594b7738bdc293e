"""History: every session's number of each cell over time, as a table and as a page of plots.

"Did this cell regress since the last image?", "which of my nodes is slow?": one row per cell per
session, with the image, kit revision and machine beside the number, and a plot per cell on a real
time axis (sessions placed by when they started, a line per device and machine, the machine a run's
container ran on, not the container: machines.py).

Its entries: history_entries.py; its plots: history_plots.py; its rows shown (the terminal, --json, the page's tables):
history_tables.py.
"""

from __future__ import annotations

import tempfile
from datetime import timezone
from pathlib import Path
from typing import Any

from reprokit.collect import machines, results_folder
from reprokit.contract import files, sessions
from reprokit.report import history_plots, history_tables, page_blocks
from reprokit.report.history_entries import Entry, History
from reprokit.report.page_blocks import Block


def _utc(text: Any) -> str | None:
    found = sessions.parse_time(text)
    return found.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if found else None


def read(
    results: Path, recipe: str | None = None, cell: str | None = None, device: str | None = None
) -> History:
    """Every completed cell of every session, oldest session first, filtered by recipe, cell id
    (a part of it) and device (a part of its name, any case)."""
    found = results_folder.read(results)
    wanted_device = device.lower() if device else None
    table = []
    for item in found.sessions:
        mine = []
        for r in item.rows:
            if r.status not in ("ok", "partial"):
                continue
            if recipe and r.recipe != recipe:
                continue
            if cell and cell not in (r.cell_id or ""):
                continue
            names = f"{r.device_name or ''}\n{r.device or ''}".lower()
            if wanted_device and wanted_device not in names:
                continue
            mine.append(Entry(item.name, item.started, _utc(r.started_at), machines.name(r), r))
        table += sorted(mine, key=lambda e: (e.started_at or "", e.row.cell_id or ""))
    return History(table, found.skipped, len(found.sessions))


def write(results: Path, table: list[Entry]) -> Path:
    """history.html in the results folder: a plot per cell, then the sessions (when, on what machines,
    with what image and kit) and every cell of every session, in one self-contained file (the plots are
    drawn in a temporary folder and embedded; nothing else is written)."""
    with tempfile.TemporaryDirectory(prefix="reprokit-history-") as scratch:
        drawn = history_plots.plots(table, Path(scratch))
        content = [
            Block("h1", f"reprokit history: {results}"),
            Block(
                "p",
                f"{len({e.session for e in table})} sessions, {len({e.row.cell_id for e in table})} cells.",
            ),
        ]
        for plot in drawn:
            content += [Block("h3", plot.title), Block("plot", plot=plot)]
            content += [Block("p", plot.caption)] if plot.caption else []
        content += [
            Block("h2", "Sessions"),
            Block(
                "table",
                headers=history_tables.SESSION_HEADERS,
                rows=history_tables.sessions(table),
                nowrap=(0, 1),
            ),
            Block("h2", "Every cell of every session"),
            Block(
                "table",
                headers=[h for _, h in history_tables.PAGE_COLUMNS],
                rows=[history_tables.page_row(e) for e in table],
                nowrap=history_tables.PAGE_NOWRAP,
            ),  # fmt: skip
        ]
        text = page_blocks.html(f"reprokit history: {results}", content)
    return files.write_text(results / "history.html", text)
