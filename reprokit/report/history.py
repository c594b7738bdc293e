"""History: every session's number of each cell over time, as a table and as a page of plots.

"Did this cell regress since the last image?", "which of my nodes is slow?": one row per cell per
session, with the image, kit revision and machine beside the number, and a plot per cell on a real
time axis (sessions placed by when they started, a line per device and machine, the machine a run's
container ran on, not the container: machines.py).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from reprokit.collect import machines, results_folder
from reprokit.contract import files, sessions
from reprokit.contract.bounded import Malformed
from reprokit.contract.textsafe import NAME, short
from reprokit.contract.textsafe import line as one_line
from reprokit.judge.result_row import Row
from reprokit.report import page_blocks
from reprokit.report.drawing import DPI, Plot
from reprokit.report.page_blocks import Block
from reprokit.report.trust import untrusted

COLUMNS = ("session", "started_at", "cell_id", "device_name", "machine", "measured_per_device", "spread",
           "repeats", "definition", "unit", "verdict", "image_id", "kit_revision")  # fmt: skip
HEADERS = {"started_at": "started (UTC)"}
# The columns an entry holds itself; the others are its row's.
OWN = ("session", "started_at", "machine")
# An image's digest in history.html: `sha256:` and 12 hex digits, as `docker images` shows it (the
# 64-digit digest is one unbreakable word); the terminal's table has it whole.
IMAGE_DIGITS = 12
# The terminal table: a value longer than this is cut (history.html has it whole).
CELL_WIDTH = 40
# Series named in a plot's legend; the others are drawn, and counted in the caption.
LEGEND_SERIES = 12


@dataclass(frozen=True)
class Entry:
    """One cell of one session, placed in time: the table's columns and what the plots need."""

    session: str
    session_started: datetime
    # When the cell started, in UTC ("2025-01-01 10:00:05").
    started_at: str | None
    # The machine it ran on (machines.name): a container's hostname would make each run a machine.
    machine: str | None
    row: Row

    def value(self, column: str) -> Any:
        """A column of the table: the entry's own (session, started_at in UTC, machine), else its row's."""
        return getattr(self, column) if column in OWN else getattr(self.row, column)


@dataclass
class History:
    rows: list[Entry]
    # The sessions left out, each its file (or folder) and why: `skipped: <path>: <reason>`.
    skipped: list[Malformed]
    sessions: int


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


def _series(mine: list[Entry]) -> dict[tuple[str, str, str], list[Entry]]:
    """A cell's entries by (device, machine, scale), each in time order: a smoke run's figure is never
    joined by a line to a published run's."""
    found: dict[tuple[str, str, str], list[Entry]] = {}
    for e in mine:
        found.setdefault((e.row.device_name or "?", e.machine or "?", e.row.scale or "published"), []).append(
            e
        )
    for points in found.values():
        points.sort(key=lambda e: e.session_started)
    return found


# The time axis's labels, each whole on its own (`17:18:10`, not `10` beside a lone `17:18`), from
# years down to seconds (matplotlib's ConciseDateFormatter levels); the date they share is the offset.
TIME_FORMATS = ["%Y", "%b %Y", "%d %b", "%H:%M", "%H:%M", "%H:%M:%S"]
TIME_ZERO_FORMATS = ["", "%Y", "%b %Y", "%d %b", "%H:%M", "%H:%M:%S"]
TIME_OFFSET_FORMATS = ["", "%Y", "%Y", "%b %Y", "%d %b %Y", "%d %b %Y"]
LEGEND_COLUMNS = 2


def figure(cell_id: str, mine: list[Entry]) -> tuple[Any, int]:
    """A cell's figure: per device and machine, its figure per device of each session at the time it
    started (a date axis, so 5,000 sessions read as a line, and sessions on two machines interleave as
    they happened), from zero (a 2% step must not fill the height); returns the figure and how many
    series the legend leaves out."""
    from reprokit.report.drawing import matplotlib_safe

    matplotlib_safe()  # a device or machine named `$\\foo{$` is a name, not math text
    from matplotlib import dates
    from matplotlib.figure import Figure

    from reprokit.report.drawing import FONT, TITLE_FONT, titled, unjudged_scale

    series = sorted(_series(mine).items(), key=lambda kv: -len(kv[1]))
    named = min(len(series), LEGEND_SERIES)
    legend_rows = -(-named // LEGEND_COLUMNS)
    # The legend below the axes, inside the figure (no tight bounding box: it would draw every point
    # twice): fixed margins, the bottom one grown by the legend's rows.
    rows = [e.row for e in mine]
    # Every session at a smoke scale: the title says so (a second line); a mix: the legend does.
    unjudged = unjudged_scale(rows) if all(r.scale not in (None, "published") for r in rows) else None
    # Controls shown, never drawn as boxes; each name within its bound (an image as wide as a label).
    heading = one_line(f"{short(cell_id, NAME)} over sessions")
    title = titled(heading, rows) if unjudged else heading
    height = 3.6 + 0.22 * legend_rows + (0.2 if unjudged else 0.0)
    fig = Figure(figsize=(8, height), dpi=DPI)
    fig.subplots_adjust(left=0.1, right=0.97, top=1 - (0.42 + 0.2 * title.count("\n") + 0.2) / height,
                        bottom=(0.75 + 0.22 * legend_rows) / height)  # fmt: skip
    ax = fig.subplots()
    many = len(mine) > 200
    top = 0.0
    for index, ((device, machine, scale), points) in enumerate(series):
        xs = [e.session_started for e in points]
        ys = [e.row.measured_per_device for e in points]
        unjudged = scale != "published"
        label = one_line(f"{short(device, NAME)} on {short(machine, NAME)}")
        label += f" ({one_line(short(scale, NAME))} scale)" if unjudged else ""
        # Thousands of sessions read as a band of points; a line through them would be a scribble.
        style = (
            {"linestyle": "none", "markersize": 2, "alpha": 0.6}
            if many
            else {"markersize": 5, "linewidth": 1.2, "linestyle": "--" if unjudged else "-"}
        )
        if unjudged:  # hollow: a smoke run's figure shows the machinery works, it measures nothing published
            style["markerfacecolor"] = "none"
        (line,) = ax.plot(xs, ys, marker="o", label=label if index < LEGEND_SERIES else None, **style)
        spread = [(x, y, bar) for x, y, e in zip(xs, ys, points, strict=True) if (bar := error_bar(e))]
        top = max([top, *(y for y in ys if y is not None), *(y + err for _, y, err in spread)])
        if spread:
            sx, sy, se = zip(*spread, strict=True)
            ax.errorbar(sx, sy, yerr=se, fmt="none", ecolor=line.get_color(), capsize=2, linewidth=0.8)
    locator = dates.AutoDateLocator(minticks=3, maxticks=6, tz=timezone.utc)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(
        dates.ConciseDateFormatter(locator, tz=timezone.utc, formats=TIME_FORMATS,
                                   zero_formats=TIME_ZERO_FORMATS, offset_formats=TIME_OFFSET_FORMATS)
    )  # fmt: skip
    ax.set_ylim(0, (top or 1.0) * 1.12)
    ax.set_xlabel("session start (UTC)", fontsize=FONT)
    ax.set_ylabel(one_line(f"{short(mine[0].row.unit or 'samples/s', NAME)} per device"), fontsize=FONT)
    ax.set_title(title, fontsize=TITLE_FONT)
    ax.tick_params(labelsize=FONT)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.01), frameon=False,
                   fontsize=FONT, ncol=LEGEND_COLUMNS)  # fmt: skip
    return fig, max(0, len(series) - LEGEND_SERIES)


def error_bar(e: Entry) -> float | None:
    """Half the spread of an entry's repeated runs around its figure, drawn as its error bar: only from
    repeated runs, and a spread compare would read (a negative one cannot be drawn at all)."""
    r = e.row
    if (r.repeats or 0) > 1 and r.spread and r.measured_per_device is not None and not untrusted(r):
        return r.spread * r.measured_per_device / 2
    return None


def plots(table: list[Entry], folder: Path) -> list[Plot]:
    """Per cell, its per-device figure session after session, as PNG files in `folder`."""
    from reprokit.report.drawing import slug

    drawn = []
    for cell_id in dict.fromkeys(e.row.cell_id for e in table):
        mine = [e for e in table if e.row.cell_id == cell_id and e.row.measured_per_device is not None]
        if not mine:
            continue
        fig, unnamed = figure(cell_id, mine)
        name = f"history-{slug(cell_id)}.png"
        # Said only under a plot that has them: a note of bars nobody can find reads as a broken plot.
        notes = ["Error bars: the spread of repeated runs."] if any(error_bar(e) for e in mine) else []
        if unnamed:
            notes.append(f"{unnamed} more device/machine series are drawn without a legend entry.")
        caption = " ".join(notes)
        fig.savefig(folder / name, format="png")
        drawn.append(Plot(cell_id, name, short(cell_id, NAME), caption, folder / name))
    return drawn


def write(results: Path, table: list[Entry]) -> Path:
    """history.html in the results folder: a plot per cell, then the sessions (when, on what machines,
    with what image and kit) and every cell of every session, in one self-contained file (the plots are
    drawn in a temporary folder and embedded; nothing else is written)."""
    with tempfile.TemporaryDirectory(prefix="reprokit-history-") as scratch:
        drawn = plots(table, Path(scratch))
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
            Block("table", headers=SESSION_HEADERS, rows=_sessions(table), nowrap=(0, 1)),
            Block("h2", "Every cell of every session"),
            Block(
                "table",
                headers=[h for _, h in PAGE_COLUMNS],
                rows=[_page_row(e) for e in table],
                nowrap=PAGE_NOWRAP,
            ),  # fmt: skip
        ]
        text = page_blocks.html(f"reprokit history: {results}", content)
    return files.write_text(results / "history.html", text)


# history.html's table of sessions: what is the same for a session's cells (the image and the kit were
# repeated on every row, pushing the table past the page's edge).
SESSION_HEADERS = ["session", "started (UTC)", "machines", "images", "kit revisions"]
# Its table of cells, and its columns that never break across lines (a session, a cell id, a machine).
PAGE_COLUMNS = [("session", "session"), ("cell_id", "cell"), ("device_name", "device"), ("machine", "machine"),
                ("measured_per_device", "per device"), ("spread", "spread"), ("repeats", "runs"),
                ("definition", "definition"), ("verdict", "verdict")]  # fmt: skip
PAGE_NOWRAP = (0, 1, 3)


def _sessions(table: list[Entry]) -> list[list[str]]:
    found: dict[str, list[Entry]] = {}
    for e in table:
        found.setdefault(e.session, []).append(e)

    def each(values: Any) -> str:
        return ", ".join(dict.fromkeys(_text(v) for v in values)) or "-"

    return [
        [name, _text(mine[0].session_started), each(e.machine for e in mine),
         each(_short_image(e.row.image_id) for e in mine), each(e.row.kit_revision for e in mine)]
        for name, mine in found.items()
    ]  # fmt: skip


def _short_image(image: str | None) -> str | None:
    return image[: len("sha256:") + IMAGE_DIGITS] if image and image.startswith("sha256:") else image


def _page_row(e: Entry) -> list[str]:
    cells = {c: _text(e.value(c)) for c, _ in PAGE_COLUMNS}
    if e.row.measured_per_device is not None and e.row.unit:
        cells["measured_per_device"] += f" {e.row.unit}"
    if e.row.spread is not None:
        cells["spread"] = f"{e.row.spread:.1%}"
    return [cells[c] for c, _ in PAGE_COLUMNS]


def _headers() -> list[str]:
    return [HEADERS.get(c, c) for c in COLUMNS]


def _text(value: Any) -> str:
    """A value as the table and the page show it: a name within its bound (--json has it whole)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return short(value, NAME)


def table_text(table: list[Entry], width: int = CELL_WIDTH) -> str:
    """The table as plain aligned columns: thousands of rows print in milliseconds (a rich table
    measures every cell to lay them out)."""

    def cut(text: str) -> str:
        # A newline in a folder's name must not split its row; no control reaches the terminal.
        return short(one_line(text[: width + 1]), width, counted=False)

    cells = [[cut(_text(e.value(c))) for c in COLUMNS] for e in table]
    headers = _headers()
    sizes = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    lines = [
        f"reprokit history ({len(table)} rows)",
        "  ".join(h.ljust(n) for h, n in zip(headers, sizes, strict=True)),
    ]
    lines.append("  ".join("-" * n for n in sizes))
    lines += ["  ".join(v.ljust(n) for v, n in zip(row, sizes, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def to_json(folder: Path, found: History) -> dict[str, Any]:
    """`history --json` (reprokit/schemas/history.schema.json): the table's rows, oldest first."""
    rows = []
    for entry in found.rows:
        r = entry.row
        world = r.world_size or 1
        repeated = (r.repeats or 0) > 1
        rows.append(
            {
                "session": entry.session,
                "started_at": entry.started_at,
                "cell_id": r.cell_id or "",
                "recipe": r.recipe,
                "variant": r.variant,
                "device_name": r.device_name,
                "host": entry.machine,
                "measured_per_device": r.measured_per_device,
                "measured_min_per_device": r.measured_min / world if repeated and r.measured_min is not None else None,
                "measured_max_per_device": r.measured_max / world if repeated and r.measured_max is not None else None,
                "spread": r.spread,
                "repeats": r.repeats,
                "definition": r.definition,
                "unit": r.unit,
                "verdict": r.verdict,
                "image_id": r.image_id,
                "kit_revision": r.kit_revision,
                "step_time_p50_s": r.step_time_p50_s,
                "kept": r.kept,
            }
        )  # fmt: skip
    skipped = [{"path": os.fsdecode(s.path), "reason": s.reason} for s in found.skipped]
    return {"results": str(folder), "sessions": found.sessions, "skipped": skipped, "rows": rows}


def print_table(table: list[Entry]) -> None:
    # Flushed: the table is the answer, shown before the page's plots are drawn.
    print(table_text(table), flush=True)
