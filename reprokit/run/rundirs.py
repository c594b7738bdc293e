"""The host side of the run-directory contract: reading results and recording failures.

The trainer writes `summary.json` last; when it could not (a crash, a timeout, Ctrl-C), the
runtime writes one with the failure and the log tail, keeping whatever the trainer measured.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from reprokit.trainers import contract

LOG_TAIL_LINES = 30
# The run directory's file names, as the trainers' contract (reprokit_trainers/contract.json) names them.
FILES: dict[str, str] = contract()["files"]


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


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


def finish(run_dir: Path, exit_code: int | None, reason: str | None = None) -> dict[str, Any]:
    """Settle a cell's outcome after its process ended; returns the final summary.

    A summary the trainer wrote with status ok is the measurement, complete: it is kept as it is
    whatever follows it (the kit stopped by Ctrl-C or a timeout in the moment between the trainer's
    last write and its exit, a crash while tearing down the process group)."""
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
        "error": reason or _last_error_line(tail) or f"exit code {exit_code}",
        "log_tail": tail,
        "finished_at": datetime.now().astimezone().isoformat(timespec="milliseconds"),
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / FILES["summary"], failed)
    return failed


def skip(run_dir: Path, reason: str) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    skipped = {
        "status": "skipped",
        "error": reason,
        "finished_at": datetime.now().astimezone().isoformat(timespec="milliseconds"),
    }
    write_json_atomic(run_dir / FILES["summary"], skipped)
    return skipped


def latest_step(run_dir: Path) -> dict[str, str] | None:
    """The newest throughput.csv row (the trainer appends one per logging step)."""
    path = run_dir / FILES["throughput"]
    if not path.exists():
        return None
    lines = path.read_text().strip().splitlines()
    if len(lines) < 2:
        return None
    return dict(zip(lines[0].split(","), lines[-1].split(","), strict=False))


def last_throughput(run_dir: Path) -> str | None:
    """The newest throughput.csv row as a progress line."""
    row = latest_step(run_dir)
    if row is None:
        return None
    return f"step {row.get('step')}  {row.get('samples_per_second')}/s  loss {row.get('loss') or '-'}"
