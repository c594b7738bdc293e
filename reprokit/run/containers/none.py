"""No container: run.sh with this machine's interpreter and the kit's own trainers (a venv; on a
cluster, both on storage every node sees)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from reprokit import trainers
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run.containers.base import Container, SrunPart
from reprokit.run.handles import Handle, ProcessHandle


def environment(run_dir: Path) -> dict[str, str]:
    """What run.sh needs from the kit when it runs outside any image."""
    return {
        "RUN_DIR": str(run_dir),
        "REPROKIT_TRAINERS_PATH": trainers.search_path(),
        # The trainers run in the interpreter that runs the kit (make reproduce's .venv).
        "PYTHON": sys.executable,
        "PYTHONUNBUFFERED": "1",
    }


class NoContainer(Container):
    name = "none"

    def start_local(self, cell: Cell, run_dir: Path, profile: Profile) -> Handle:
        return ProcessHandle(
            ["bash", str(run_dir / "run.sh")], run_dir, {**os.environ, **environment(run_dir)}
        )

    def srun(self, cell: Cell, run_dir: Path, profile: Profile, mount: Path) -> SrunPart:
        env = environment(run_dir)
        return SrunPart(
            setup=[
                "# No container: the trainers and the interpreter of the submitting machine, on shared storage.",
                f"export PYTHON={shlex.quote(env['PYTHON'])}",
                f"export REPROKIT_TRAINERS_PATH={shlex.quote(env['REPROKIT_TRAINERS_PATH'])}",
            ]
        )
