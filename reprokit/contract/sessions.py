"""A session folder's files, as every stage names and reads them: results/<session>/ with session.json
(the request and its plan), runs/<cell>/ and what results make of them. The one home of the session's
file names; making a session and re-planning one (`--resume`) are run/session.py's.

Sessions are ordered by when they started (session.json's `created_at`, UTC with its offset, else
the earliest start their runs recorded: `started`), never by their folder names (a name is the local
time of the machine that made it, readable but no order between machines in two time zones, or
across a change of daylight saving time) nor by a file's modification time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from reprokit.contract import bounded
from reprokit.contract.errors import ReprokitError

RESULTS_DIR = Path("results")
SESSION_FILE = "session.json"
RUNS = "runs"  # runs/<cell>/: one run directory per cell
RESULTS_CSV = "results.csv"
RESULTS_JSONL = "results.jsonl"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
# Every cell's event files side by side, for one `tensorboard --logdir` (a copy: the run directories hold them).
TENSORBOARD = "tensorboard"
# How the trainers and kits before session times in UTC wrote a time (local, with its offset).
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


def now() -> str:
    """This moment in UTC, ISO 8601 with its offset: what session.json records."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def parse_time(text: object) -> datetime | None:
    """A recorded time as an aware datetime: ISO 8601 with an offset (any kit's), or without one
    (read as this machine's local time); None when it is not a time, or not one a run had (before
    1970, after 2200: bounded.py)."""
    if not isinstance(text, str):
        return None
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        try:
            found = datetime.strptime(text, TIME_FORMAT)
        except ValueError:
            return None
    try:
        found = found if found.tzinfo else found.astimezone()
        return found if bounded.EARLIEST <= found <= bounded.LATEST else None
    except (OverflowError, ValueError, OSError):
        return None


class CellPlan(BaseModel):
    """A cell as the host planned it (plan/cells.py's Cell): session.json lists these keys of each cell
    (run/session.py writes them) and each run's cell.json holds them among the rest (records.CellRecord)."""

    model_config = ConfigDict(extra="allow")
    cell_id: str | None = None
    recipe: str | None = None
    variant: str | None = None
    scale: str | None = None
    accelerator: str | None = None
    devices: int | None = Field(default=None, ge=1)
    nodes: int | None = Field(default=None, ge=1)
    baseline: bool = False
    recipe_hash: str | None = None


class PlannedCell(CellPlan):
    """A cell as session.json plans it: one without its id is not one the kit wrote."""

    cell_id: str


class SessionFile(BaseModel):
    """session.json's schema: what the readers of a session take from it."""

    model_config = ConfigDict(extra="allow")
    session: str | None = None
    created_at: str | None = None
    kit_revision: str | None = None
    request: dict[str, Any] = Field(default_factory=dict)
    accelerator: str | None = None
    scale: str | None = None
    runtime: str | None = None
    container: str | None = None
    cells: list[PlannedCell] = Field(default_factory=list)
    resumed_at: list[str] = Field(default_factory=list)


def stored(session_dir: Path, root: Path | None = None) -> dict[str, Any]:
    """The plan `inv reproduce` stored when the session started (empty for a folder without one);
    bounded.Malformed (the file and why) for a session.json that is not one the kit wrote."""
    path = session_dir / SESSION_FILE
    found = bounded.json_object(path, root)
    if found is None:
        return {}
    bounded.checked(SessionFile, found, path)
    bounded.time_of(found.get("created_at"), path, "created_at")
    for when in found.get("resumed_at") or []:
        bounded.time_of(when, path, "resumed_at")
    return found


def started(folder: Path, root: Path | None = None, starts: Iterable[object] = ()) -> datetime | None:
    """When a session started, as it recorded it: session.json's created_at, else the earliest of
    `starts` (the starts its rows or run directories recorded: read only when there is no created_at);
    None when it recorded no time, and it cannot be placed among the others. Never a file's
    modification time: a copy, a backup or `inv report` of an old session changes that, not when the
    session ran. The one rule of a session's time: history's order and `latest` / `previous` take it.
    bounded.Malformed for a session.json that is not one the kit wrote (or a link out of `root`)."""
    found = parse_time(stored(folder, root).get("created_at"))
    if found is not None:
        return found
    times = [t for t in (parse_time(s) for s in starts) if t is not None]
    return min(times) if times else None


def folders(base: Path) -> list[Path]:
    """The folders directly under `base`, its path taken literally (`team?`, `res[1]` are names, not
    patterns); a broken link or a link loop is not a folder."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            if entry.is_dir():
                found.append(Path(entry.path))
        except OSError:
            continue
    return found


def find(name: str, base: Path | None = None, holding: str = SESSION_FILE) -> Path:
    """A session by folder, or by name under the results folder `base` (`latest` and `previous` are
    results_folder.resolve_session's: which sessions can be read and placed in time). A session folder
    that is a link out of its results folder is refused: results are read and written inside it only."""
    base = base or RESULTS_DIR
    for candidate, root in ((Path(name), Path(name).parent), (base / name, base)):
        if (candidate / holding).is_file():
            bounded.check_inside(candidate, root, f"its results folder {root}")
            return candidate
    raise ReprokitError(
        f"no session {name!r} with {holding} under {base} (give a session folder, a name in it, latest or previous)"
    )
