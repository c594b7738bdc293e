"""A cell while it runs, whatever runs it: the handle a runtime or container platform returns, which
the session's one supervision loop polls, stops and closes."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reprokit.contract import files, rundirs
from reprokit.run import machinelock


@dataclass(frozen=True)
class Ended:
    """How a cell's process ended: its exit code (None when unknown) and, for a failure the exit code
    does not explain (a cancelled job, an OOM kill), why."""

    exit_code: int | None
    reason: str | None = None


class Handle(ABC):
    """A cell while it runs."""

    poll_seconds: float = 0.5

    @abstractmethod
    def poll(self) -> Ended | None:
        """None while it runs; how it ended once it has."""

    @abstractmethod
    def stop(self) -> Ended:
        """Stop it now (a timeout, Ctrl-C) and wait until it has stopped."""

    def describe(self, elapsed: float) -> str:
        """A progress line for when the run directory has no throughput row yet."""
        return f"running {elapsed:.0f}s"

    def close(self) -> None:
        """Release what the run held (a container); called once, whatever happened."""
        return None

    def process(self) -> tuple[int, int] | None:
        """(pid, process group) of the process on this machine that runs the cell, when there is one:
        recorded so that a resume after the kit's own death finds a trainer that still runs."""
        return None


@dataclass(frozen=True)
class NoOptions:
    """A plug-in without options."""


PR_SET_PDEATHSIG = 1


def die_with_the_kit() -> Callable[[], None] | None:
    """What a child runs before its command: ask the kernel for SIGTERM when the kit's process ends,
    however it ends (kill -9 included), so that no trainer outlives the kit that follows it; torchrun
    and mpirun pass the signal on to their ranks. None where the kernel has no such request."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def request() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the kit died between the fork and the request
            os.kill(os.getpid(), signal.SIGTERM)

    return request


class ProcessHandle(Handle):
    """A command on this machine, in its own process group (a timeout or Ctrl-C stops the whole
    launcher tree), its output appended to the run directory's stdout.log, ended by the kernel if the
    kit dies first. It runs in its run directory, so that whatever a trainer writes to a relative path
    stays with the run."""

    def __init__(self, command: list[str], run_dir: Path, env: dict[str, str]) -> None:
        self._log = files.open_append(run_dir / rundirs.FILES["stdout"])
        try:
            self.proc = subprocess.Popen(
                command,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=run_dir,
                start_new_session=True,
                # A prctl call in the child, nothing that takes a lock another thread may hold.
                preexec_fn=die_with_the_kit(),
                pass_fds=machinelock.inherited(),
            )
        except BaseException:
            self._log.close()
            raise

    def poll(self) -> Ended | None:
        code = self.proc.poll()
        return None if code is None else Ended(code)

    def stop(self) -> Ended:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        return Ended(self.proc.poll())

    def close(self) -> None:
        self._log.close()

    def process(self) -> tuple[int, int]:
        return self.proc.pid, self.proc.pid


def wait_for(predicate, seconds: float, step: float = 1.0) -> bool:
    """Poll `predicate` until it holds or `seconds` pass (shared storage may show files late)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True
