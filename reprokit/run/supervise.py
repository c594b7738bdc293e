"""Supervision: the one loop every session's cells go through, whatever the runtime and container
platform. It starts a cell, follows it (clock, `--timeout`, progress), stops it on Ctrl-C, SIGTERM or
SIGHUP (recorded as interrupted), and settles its run directory; a failed cell is recorded and the
matrix goes on; complete cells of a resumed session are kept.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from reprokit.console import console
from reprokit.errors import StartFailed
from reprokit.plan import accelerators
from reprokit.plan.cells import Cell
from reprokit.plan.planner import Plan
from reprokit.run import rundirs
from reprokit.run.handles import Ended
from reprokit.run.progress import MatrixProgress
from reprokit.run.runtimes.base import Runtime, write_run_dir_inputs
from reprokit.run.wiring import runtime_for

TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


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


def run_cell(
    runtime: Runtime,
    cell: Cell,
    run_dir: Path,
    profile: accelerators.Profile,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Start one cell, follow it until it ends, a timeout stops it or Ctrl-C does, and settle its run
    directory; returns its summary. A summary the trainer wrote with status ok is never replaced."""
    try:
        handle = runtime.start(cell, run_dir, profile)
    except StartFailed as exc:
        return rundirs.finish(run_dir, None, str(exc))
    started = time.monotonic()
    reason: str | None = None
    try:
        while (ended := handle.poll()) is None:
            elapsed = time.monotonic() - started
            if timeout is not None and elapsed > timeout:
                ended, reason = handle.stop(), "timeout"
                break
            if progress is not None:
                progress(handle.describe(elapsed))
            time.sleep(handle.poll_seconds)
    except KeyboardInterrupt:
        stopped = handle.stop()
        handle.close()
        rundirs.finish(run_dir, stopped.exit_code, "interrupted")
        raise
    handle.close()
    return settle(run_dir, ended, reason)


def settle(run_dir: Path, ended: Ended, reason: str | None = None) -> dict:
    return rundirs.finish(run_dir, ended.exit_code, reason or ended.reason)


def run_cells(
    the_plan: Plan,
    session_dir: Path,
    resume: bool = False,
    timeout: float | None = None,
    runtime_options: dict | None = None,
    report_line: Callable[[Cell, dict], None] | None = None,
) -> list[dict]:
    """Run every cell; returns their summaries. Failures are recorded, never raised; an interrupt
    (Ctrl-C, SIGTERM, SIGHUP) stops the running cell, records it as interrupted and propagates."""
    runtime = runtime_for(the_plan, runtime_options)
    profile = accelerators.get(the_plan.accelerator)
    # Absolute: cells run in their own run directory, where a relative path would mean another place.
    runs = session_dir.resolve() / "runs"
    outcomes: dict[str, dict] = {}
    checked = False
    with _terminate_like_ctrl_c(), MatrixProgress(console, len(the_plan.cells)) as bars:
        for index, cell in enumerate(the_plan.cells, 1):
            run_dir = runs / cell.cell_id
            label = f"[{index}/{len(the_plan.cells)}] {cell.cell_id}"
            if resume and rundirs.is_complete(run_dir):
                outcomes[cell.cell_id] = rundirs.summary(run_dir) or {}
                bars.finish_cell(f"{label}: complete, not rerun")
                continue
            if run_dir.exists():
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
                )
            outcomes[cell.cell_id] = outcome
            if report_line is not None:
                report_line(cell, outcome)
                bars.finish_cell("")
            else:
                bars.finish_cell(describe(label, cell, outcome))
    return list(outcomes.values())


def _clear_outputs(run_dir: Path) -> None:
    """A rerun starts from a clean run directory, so no stale file mixes into the new result."""
    for path in run_dir.iterdir():
        if path.is_dir():
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
    return f"[red]{status}[/red] {label}: {outcome.get('error')}"
