"""History: every session's number of each cell over time, as a table and as a page of plots.

"Did this cell regress since the last image?", "which of my nodes is slow?": one row per cell per
session, with the image, kit revision and host beside the number, and a plot per cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reprokit.results import pages, store
from reprokit.results.pages import Block
from reprokit.results.plots import Plot

COLUMNS = ("session", "started_at", "cell_id", "device_name", "host", "measured_per_device", "spread",
           "repeats", "definition", "unit", "verdict", "image_id", "kit_revision")  # fmt: skip


def rows(
    results: Path, recipe: str | None = None, cell: str | None = None, device: str | None = None
) -> list[dict[str, Any]]:
    """Every completed cell of every session, oldest first, filtered by recipe, cell id and device."""
    where, params = ["status IN ('ok', 'partial')"], []
    if recipe:
        where.append("recipe = ?")
        params.append(recipe)
    if cell:
        where.append("cell_id LIKE ?")
        params.append(f"%{cell}%")
    if device:
        where.append("(device_name ILIKE ? OR device ILIKE ?)")
        params += [f"%{device}%", f"%{device}%"]
    return store.query(
        results,
        f"""SELECT session_folder AS session, started_at, recipe, variant, cell_id, device, device_name,
                   provenance->>'hostname' AS host, measured_per_device, spread, repeats, definition, unit,
                   verdict, verdict_reasons, image_id, kit_revision
            FROM rows WHERE {" AND ".join(where)} ORDER BY started_at, session_folder, cell_id""",
        params,
    )


def plots(results: Path, table: list[dict[str, Any]], folder: Path) -> list[Plot]:
    """Per cell, its per-device figure session after session (one line per device and host)."""
    from reprokit.results.plots import pyplot, save, slug

    drawn = []
    for cell_id in dict.fromkeys(r["cell_id"] for r in table):
        mine = [r for r in table if r["cell_id"] == cell_id and r.get("measured_per_device") is not None]
        if not mine:
            continue
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(8, 3.4))
        for key in dict.fromkeys((r.get("device_name") or "?", r.get("host") or "?") for r in mine):
            points = [r for r in mine if (r.get("device_name") or "?", r.get("host") or "?") == key]
            xs = [r["session"] for r in points]
            ys = [r["measured_per_device"] for r in points]
            errors = [(r.get("spread") or 0) * r["measured_per_device"] / 2 for r in points]
            ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=f"{key[0]} on {key[1]}")
        ax.set_ylabel(f"{mine[0].get('unit') or 'samples/s'} per device")
        ax.set_title(f"{cell_id} over sessions", fontsize=10)
        ax.tick_params(axis="x", labelrotation=20, labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        name = f"history-{slug(cell_id)}.png"
        drawn.append(
            Plot(
                cell_id,
                name,
                f"{cell_id}",
                "Error bars: the spread of repeated runs.",
                save(fig, folder, name),
            )
        )
    return drawn


def write(results: Path, table: list[dict[str, Any]]) -> Path:
    """history.html in the results folder: the table and a plot per cell, in one self-contained file."""
    folder = results / ".history"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("history-*.png"):
        old.unlink()
    drawn = plots(results, table, folder)
    content = [
        Block("h1", f"reprokit history: {results}"),
        Block(
            "p", f"{len({r['session'] for r in table})} sessions, {len({r['cell_id'] for r in table})} cells."
        ),
        Block("table", headers=list(COLUMNS), rows=[[_text(r.get(c)) for c in COLUMNS] for r in table]),
    ]
    for plot in drawn:
        content += [Block("h3", plot.title), Block("plot", plot=plot), Block("p", plot.caption)]
    page = results / "history.html"
    page.write_text(pages.html(f"reprokit history: {results}", content))
    return page


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def print_table(table: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    view = Table(title=f"reprokit history ({len(table)} rows)")
    for column in COLUMNS:
        view.add_column(column, overflow="fold")
    for r in table:
        view.add_row(*(_text(r.get(c)) for c in COLUMNS))
    Console(width=200).print(view)
