"""The local runtime: run.sh in this environment (a venv with the trainers' packages)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .. import rundirs
from ..accelerators import Profile
from ..cells import Cell
from ..render import SCRIPTS_DIR, write_run_dir_inputs

POLL_SECONDS = 0.5


def supervise(
    command: list[str],
    run_dir: Path,
    env: dict[str, str],
    timeout: float | None,
    progress: Callable[[str], None] | None,
) -> tuple[int | None, str | None]:
    """Run a command with its output in stdout.log; returns (exit code, failure reason)."""
    with open(run_dir / "stdout.log", "ab") as log:
        # Its own process group, so a timeout or Ctrl-C stops the whole launcher tree.
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        started = time.monotonic()
        try:
            while proc.poll() is None:
                if timeout is not None and time.monotonic() - started > timeout:
                    _stop(proc)
                    return proc.returncode, "timeout"
                if progress is not None:
                    progress(rundirs.last_throughput(run_dir) or f"running {time.monotonic() - started:.0f}s")
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:
            _stop(proc)
            rundirs.finish(run_dir, proc.returncode, "interrupted")
            raise
    return proc.returncode, None


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


class LocalRuntime:
    name = "local"

    def run(
        self,
        cell: Cell,
        run_dir: Path,
        profile: Profile,
        timeout: float | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> dict:
        script = write_run_dir_inputs(cell, profile, run_dir)
        env = {
            **os.environ,
            "RUN_DIR": str(run_dir),
            # The kit's trainers, unless REPROKIT_SCRIPTS names another folder (a trainer under
            # development, or the tests' fake trainers).
            "REPROKIT_SCRIPTS": os.environ.get("REPROKIT_SCRIPTS") or str(SCRIPTS_DIR),
            # The trainers run in the interpreter that runs the kit (make reproduce's .venv).
            "PYTHON": sys.executable,
            "PYTHONUNBUFFERED": "1",
        }
        exit_code, reason = supervise(["bash", str(script)], run_dir, env, timeout, progress)
        return rundirs.finish(run_dir, exit_code, reason)
