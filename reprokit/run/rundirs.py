"""The host side of the run-directory contract: reading results and recording failures.

The trainer writes `summary.json` last; when it could not (a crash, a timeout, Ctrl-C), the
runtime writes one with the failure and the log tail, keeping whatever the trainer measured.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

from reprokit.run import files
from reprokit.trainers import contract

LOG_TAIL_LINES = 30
# The run directory's file names, as the trainers' contract (reprokit_trainers/contract.json) names them.
FILES: dict[str, str] = contract()["files"]


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`; None when it is missing, unreadable, not UTF-8, not JSON or not an
    object (a file another program or a full disk left there must not stop a table)."""
    try:
        found = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


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
    status = "interrupted" if reason == "interrupted" else ("timeout" if reason == "timeout" else "failed")
    failed = {
        # Keep what the trainer measured (if it wrote anything) under the failure.
        **found,
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


def latest_step(run_dir: Path) -> dict[str, str] | None:
    """The newest throughput.csv row (the trainer appends one per logging step), read once."""
    return ThroughputTail(run_dir).latest()
