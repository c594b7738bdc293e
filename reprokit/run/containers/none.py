"""No container: run.sh with this machine's interpreter and the kit's own trainers (a venv; on a
cluster, both on storage every node sees)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from reprokit import trainers
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run.containers.base import LOCAL, SRUN, Container, Launch


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
    launches = frozenset({LOCAL, SRUN})

    def launch(self, cell: Cell, run_dir: Path, profile: Profile, how: str, mount: Path) -> Launch:
        env = environment(run_dir)
        if how == LOCAL:
            return Launch(env=env)
        return Launch(
            setup=[
                "# No container: the trainers and the interpreter of the submitting machine, on shared storage.",
                f"export PYTHON={shlex.quote(env['PYTHON'])}",
                f"export REPROKIT_TRAINERS_PATH={shlex.quote(env['REPROKIT_TRAINERS_PATH'])}",
            ]
        )
