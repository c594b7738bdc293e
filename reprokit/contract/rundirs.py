"""The host side of the run-directory contract: reading results and recording failures.

The trainer writes `summary.json` last; when it could not (a crash, a timeout, Ctrl-C), the
runtime writes one with the failure and the log tail, keeping whatever the trainer measured.
"""

from __future__ import annotations

import csv
import io
import math
import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

from reprokit.contract import bounded, files
from reprokit.contract.bounded import Malformed
from reprokit.contract.textsafe import line as one_line
from reprokit.contract.trainers import contract

LOG_TAIL_LINES = 30
# The run directory's file names, as the trainers' contract (reprokit_trainers/contract.json) names them.
FILES: dict[str, str] = contract()["files"]
SCHEMA_VERSION: int = contract()["schema_version"]


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`; None when it is missing, or not a JSON object the bounded reader
    takes (too large or deep, not UTF-8, not JSON): the run side's view, where such a file is one no
    trainer finished. The results side reads through bounded.py and names what it skips."""
    try:
        return bounded.json_object(path)
    except Malformed:
        return None


def summary(run_dir: Path) -> dict[str, Any] | None:
    return read_json(run_dir / FILES["summary"])


def is_complete(run_dir: Path) -> bool:
    found = summary(run_dir)
    return bool(found) and found.get("status") == "ok"


def log_tail(run_dir: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    log = run_dir / FILES["stdout"]
    if not log.exists():
        return []
    with open(log, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 64 * 1024))
        text = fh.read().decode("utf-8", errors="replace")
    return [line.rstrip() for line in text.splitlines()[-lines:]]


def _last_error_line(tail: list[str]) -> str | None:
    for line in reversed(tail):
        stripped = line.strip()
        if stripped and not stripped.startswith(("File ", "^", "~")):
            return stripped[:300]
    return None


def signal_reason(exit_code: int | None) -> str | None:
    """How a process the kit followed was killed, from its exit code: negative (a signal, as Popen
    reports it) or 128 + N (as a shell and Slurm report it); None when it exited on its own."""
    if exit_code is None or exit_code == 0:
        return None
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 128 + 65 else None
    if number is None:
        return None
    try:
        name = signal.Signals(number).name
    except ValueError:
        return None
    why = " (the kernel's out-of-memory killer, or a kill -9)" if number == signal.SIGKILL else ""
    return f"the trainer was killed by {name} (signal {number}){why}"


TIMEOUT = "timeout"


def timed_out(limit: str) -> str:
    """A timeout's error: the limit it hit, and what set it (`600 s (--timeout 600)`)."""
    return f"{TIMEOUT} after {limit}"


def seconds_text(value: float) -> str:
    """Seconds as a user gives them: 600, 2.5 (never 2.592e+06)."""
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"


def _status_of(reason: str | None) -> str:
    if reason == "interrupted":
        return "interrupted"
    return TIMEOUT if reason == TIMEOUT or (reason or "").startswith(timed_out("")) else "failed"


def finish(run_dir: Path, exit_code: int | None, reason: str | None = None) -> dict[str, Any]:
    """Settle a cell's outcome after its process ended; returns the final summary.

    A summary the trainer wrote with status ok is the measurement, complete: it is kept as it is
    whatever follows it (the kit stopped by Ctrl-C or a timeout in the moment between the trainer's
    last write and its exit, a crash while tearing down the process group). Writing the failure can
    fail in turn (a full disk, a read-only run directory): that OSError is the caller's to report."""
    found = summary(run_dir) or {}
    if found.get("status") == "ok":
        return found
    tail = log_tail(run_dir)
    if exit_code == 0 and not found:
        reason = reason or "the trainer exited 0 without writing summary.json"
    status = _status_of(reason)
    failed = {
        # Keep what the trainer measured (if it wrote anything) under the failure.
        **found,
        # Typed by the trainers' summary schema, as theirs (a failure an older kit wrote keeps its version).
        "schema_version": found.get("schema_version", SCHEMA_VERSION),
        "status": status,
        "exit_code": exit_code,
        # A killed trainer's last line is whatever it printed before (a progress bar): the signal says more.
        "error": reason or signal_reason(exit_code) or _last_error_line(tail) or f"exit code {exit_code}",
        "log_tail": tail,
        "finished_at": datetime.now().astimezone().isoformat(timespec="milliseconds"),
    }
    files.make_dir(run_dir)
    files.write_json(run_dir / FILES["summary"], failed)
    return failed


def skip(run_dir: Path, reason: str) -> dict[str, Any]:
    files.make_dir(run_dir)
    skipped = {
        "schema_version": SCHEMA_VERSION,
        "status": "skipped",
        "error": reason,
        "finished_at": datetime.now().astimezone().isoformat(timespec="milliseconds"),
    }
    files.write_json(run_dir / FILES["summary"], skipped)
    return skipped


class ThroughputTail:
    """The newest throughput.csv row of a run directory, read incrementally: each call reads only
    what the trainer appended since the last one (the file grows to millions of rows on long runs,
    and the progress line asks twice a second); a first look at a long file reads its header and
    its last lines only. A file that shrank (a rerun) is read again from its start."""

    TAIL_BYTES = 64 * 1024

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / FILES["throughput"]
        self._reset()

    def _reset(self) -> None:
        self.offset = 0
        self.header: list[str] | None = None
        self.partial = b""
        self.row: dict[str, str] | None = None

    def latest(self) -> dict[str, str] | None:
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < self.offset:
                    self._reset()
                if self.header is None:
                    first = fh.readline()
                    if not first.endswith(b"\n"):
                        return None
                    self.header = _fields(first)
                    self.offset = max(len(first), size - self.TAIL_BYTES)
                    # Landing inside a row: the bytes up to the next newline are not a row.
                    self.partial = b"" if self.offset == len(first) else None  # type: ignore[assignment]
                fh.seek(self.offset)
                chunk = fh.read(max(0, size - self.offset))
        except OSError:
            return self.row
        self.offset += len(chunk)
        if self.partial is None:
            if b"\n" not in chunk:
                self.offset -= len(chunk)
                return self.row
            chunk = chunk.split(b"\n", 1)[1]
            self.partial = b""
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        for line in reversed(lines):
            if line.strip():
                self.row = dict(zip(self.header, _fields(line), strict=False))
                break
        return self.row


def _fields(line: bytes) -> list[str]:
    return line.decode("utf-8", errors="replace").rstrip("\r\n").split(",")


def curves(
    run_dir: Path, columns: tuple[str, ...] = ("samples_per_second", "loss"), root: Path | None = None
) -> dict[str, list[tuple[int, float]]]:
    """throughput.csv's `columns` per logged step: (step, value) where the value is a finite number
    (a NaN loss is a diverged step, not a point). Read bounded (run/bounded.py): Malformed for a file
    the kit will not read (too large, not UTF-8, a link out of `root`, no step column, a row whose step
    is not a step or whose value is not a number); a last row cut short (a trainer killed mid-write) is
    left out."""
    path = run_dir / FILES["throughput"]
    found: dict[str, list[tuple[int, float]]] = {name: [] for name in columns}
    data = bounded.read_bytes(path, root, bounded.MAX_LINES_BYTES)
    if not data:
        return found
    text = bounded.text(data, path)
    if "\x00" in text:  # no trainer writes one: a disk's or a copy's damage
        raise Malformed(path, f"holds a NUL byte (offset {text.index(chr(0))})")
    lines = text.split("\n")
    cut = not text.endswith("\n")
    try:
        header = next(csv.reader([lines[0]]))
        if "step" not in header:
            raise Malformed(path, f"its header has no step column ({one_line(lines[0][:60])})")
        records = enumerate(csv.reader(io.StringIO("\n".join(lines[1:]))), 2)
        for number, fields in records:
            if not fields:
                continue
            record = dict(zip(header, fields, strict=False))
            try:
                step = int(record.get("step") or "")
                values = {name: float(record[name]) if record.get(name) else None for name in columns}
            except ValueError:
                if cut and number == len(lines):
                    break
                shown = one_line(",".join(fields)[:60])
                raise Malformed(path, f"line {number} is not a row of numbers ({shown})") from None
            for name, value in values.items():
                if value is not None and math.isfinite(value):
                    found[name].append((step, value))
    except csv.Error as exc:
        raise Malformed(path, f"not CSV ({exc})") from None
    return found


def latest_step(run_dir: Path) -> dict[str, str] | None:
    """The newest throughput.csv row (the trainer appends one per logging step), read once."""
    return ThroughputTail(run_dir).latest()
