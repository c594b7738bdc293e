"""What every runtime is: where a cell's run.sh runs (this machine, a Slurm cluster), in whatever
container platform the session chose (containers/), and the handle of a cell while it runs.

A runtime starts a cell and hands back a `Handle`; the session owns the one supervision loop
(clock, timeout, Ctrl-C, progress) and settles the run directory (supervise.run_cell), so a runtime
only says how to start, poll, stop and clean up. A new runtime is one module with a subclass of
`Runtime` and its options dataclass, and one line in the registry (runtimes/__init__.py).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from reprokit.contract import files, rundirs
from reprokit.contract.layout import JOBS
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell, argv_lines
from reprokit.render.templates import render
from reprokit.run import machinelock
from reprokit.run.handles import Handle, NoOptions


class Runtime(ABC):
    """Where cells run. Subclasses set `name`, `options_class` (a frozen dataclass of their flags and
    settings) and implement `start`; the container platform is their partner, not their concern."""

    name: ClassVar[str]
    options_class: ClassVar[type] = NoOptions
    # How cells start: "local" (a process on this machine) or "srun" (in a Slurm job); the container
    # platforms that implement that way serve this runtime.
    launches: ClassVar[str] = "local"

    def __init__(self, options: Any, container: Any) -> None:
        self.options = options
        self.container = container

    def check(self, profile: Profile) -> None:
        """Raise ReprokitError (one line) when cells cannot run here; called before the first cell."""
        return None

    def where(self, cells: list[Cell]) -> str | None:
        """Where `cells` would go, checked in seconds (a Slurm partition: there, up, with the nodes the
        cells ask for), in a phrase; None when there is nothing to say. Raises ReprokitError (one line)
        for a place that is not there: a dry run and a preflight say so before a submission would."""
        return None

    def auto_container(self, profile: Profile) -> tuple[str, str | None]:
        """The container platform `--container auto` means here, and why (None: nothing to explain)."""
        return "none", None

    def prepare(self, cell: Cell, run_dir: Path, profile: Profile) -> Path:
        """Write the host's half of the run directory; returns the file a user would run by hand."""
        return write_run_dir_inputs(cell, profile, run_dir)

    @abstractmethod
    def start(self, cell: Cell, run_dir: Path, profile: Profile) -> Handle:
        """Prepare the run directory and start the cell."""

    def dry_run(self, cell: Cell, run_dir: Path, profile: Profile) -> str:
        """What start() would run around run.sh, as a user would type it ('' when run.sh is all)."""
        return self.container.launch(
            cell, run_dir, profile, self.launches, run_dir.resolve().parent.parent
        ).shown


def run_script(cell: Cell, profile: Profile) -> str:
    return render(
        JOBS,
        "run.sh.j2",
        cell=cell,
        profile=profile,
        args=argv_lines(cell.argv()),
        lock_dir=str(machinelock.SYSTEM_DIR),
        lock_name=machinelock.NAME,
    )


def write_run_dir_inputs(cell: Cell, profile: Profile, run_dir: Path) -> Path:
    """The host's half of the run directory: cell.json and run.sh (returned)."""
    files.make_dir(run_dir)
    files.write_text(
        run_dir / rundirs.FILES["cell"], json.dumps(cell.to_json(), indent=2, sort_keys=True) + "\n"
    )
    script = run_dir / rundirs.FILES["run_script"]
    files.write_text(script, run_script(cell, profile), files.SCRIPT_MODE)
    return script
