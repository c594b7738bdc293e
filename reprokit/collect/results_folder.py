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
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from reprokit.contract import bounded, records, sessions
from reprokit.contract.bounded import Malformed, NotJson
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.judge.result_row import Row

RESULTS_FILE = sessions.RESULTS_JSONL
# Folders a results folder holds that are not sessions: the MLflow store's artifacts.
NOT_SESSIONS = {"mlartifacts", "mlruns"}
# The times a row holds: each one a time a run had, or nothing.
TIMES = ("started_at", "finished_at")
# Why a session is not among those history places in time, nor a candidate for latest or previous.
UNPLACED = (
    "no time recorded (session.json has no created_at, its runs no start): not placed among the "
    "sessions (give it by name)"
)


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


def stored_rows(path: Path, session_name: str, root: Path | None) -> list[Row]:
    """The rows of a results.jsonl, each checked (Row.from_json, its times); Malformed (the file, the
    line and why) when one cannot be read."""
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
        except NotJson:
            if number == len(lines):  # the last line, without its newline, not JSON: the write was cut short
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


def _run_starts(folder: Path, root: Path | None) -> Iterator[str | None]:
    """The starts a session's run directories recorded (a session not collected yet); a run directory
    that cannot be read gives none (collect says why)."""
    for run_dir in sorted(sessions.folders(folder / sessions.RUNS)):
        try:
            record = records.read(run_dir, root)
        except (Malformed, OSError):
            continue
        yield record.sysinfo.started_at or (record.summary.started_at if record.summary else None)


def started(folder: Path, rows: list[Row] | None, root: Path | None) -> datetime | None:
    """When the session started, as it recorded it (sessions.started): session.json's created_at, else
    the earliest start of its rows (`rows`: its results.jsonl), else of its run directories (None: a
    session not collected yet); None when it recorded no time."""
    starts = (r.started_at for r in rows) if rows is not None else _run_starts(folder, root)
    return sessions.started(folder, root, starts)


def _session_rows(folder: Path, root: Path | None) -> list[Row]:
    name = folder.name
    if printable(name) != name:
        raise Malformed(folder, "its folder name is not UTF-8")
    bounded.check_inside(folder, root)
    path = folder / RESULTS_FILE
    if not os.path.lexists(path):
        empty = not any(os.scandir(folder))
        raise Malformed(folder, "an empty folder" if empty else f"no {RESULTS_FILE} (not collected yet?)")
    return stored_rows(path, name, root)


def read_session(folder: Path, root: Path | None = None) -> Session:
    """One session's rows and when it started; Malformed (the file and why) when they cannot be read,
    or when the session recorded no time (UNPLACED). `root`: the results folder, which no file read
    (nor the session's folder) may leave through a link."""
    rows = _session_rows(folder, root)
    when = started(folder, rows, root)
    if when is None:
        raise Malformed(folder, UNPLACED)
    return Session(folder.name, folder, when, rows)


def _entries(results: Path) -> list[os.DirEntry[str]]:
    """What the results folder holds that may be a session (not hidden, not MLflow's), by name."""
    try:
        entries = sorted(os.scandir(results), key=lambda e: e.name)
    except OSError as exc:
        raise ReprokitError(f"the results folder {results} cannot be read: {exc.strerror or exc}") from None
    return [e for e in entries if not e.name.startswith(".") and e.name not in NOT_SESSIONS]


def _unreadable(folder: Path, exc: OSError) -> Malformed:
    return Malformed(folder, "a link loop" if exc.errno == errno.ELOOP else line(exc.strerror or str(exc)))


def read(results: Path) -> Store:
    """Every session under `results`, oldest first (by when each started), and those skipped."""
    store = Store(results)
    for entry in _entries(results):
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
            store.skipped.append(_unreadable(folder, exc))
    store.sessions.sort(key=lambda s: (s.started, s.name))
    return store


def _placed(folder: Path, results: Path) -> tuple[datetime, list[Row] | None]:
    """When a session started (`started`), and its rows when they had to be read to tell (a session.json
    without created_at); Malformed when it cannot be read as far as that, or recorded no time."""
    if printable(folder.name) != folder.name:
        raise Malformed(folder, "its folder name is not UTF-8")
    bounded.check_inside(folder, results)
    read: list[list[Row]] = []

    def starts() -> Iterator[str | None]:  # read only when session.json has no created_at
        if not os.path.lexists(folder / RESULTS_FILE):
            yield from _run_starts(folder, results)
            return
        read.append(_session_rows(folder, results))
        yield from (r.started_at for r in read[0])

    when = sessions.started(folder, results, starts())
    if when is None:
        raise Malformed(folder, UNPLACED)
    return when, (read[0] if read else None)


def newest(results: Path, which: str, skipped: list[Malformed] | None = None) -> Path:
    """`latest` or `previous`: the newest (or second newest) session under `results` by when it
    started (`started`), among the sessions whose stored files can be read; the one rule of every
    command that takes them (collect, report, compare, export-results, resume). A session folder holds
    a session.json or a results.jsonl; one not collected yet is one (collect and report make its
    results). Those left out on the way, each its file and why, are added to `skipped`: a session that
    cannot be read (one history skips too), or that recorded no time (still reachable by its name)."""
    left: list[Malformed] = []
    placed: list[tuple[datetime, str, Path, list[Row] | None]] = []
    for entry in _entries(results):
        folder = Path(entry.path)
        try:
            if not entry.is_dir() or not any(
                os.path.lexists(folder / name) for name in (sessions.SESSION_FILE, RESULTS_FILE)
            ):
                continue  # not a session (history names what it cannot read as one)
            when, rows = _placed(folder, results)
            placed.append((when, folder.name, folder, rows))
        except Malformed as exc:
            left.append(exc)
        except OSError as exc:
            left.append(_unreadable(folder, exc))
    wanted = 1 if which == "latest" else 2
    chosen: list[Path] = []
    # Newest first, each read until enough are found: an older session's damage is not this command's.
    for _, _, folder, rows in sorted(placed, key=lambda p: (p[0], p[1]), reverse=True):
        try:
            if rows is None and os.path.lexists(folder / RESULTS_FILE):
                _session_rows(folder, results)
        except Malformed as exc:
            left.append(exc)
            continue
        except OSError as exc:
            left.append(_unreadable(folder, exc))
            continue
        chosen.append(folder)
        if len(chosen) == wanted:
            break
    if skipped is not None:
        skipped += left
    if len(chosen) < wanted:
        passed = f", {len(left)} left out (each said)" if left else ""
        raise ReprokitError(
            f"{results} holds {len(chosen)} session(s) that can be read and placed in time{passed}: "
            f"there is no {which} one"
        )
    return chosen[-1]


def resolve_session(
    results: Path, name: str, skipped: list[Malformed] | None = None, holding: str = RESULTS_FILE
) -> Path:
    """A session: by folder, by name under the results folder (holding `holding`), or `latest` /
    `previous` (newest(): among those that can be read and placed in time; the others are added to
    `skipped`)."""
    if name in ("latest", "previous"):
        return newest(results, name, skipped)
    return sessions.find(name, results, holding)


def rows_of(folder: Path, root: Path | None = None) -> list[Row]:
    """One session's rows, or one line saying why they cannot be read (a session that recorded no
    time reads: it is given by name)."""
    try:
        rows = _session_rows(folder, root)
        sessions.stored(folder, root)
        return rows
    except Malformed as exc:
        raise ReprokitError(f"session {printable(folder.name)} cannot be read: {exc}") from None
