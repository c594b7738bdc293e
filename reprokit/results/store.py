"""The results store: every session's results.jsonl under a results folder, read in place. A new
session shows up the moment its results.jsonl is written, a deleted one is gone with its folder:
there is nothing to import and nothing to keep in step.

Each session is read on its own, so one bad session (a truncated or non-UTF-8 results.jsonl, a
folder name that is not UTF-8, a link loop, an empty folder) is skipped and said once with its
reason, and every other session still reads. The folder's path is taken literally (`team?` and
`res[1]` are names, not patterns), and reading writes nothing (a read-only folder reads).

The folder is results/ by default, `--results DIR` or the `results` setting for a team's shared one.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from reprokit.errors import ReprokitError
from reprokit.results.row import NUMBERS, Row
from reprokit.run import session

RESULTS_FILE = session.RESULTS_JSONL
# Folders a results folder holds that are not sessions: the MLflow store's artifacts.
NOT_SESSIONS = {"mlartifacts", "mlruns"}


class Unreadable(ReprokitError):
    """A session the store cannot read; the message is the reason, in a few words."""


@dataclass
class Session:
    name: str
    folder: Path
    started: datetime
    rows: list[Row]


@dataclass
class Skipped:
    name: str
    reason: str


@dataclass
class Store:
    folder: Path
    sessions: list[Session] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def skipped_line(self) -> str | None:
        """`skipped 2 sessions: a: results.jsonl truncated at line 12; b: ...`, None when none was."""
        if not self.skipped:
            return None
        count = len(self.skipped)
        what = "; ".join(f"{s.name}: {s.reason}" for s in self.skipped)
        return f"skipped {count} session{'s' if count > 1 else ''} under {self.folder}: {what}"


def printable(name: str) -> str:
    """A folder name as text, whatever bytes it holds (a name that is not UTF-8 shows escaped)."""
    return os.fsencode(name).decode("utf-8", errors="backslashreplace")


def _rows(path: Path, session_name: str) -> list[Row]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise Unreadable(f"{RESULTS_FILE} cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(
            f"{RESULTS_FILE} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    rows = []
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            found = json.loads(line)
        except ValueError:
            if number == len(lines):  # the last line, without its newline: the write was cut short
                raise Unreadable(f"{RESULTS_FILE} truncated at line {number}") from None
            raise Unreadable(f"{RESULTS_FILE} line {number} is not JSON") from None
        if not isinstance(found, dict):
            raise Unreadable(f"{RESULTS_FILE} line {number} is not a JSON object")
        for key in NUMBERS & found.keys():
            value = found[key]
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise Unreadable(f"{RESULTS_FILE} line {number}: {key} is {value!r}, not a number")
        found["session"] = session_name
        try:
            rows.append(Row.from_json(found))
        except (TypeError, ValueError) as exc:  # a list or a departure of another shape
            raise Unreadable(f"{RESULTS_FILE} line {number}: {exc}") from None
    return rows


def _started(folder: Path, rows: list[Row]) -> datetime:
    """When the session started: session.json's created_at, else its first cell's start, else the
    folder's modification time."""
    found = session.parse_time(session.stored(folder).get("created_at"))
    if found is None:
        starts = [t for t in (session.parse_time(r.started_at) for r in rows) if t is not None]
        found = min(starts) if starts else None
    return found or session.started(folder)


def read_session(folder: Path) -> Session:
    """One session's rows; Unreadable (its reason) when they cannot be read."""
    name = folder.name
    if printable(name) != name:
        raise Unreadable("its folder name is not UTF-8")
    path = folder / RESULTS_FILE
    if not path.is_file():
        empty = not any(os.scandir(folder))
        raise Unreadable("an empty folder" if empty else f"no {RESULTS_FILE} (not collected yet?)")
    rows = _rows(path, name)
    return Session(name, folder, _started(folder, rows), rows)


def read(results: Path) -> Store:
    """Every session under `results`, oldest first (by when each started), and those skipped."""
    store = Store(results)
    try:
        entries = sorted(os.scandir(results), key=lambda e: e.name)
    except OSError as exc:
        raise ReprokitError(f"the results folder {results} cannot be read: {exc.strerror or exc}") from None
    for entry in entries:
        if entry.name.startswith(".") or entry.name in NOT_SESSIONS:
            continue
        try:
            if not entry.is_dir():
                if entry.is_symlink() and not os.path.exists(entry.path):
                    store.skipped.append(Skipped(printable(entry.name), "a link to nothing"))
                continue
            store.sessions.append(read_session(Path(entry.path)))
        except Unreadable as exc:
            store.skipped.append(Skipped(printable(entry.name), str(exc)))
        except OSError as exc:
            why = "a link loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            store.skipped.append(Skipped(printable(entry.name), why))
    store.sessions.sort(key=lambda s: (s.started, s.name))
    return store


def resolve_session(results: Path, name: str) -> Path:
    """A session with results: by folder, by name under the results folder, or `latest` / `previous`."""
    return session.find(name, results, RESULTS_FILE)


def rows_of(folder: Path) -> list[Row]:
    """One session's rows, or one line saying why they cannot be read."""
    try:
        return read_session(folder).rows
    except Unreadable as exc:
        raise ReprokitError(f"session {printable(folder.name)} cannot be read: {exc}") from None
