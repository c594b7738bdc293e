"""An acceptance run's cells, run as the session's one loop runs any cell (the runtime starts it, its
handle is polled, stopped on a timeout or Ctrl-C, and its run directory settled), but each on its own
target: every node's Slurm job at once (one job per node, pinned with --nodelist), or each device of
this machine alone in turn (its visibility variable set, the machine's lock held as for any session).

A node's job that waits while the node is drained or down never starts: it is cancelled and its run
recorded as failed with the node's state and Slurm's reason, so that the others are judged without it
and it is named, never dropped.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reprokit.contract import files, rundirs
from reprokit.contract.errors import ReprokitError
from reprokit.fleet.targets import NODE, Target
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run import supervisor_file
from reprokit.run.containers.base import Container, Launch
from reprokit.run.handles import Ended, Handle
from reprokit.run.runtimes.base import Runtime
from reprokit.run.runtimes.slurm import SlurmRuntime

# Node states (sinfo %T) in which a waiting job never starts on it.
UNAVAILABLE = ("drain", "down", "fail", "maint", "unknown", "not_responding", "power_down", "inval")


class OnTarget(Container):
    """The session's container platform, with the target's environment added: exported in the Slurm
    job (REPROKIT_MACHINE, the node's name, which history groups by), or set for run.sh on this
    machine (the one visible device)."""

    def __init__(self, inner: Container, target: Target) -> None:
        super().__init__(inner.options)
        self.inner, self.target = inner, target
        self.name = inner.name  # type: ignore[misc]
        self.launches = inner.launches  # type: ignore[misc]

    def check(self, profile: Profile, runtime: str) -> None:
        self.inner.check(profile, runtime)

    def launch(self, cell: Cell, run_dir: Path, profile: Profile, how: str, mount: Path) -> Launch:
        found = self.inner.launch(cell, run_dir, profile, how, mount)
        exported = [f"export {key}={shlex.quote(value)}" for key, value in self.target.env.items()]
        return replace(
            found,
            env={**found.env, **self.target.env},
            setup=[*found.setup, f"# {self.target.kind} {self.target.name} of an acceptance run", *exported],
        )


def runtime_on(runtime: Runtime, target: Target) -> Runtime:
    """The session's runtime, pinned to `target`: a Slurm job on that node alone, or run.sh here with
    that device alone."""
    container = OnTarget(runtime.container, target)
    if target.kind == NODE and isinstance(runtime, SlurmRuntime):
        return SlurmRuntime(replace(runtime.options, nodelist=target.name), container, runtime.poll_seconds)
    return type(runtime)(runtime.options, container)


def node_unavailable(node: str) -> str | None:
    """Why no job can start on `node` now (`drained (Reason=bad gpu)`), from sinfo; None when it can."""
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in done.stdout.splitlines():
        state, _, reason = line.partition("|")
        state = state.strip().rstrip("*~#!%$@^-").lower()
        if state.startswith(UNAVAILABLE):
            reason = reason.strip()
            return f"{state}{f' ({reason})' if reason and reason != 'none' else ''}"
    return None


@dataclass
class Running:
    target: Target
    cell: Cell
    run_dir: Path
    handle: Handle
    started: float


def _start(runtime: Runtime, target: Target, cell: Cell, run_dir: Path, profile: Profile) -> Running | dict:
    """The cell started on its target, or its settled summary where it could not start."""
    try:
        handle = runtime_on(runtime, target).start(cell, run_dir, profile)
    except ReprokitError as exc:
        # Its own failure (sbatch refused the job, no image): the other targets still run.
        return rundirs.finish(run_dir, None, str(exc))
    process = handle.process()
    if process is not None:
        supervisor_file.record(run_dir, *process)
    return Running(target, cell, run_dir, handle, time.monotonic())


def _ended(item: Running, timeout: float | None) -> tuple[Ended, str | None] | None:
    ended = item.handle.poll()
    if ended is not None:
        return ended, None
    if timeout is not None and time.monotonic() - item.started > timeout:
        return item.handle.stop(), rundirs.timed_out(f"{rundirs.seconds_text(timeout)} s (--timeout)")
    state = getattr(item.handle, "state", None)
    if item.target.kind == NODE and state is not None and state.state == "PENDING":
        why = node_unavailable(item.target.name)
        if why is not None:
            job = getattr(item.handle, "job_id", "?")
            item.handle.stop()
            return Ended(
                None
            ), f"node {item.target.name} is {why}: its Slurm job {job} waited and was cancelled"
    return None


def _settle(item: Running, ended: Ended, reason: str | None) -> dict[str, Any]:
    item.handle.close()
    try:
        return rundirs.finish(item.run_dir, ended.exit_code, reason or ended.reason)
    finally:
        with contextlib.suppress(OSError):
            supervisor_file.clear(item.run_dir)


def run(
    runtime: Runtime,
    pairs: list[tuple[Target, Cell]],
    profile: Profile,
    runs: Path,
    together: bool,
    timeout: float | None,
    said: Callable[[Target, Cell, dict[str, Any]], None],
) -> dict[str, dict[str, Any]]:
    """Every (target, cell): all at once (`together`: one Slurm job per node) or one after another
    (each device alone); returns each cell id's summary, calling `said` as each ends. Ctrl-C stops
    every running cell and records it as interrupted, then propagates."""
    files.make_dir(runs)
    outcomes: dict[str, dict[str, Any]] = {}
    waiting = list(pairs)
    running: list[Running] = []
    poll = 0.5
    try:
        while waiting or running:
            while waiting and (together or not running):
                target, cell = waiting.pop(0)
                started = _start(runtime, target, cell, runs / cell.cell_id, profile)
                if isinstance(started, Running):
                    running.append(started)
                    poll = started.handle.poll_seconds
                else:
                    outcomes[cell.cell_id] = started
                    said(target, cell, started)
            for item in list(running):
                ended = _ended(item, timeout)
                if ended is not None:
                    running.remove(item)
                    outcomes[item.cell.cell_id] = _settle(item, *ended)
                    said(item.target, item.cell, outcomes[item.cell.cell_id])
            if running:
                time.sleep(poll)
    except KeyboardInterrupt:
        for item in running:
            with contextlib.suppress(Exception):
                _settle(item, item.handle.stop(), "interrupted")
        raise
    return outcomes
