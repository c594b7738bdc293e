"""What every container platform is: how run.sh is started inside it, on this machine (the local
runtime) and inside a Slurm job's srun (the slurm runtime).

A new platform is one module with a subclass of `Container` and its options dataclass, and one
line in the registry (containers/__init__.py). Which runtimes it serves follows from what it
implements: `start_local` for runtimes that start cells on this machine, `srun` for Slurm's.
"""

from __future__ import annotations

import shlex
from abc import ABC
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from reprokit.errors import ReprokitError
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run.handles import Handle, NoOptions


@dataclass(frozen=True)
class SrunPart:
    """A platform's share of a Slurm job script: lines before srun, srun flags, and what precedes
    `bash run.sh` on srun's command line."""

    setup: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    prefix: list[str] = field(default_factory=list)
    image: str | None = None

    def command(self) -> str:
        """What srun runs on each node: run.sh, after the platform's prefix."""
        return " ".join([*(shlex.quote(token) for token in self.prefix), 'bash "$RUN_DIR/run.sh"'])


# How a runtime starts cells, and the Container method a platform implements to serve it.
LAUNCHES = {"local": "start_local", "srun": "srun"}


class Container(ABC):
    name: ClassVar[str]
    options_class: ClassVar[type] = NoOptions

    def __init__(self, options: Any) -> None:
        self.options = options

    @classmethod
    def serves(cls, launches: str) -> bool:
        """Whether cells of a runtime that starts them this way ("local", "srun") can run in it."""
        method = LAUNCHES[launches]
        return getattr(cls, method) is not getattr(Container, method)

    def check(self, profile: Profile, runtime: str) -> None:
        """Raise ReprokitError (one line) when this platform cannot run cells for `runtime` here."""
        return None

    def start_local(self, cell: Cell, run_dir: Path, profile: Profile) -> Handle:
        raise ReprokitError(f"the {self.name} container platform does not run cells on this machine")

    def local_dry_run(self, cell: Cell, run_dir: Path, profile: Profile) -> str:
        return ""

    def srun(self, cell: Cell, run_dir: Path, profile: Profile, mount: Path) -> SrunPart:
        raise ReprokitError(f"the {self.name} container platform does not run inside Slurm jobs")

    def describe(self) -> str:
        return self.name
