"""The results store: every session's results.jsonl under a results folder, read in place. A new
session shows up the moment its results.jsonl is written, a deleted one is gone with its folder:
there is nothing to import and nothing to keep in step.

Each session is read on its own, through the bounded reader (run/bounded.py), so one bad session (a
truncated or non-UTF-8 results.jsonl, a session.json nested 100,000 deep or dated year 1, a row whose
number is text or NaN, a folder name that is not UTF-8, a link loop, a link out of the results folder,
an empty folder) is skipped and said once, `skipped: <path>: <reason>`, and every other session still
reads. The folder's path is taken literally (`team?` and `res[1]` are names, not patterns), and reading
writes nothing (a read-only folder reads).

The folder is results/ by default, `--results DIR` or the `results` setting for a team's shared one.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from reprokit.contract import bounded, sessions
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.judge.result_row import Row

RESULTS_FILE = sessions.RESULTS_JSONL
# Folders a results folder holds that are not sessions: the MLflow store's artifacts.
NOT_SESSIONS = {"mlartifacts", "mlruns"}
# The times a row holds: each one a time a run had, or nothing.
TIMES = ("started_at", "finished_at")


@dataclass
class Session:
    name: str
    folder: Path
    started: datetime
    rows: list[Row]


@dataclass
class Store:
    folder: Path
    sessions: list[Session] = field(default_factory=list)
    skipped: list[Malformed] = field(default_factory=list)

    def skipped_lines(self) -> list[str]:
        """`skipped: <path>: <reason>`, one line per session left out."""
        return [s.skipped() for s in self.skipped]


def printable(name: str) -> str:
    """A folder name as text, whatever bytes it holds (a name that is not UTF-8 shows escaped)."""
    return os.fsencode(name).decode("utf-8", errors="backslashreplace")


def _rows(path: Path, session_name: str, root: Path | None) -> list[Row]:
    data = bounded.read_bytes(path, root, bounded.MAX_LINES_BYTES)
    if data is None:
        raise Malformed(path, "not there")
    lines = bounded.text(data, path).split("\n")
    rows = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            found = bounded.parse(text, path, f"line {number}: ")
        except Malformed:
            if number == len(lines):  # the last line, without its newline: the write was cut short
                raise Malformed(path, f"truncated at line {number}") from None
            raise
        if not isinstance(found, dict):
            raise Malformed(path, f"line {number} is not a JSON object")
        found["session"] = session_name
        try:
            row = Row.from_json(found)
        except (TypeError, ValueError) as exc:  # a value of another type, a departure of another shape
            raise Malformed(path, f"line {number}: {line(str(exc).splitlines()[0])}") from None
        for key in TIMES:
            bounded.time_of(getattr(row, key), path, f"line {number}: {key}")
        rows.append(row)
    return rows


def _started(folder: Path, rows: list[Row], root: Path | None) -> datetime:
    """When the session started: session.json's created_at, else its first cell's start, else the
    folder's modification time."""
    found = sessions.parse_time(sessions.stored(folder, root).get("created_at"))
    if found is None:
        starts = [t for t in (sessions.parse_time(r.started_at) for r in rows) if t is not None]
        found = min(starts) if starts else None
    return found or sessions.started(folder, root)


def read_session(folder: Path, root: Path | None = None) -> Session:
    """One session's rows; Malformed (the file and why) when they cannot be read. `root`: the results
    folder, which no file read (nor the session's folder) may leave through a link."""
    name = folder.name
    if printable(name) != name:
        raise Malformed(folder, "its folder name is not UTF-8")
    bounded.check_inside(folder, root)
    path = folder / RESULTS_FILE
    if not os.path.lexists(path):
        empty = not any(os.scandir(folder))
        raise Malformed(folder, "an empty folder" if empty else f"no {RESULTS_FILE} (not collected yet?)")
    rows = _rows(path, name, root)
    return Session(name, folder, _started(folder, rows, root), rows)


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
        folder = Path(entry.path)
        try:
            if not entry.is_dir():
                if entry.is_symlink() and not os.path.exists(entry.path):
                    store.skipped.append(Malformed(folder, "a link to nothing"))
                continue
            store.sessions.append(read_session(folder, results))
        except Malformed as exc:
            store.skipped.append(exc)
        except OSError as exc:
            why = "a link loop" if exc.errno == errno.ELOOP else line(exc.strerror or str(exc))
            store.skipped.append(Malformed(folder, why))
    store.sessions.sort(key=lambda s: (s.started, s.name))
    return store


def resolve_session(results: Path, name: str, skipped: list[Malformed] | None = None) -> Path:
    """A session with results: by folder, by name under the results folder, or `latest` / `previous`
    (among those that can be read; the others are added to `skipped`)."""
    return sessions.find(name, results, RESULTS_FILE, skipped)


def rows_of(folder: Path, root: Path | None = None) -> list[Row]:
    """One session's rows, or one line saying why they cannot be read."""
    try:
        return read_session(folder, root).rows
    except Malformed as exc:
        raise ReprokitError(f"session {printable(folder.name)} cannot be read: {exc}") from None
