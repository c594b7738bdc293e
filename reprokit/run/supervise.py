"""Supervision: the one loop every session's cells go through, whatever the runtime and container
platform. It starts a cell, follows it (clock, `--timeout`, progress), stops it on Ctrl-C, SIGTERM or
SIGHUP (recorded as interrupted), and settles its run directory; a failed cell is recorded and the
matrix goes on; complete cells of a resumed session are kept.

Cells that run on this machine run one session at a time (machinelock). Storage that refuses a write
(a full disk, a read-only mount, a permission) ends the cell as failed with one line naming the path
and the errno, and stops the session: every next cell would fail the same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.markup import escape

from reprokit.contract import files, rundirs, sessions
from reprokit.contract.console import console
from reprokit.contract.errors import ReprokitError, StartFailed
from reprokit.contract.textsafe import line
from reprokit.plan import accelerators
from reprokit.plan.cells import Cell
from reprokit.plan.planner import Plan
from reprokit.run import machinelock, supervisor_file
from reprokit.run.containers.base import LOCAL
from reprokit.run.handles import Ended, Handle
from reprokit.run.plugin_options import runtime_for
from reprokit.run.progress import MatrixProgress
from reprokit.run.runtimes.base import Runtime, write_run_dir_inputs

TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class SessionStopped(files.StorageFailed):
    """The storage refused a write: the session stopped after recording what it could (`outcomes`)."""

    def __init__(self, message: str, outcomes: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.outcomes = outcomes


def _interrupt(signum: int, frame: object) -> None:
    # Once: a second SIGTERM (a batch system repeats it) must not cut short stopping the cell.
    for sig in TERMINATION_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def _terminate_like_ctrl_c() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, `kill`, a batch system's stop) stop a session the way
    Ctrl-C does: the running cell is stopped and recorded as interrupted. Python's default would
    exit at once and leave the trainer running, orphaned, in its own session."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in TERMINATION_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _not_interrupted_again() -> Iterator[None]:
    """While an interrupted cell is stopped and recorded, a second Ctrl-C (or SIGTERM, SIGHUP) waits
    for it: cut short, it would leave the trainer or its container running and the cell unrecorded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, *TERMINATION_SIGNALS)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupted(run_dir: Path, handle: Handle | None) -> None:
    """Stop the cell (if it started), release what it held (its container), and record it as
    interrupted; what can be recorded is (a full disk must not turn Ctrl-C into a traceback)."""
    with _not_interrupted_again():
        console.print(
            "Interrupted: stopping the running cell and recording it (a second Ctrl-C waits for this)."
        )
        stopped = handle.stop() if handle is not None else Ended(None)
        if handle is not None:
            handle.close()
        with contextlib.suppress(OSError):
            rundirs.finish(run_dir, stopped.exit_code, "interrupted")
            supervisor_file.clear(run_dir)


def run_cell(
    runtime: Runtime,
    cell: Cell,
    run_dir: Path,
    profile: accelerators.Profile,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = None,
    timeout_set_by: str | None = None,
) -> dict:
    """Start one cell, follow it until it ends, a timeout stops it or Ctrl-C does, and settle its run
    directory; returns its summary. A summary the trainer wrote with status ok is never replaced. A
    timeout's error names the limit and `timeout_set_by` (what set it: `--timeout 600`)."""
    try:
        handle = runtime.start(cell, run_dir, profile)
    except StartFailed as exc:
        return rundirs.finish(run_dir, None, str(exc))
    except KeyboardInterrupt:
        _interrupted(run_dir, None)  # the runtime released what it had started
        raise
    try:
        _record(handle, run_dir)
    except KeyboardInterrupt:
        _interrupted(run_dir, handle)
        raise
    except BaseException:
        handle.stop()
        handle.close()
        raise
    started = time.monotonic()
    reason: str | None = None
    try:
        while (ended := handle.poll()) is None:
            elapsed = time.monotonic() - started
            if timeout is not None and elapsed > timeout:
                limit = f"{rundirs.seconds_text(timeout)} s" + (
                    f" ({timeout_set_by})" if timeout_set_by else ""
                )
                ended, reason = handle.stop(), rundirs.timed_out(limit)
                break
            if progress is not None:
                progress(handle.describe(elapsed))
            time.sleep(handle.poll_seconds)
    except KeyboardInterrupt:
        _interrupted(run_dir, handle)
        raise
    handle.close()
    try:
        return settle(run_dir, ended, reason)
    finally:
        with contextlib.suppress(OSError):  # an unlink needs no space; a read-only folder keeps it
            supervisor_file.clear(run_dir)


def _record(handle: Handle, run_dir: Path) -> None:
    process = handle.process()
    if process is not None:
        supervisor_file.record(run_dir, *process)


def settle(run_dir: Path, ended: Ended, reason: str | None = None) -> dict:
    return rundirs.finish(run_dir, ended.exit_code, reason or ended.reason)


def run_cells(
    the_plan: Plan,
    session_dir: Path,
    resume: bool = False,
    timeout: float | None = None,
    runtime_options: dict | None = None,
    report_line: Callable[[Cell, dict], None] | None = None,
    timeout_set_by: str | None = None,
) -> list[dict]:
    """Run every cell; returns their summaries. Failures are recorded, never raised; an interrupt
    (Ctrl-C, SIGTERM, SIGHUP) stops the running cell, records it as interrupted and propagates. A
    timeout names its limit and what set it (`timeout_set_by`, else `--timeout N`)."""
    if timeout is not None and timeout_set_by is None:
        timeout_set_by = f"--timeout {rundirs.seconds_text(timeout)}"
    runtime = runtime_for(the_plan, runtime_options)
    profile = the_plan.profile
    # Absolute: cells run in their own run directory, where a relative path would mean another place.
    runs = session_dir.resolve() / sessions.RUNS
    if runs.is_symlink():
        # Written through, it would put this session's runs in another folder (another session's, a place
        # outside the results folder, which no reader of results follows): refused before any cell runs.
        raise ReprokitError(
            f"{line(runs)} is a link to {line(os.path.realpath(runs))}: a session's runs are written in its "
            f"own folder only; move them back (rm {line(runs)}; mv {line(os.path.realpath(runs))} "
            f"{line(runs)}) and run it again"
        )
    outcomes: dict[str, dict] = {}
    with _terminate_like_ctrl_c(), MatrixProgress(console, len(the_plan.cells)) as bars:
        # Cells on this machine: one session at a time (a Slurm job's run.sh locks its node instead).
        lock = (
            machinelock.held(session_dir, bars.print)
            if runtime.launches == LOCAL
            else contextlib.nullcontext()
        )
        with lock:
            stopped = _run_each(
                the_plan, runtime, profile, runs, resume, timeout, timeout_set_by, report_line, bars, outcomes
            )
    if stopped is not None:
        raise SessionStopped(stopped, list(outcomes.values()))
    return list(outcomes.values())


def _run_each(
    the_plan: Plan,
    runtime: Runtime,
    profile: accelerators.Profile,
    runs: Path,
    resume: bool,
    timeout: float | None,
    timeout_set_by: str | None,
    report_line: Callable[[Cell, dict], None] | None,
    bars: MatrixProgress,
    outcomes: dict[str, dict],
) -> str | None:
    """The cells in order, each outcome into `outcomes`; why the session stopped early, if it did."""
    checked = False
    for index, cell in enumerate(the_plan.cells, 1):
        run_dir = runs / cell.cell_id
        label = f"[{index}/{len(the_plan.cells)}] {cell.cell_id}"
        if resume and rundirs.is_complete(run_dir):
            outcomes[cell.cell_id] = rundirs.summary(run_dir) or {}
            bars.finish_cell(f"{label}: complete, not rerun")
            continue
        stopped = None
        try:
            if run_dir.exists() or run_dir.is_symlink():
                _clear_outputs(run_dir)
            needs = cell.needed_cells().values()
            failed_needs = [c for c in needs if outcomes.get(c, {}).get("status") != "ok"]
            if failed_needs:
                # cell.json and run.sh still go in: the row says what was skipped, and how to run it.
                write_run_dir_inputs(cell, profile, run_dir)
                outcome = rundirs.skip(run_dir, f"needs {', '.join(failed_needs)}, which did not complete")
            else:
                if not checked:  # once, before the first cell: no engine, no cluster, no image
                    runtime.check(profile)
                    checked = True
                steps = cell.args.get("max_steps")
                bars.start_cell(label, steps if isinstance(steps, int) and steps > 0 else None)
                outcome = run_cell(
                    runtime,
                    cell,
                    run_dir,
                    profile,
                    timeout=timeout,
                    progress=lambda text, run_dir=run_dir: bars.update(run_dir, text),
                    timeout_set_by=timeout_set_by,
                )
        except OSError as exc:
            if not files.is_storage_failure(exc):
                raise
            stopped = f"{cell.cell_id}: the kit could not write {files.describe(exc)}"
            outcome = {"status": "failed", "error": f"the kit could not write {files.describe(exc)}"}
        outcomes[cell.cell_id] = outcome
        if report_line is not None:
            report_line(cell, outcome)
            bars.finish_cell("")
        else:
            bars.finish_cell(describe(label, cell, outcome))
        if stopped is not None:
            return stopped
    return None


def _clear_outputs(run_dir: Path) -> None:
    """A rerun starts from a clean run directory, so no stale file mixes into the new result. A link
    (the run directory itself, or in it) is removed, never followed: what it leads to is not the
    session's to clear, and the rerun writes into a folder of its own."""
    if run_dir.is_symlink():
        run_dir.unlink()
        return
    for path in run_dir.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def describe(label: str, cell: Cell, outcome: dict) -> str:
    status = outcome.get("status")
    if status == "ok":
        rate = outcome.get("samples_per_second")
        rate_text = (
            f"{rate:,.2f} {cell.unit}" if isinstance(rate, int | float) else "no rate (no step after warm-up)"
        )
        return f"[green]ok[/green]     {label}: {rate_text} over {outcome.get('steps')} steps"
    # Escaped: an error's own brackets ("[Errno 28]") are not markup.
    return f"[red]{status}[/red] {label}: {escape(str(outcome.get('error')))}"
