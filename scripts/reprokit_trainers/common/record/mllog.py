"""MLPerf's training log: `:::MLLOG {json}` lines, as mlperf_logging's `mllog` writes them, into the run
directory's mlperf.log (the contract's ``mllog``), so that MLPerf's own tools (its parser and
compliance checker, the result summarizer) read a kit run as they read a submission's.

The trainers write the lines themselves rather than import `mlperf-logging`: its logger is a JSON
formatter on the standard library, but the distribution requires pandas and scipy (for its other
checkers), which the vendor images would then have to carry, resolved against their own numpy. The
format is small and fixed; the tests read every line back with mlperf_logging's parser and check the
rules that hold for any benchmark with its compliance checker (tests/test_field_formats.py).

Events (rank 0): ``init_start`` when the run directory opens, ``submission_benchmark`` (the recipe) and
``submission_platform`` (the device), ``init_stop``/``run_start`` at the meter's start,
``global_batch_size`` and ``seed``, a ``block_start``/``block_stop`` pair per logging interval counted
in samples (``samples_count``), a ``tracked_stats`` throughput after each, the after-warm-up figure,
and ``run_stop`` with its status. MLPerf's blocks are usually epochs between evaluations; the kit's
runs are step-capped, so its blocks are its logging intervals.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from reprokit_trainers.common.record.ownfiles import open_own

TOKEN = ":::MLLOG"
POINT, START, END = "POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"


def wall_ms(perf: float | None = None) -> float:
    """Epoch milliseconds now, or at an earlier ``time.perf_counter()`` reading."""
    now = time.time()
    return (now if perf is None else now - (time.perf_counter() - perf)) * 1e3


def line(key: str, value: Any = None, metadata: dict[str, Any] | None = None, event_type: str = POINT,
         time_ms: float | None = None) -> str:  # fmt: skip
    """One log line in mllog's layout (the keys in its order)."""
    record = {
        "namespace": "",
        "time_ms": round(wall_ms() if time_ms is None else time_ms),
        "event_type": event_type,
        "key": key,
        "value": value,
        "metadata": metadata or {},
    }
    return f"{TOKEN} {json.dumps(record, default=str)}"


class MlLog:
    """Appends lines to one file, flushed each time: a run killed mid-way keeps what it logged."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO | None = open_own(path, append=True)  # open for the run
        self.run_started = False
        self.block_open_at: tuple[int, float] | None = None  # (samples_count, time_ms) of the open block

    def event(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None,
              event_type: str = POINT, time_ms: float | None = None) -> None:  # fmt: skip
        if self._file is None:
            return
        self._file.write(line(key, value, metadata, event_type, time_ms) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
