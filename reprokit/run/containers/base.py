"""What every container platform is: one method, `launch`, that says how `bash run.sh` runs inside
it where a runtime starts it: on this machine (the local runtime) or in each task of a Slurm job
(the slurm runtime). As in ReFrame, a platform only emits what wraps the command; the runtime runs it.

A new platform is one module with a subclass of `Container` (its `launches` and `launch`) and its
options dataclass, and one line in the registry (containers/__init__.py).
"""

from __future__ import annotations

import os
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from reprokit.contract import rundirs
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run.handles import Handle, NoOptions, ProcessHandle

# The ways runtimes start cells: a process on this machine, or srun inside a Slurm job.
LOCAL, SRUN = "local", "srun"
# Where a trainer may write writable views of the read-only folders a platform mounts (the trainers'
# common/data/caches.py reads it): each platform names one the container can write.
SCRATCH_ENV = "REPROKIT_SCRATCH"


@dataclass(frozen=True)
class Launch:
    """How a platform runs a cell's run.sh: what precedes `bash run.sh` on its command line, the
    environment it needs (and the host variables it must not see), the job-script lines before it
    and srun's own flags (Slurm), the image, what a dry run shows, and, for a platform that starts
    cells through an API rather than a command (Docker's SDK), the function that starts one."""

    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    clear: tuple[str, ...] = ()
    setup: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    image: str | None = None
    shown: str = ""
    start: Callable[[], Handle] | None = None

    def argv(self, run_dir: Path) -> list[str]:
        return [*self.prefix, "bash", str(run_dir / rundirs.FILES["run_script"])]

    def command(self) -> str:
        """What srun runs in each task of a job: run.sh, after the platform's prefix."""
        return " ".join([*(shlex.quote(token) for token in self.prefix), 'bash "$RUN_DIR/run.sh"'])


def start_process(launch: Launch, run_dir: Path) -> Handle:
    """Start a launch that is a command on this machine, in this environment less what it clears."""
    env = {k: v for k, v in os.environ.items() if k not in launch.clear}
    return ProcessHandle(launch.argv(run_dir), run_dir, {**env, **launch.env})


class Container(ABC):
    name: ClassVar[str]
    options_class: ClassVar[type] = NoOptions
    # The ways of starting cells this platform serves (LOCAL, SRUN): the runtimes it can run under.
    launches: ClassVar[frozenset[str]]

    def __init__(self, options: Any) -> None:
        self.options = options

    def check(self, profile: Profile, runtime: str) -> None:
        """Raise ReprokitError (one line) when this platform cannot run cells for `runtime` here."""
        return None

    @abstractmethod
    def launch(self, cell: Cell, run_dir: Path, profile: Profile, how: str, mount: Path) -> Launch:
        """How `bash run.sh` of `run_dir` runs in this platform when started `how` (LOCAL or SRUN),
        with `mount` (the session folder) visible. Nothing is started or checked here: a dry run
        calls it too."""

    def describe(self) -> str:
        return self.name
