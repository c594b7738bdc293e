"""History's rows shown: the terminal's table (plain aligned columns, each value within its bound),
`history --json` (reprokit/schemas/history.schema.json), and history.html's two tables (its sessions,
and every cell of every session)."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.contract.textsafe import NAME, short
from reprokit.contract.textsafe import line as one_line

if TYPE_CHECKING:
    from reprokit.report.history_entries import Entry, History

COLUMNS = ("session", "started_at", "cell_id", "device_name", "machine", "measured_per_device", "spread",
           "repeats", "definition", "unit", "verdict", "image_id", "kit_revision")  # fmt: skip
HEADERS = {"started_at": "started (UTC)"}
# An image's digest in history.html: `sha256:` and 12 hex digits, as `docker images` shows it (the
# 64-digit digest is one unbreakable word); the terminal's table has it whole.
IMAGE_DIGITS = 12
# The terminal table: a value longer than this is cut (history.html has it whole).
CELL_WIDTH = 40

# history.html's table of sessions: what is the same for a session's cells (the image and the kit were
# repeated on every row, pushing the table past the page's edge).
SESSION_HEADERS = ["session", "started (UTC)", "machines", "images", "kit revisions"]
# Its table of cells, and its columns that never break across lines (a session, a cell id, a machine).
PAGE_COLUMNS = [("session", "session"), ("cell_id", "cell"), ("device_name", "device"), ("machine", "machine"),
                ("measured_per_device", "per device"), ("spread", "spread"), ("repeats", "runs"),
                ("definition", "definition"), ("verdict", "verdict")]  # fmt: skip
PAGE_NOWRAP = (0, 1, 3)


def sessions(table: list[Entry]) -> list[list[str]]:
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


def page_row(e: Entry) -> list[str]:
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
