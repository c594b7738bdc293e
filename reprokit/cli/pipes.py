"""A reader that goes away ends the command quietly: `inv reproduce --help | head` prints its ten lines
and stops, as a Unix tool does, with no BrokenPipeError traceback (from the help invoke prints, from a
task's output, or from the interpreter's last flush of stdout)."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from types import TracebackType


def _stdout_to_nowhere() -> None:
    # What is still buffered for the closed pipe goes nowhere: the interpreter's last flush succeeds.
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _flush_at_exit() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_nowhere()
    except (OSError, ValueError):
        pass


def quiet_broken_pipe() -> None:
    """Install, once per process: a BrokenPipeError that reaches the top ends the process (exit 1)
    without a traceback."""
    if getattr(sys.excepthook, "reprokit_pipes", False):
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, trace: TracebackType | None) -> None:
        if issubclass(kind, BrokenPipeError):
            _stdout_to_nowhere()
            return
        previous(kind, value, trace)

    hook.reprokit_pipes = True  # type: ignore[attr-defined]
    sys.excepthook = hook
    atexit.register(_flush_at_exit)
