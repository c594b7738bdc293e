"""No container: run.sh with this machine's interpreter and the kit's own trainers (a venv; on a
cluster, both on storage every node sees)."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from importlib import metadata
from pathlib import Path

from reprokit import DISTRIBUTION
from reprokit.contract import installed, trainers
from reprokit.contract.errors import ReprokitError
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


def missing_train_packages() -> list[str]:
    """The packages of the kit's `train` extra (the trainers' environment) this Python lacks, read
    from the kit's own metadata, without importing any of them."""
    try:
        required = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    missing = []
    for requirement in required:
        if 'extra == "train"' not in requirement:
            continue
        name = re.split(r"[ ;=<>!~\[]", requirement, maxsplit=1)[0]
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


class NoContainer(Container):
    name = "none"
    launches = frozenset({LOCAL, SRUN})

    def check(self, profile: Profile, runtime: str) -> None:
        # The kit's trainers run in this very Python: without the train extra (or the accelerator's own
        # stack) every cell would fail on its first import, after the session had started.
        lacking = [name for name in profile.python_modules if importlib.util.find_spec(name) is None]
        if lacking:
            raise ReprokitError(
                f"the {profile.name} cells need {', '.join(lacking)} in the Python that runs them, and this one "
                f"({sys.executable}) lacks it: run them in the {profile.name} image "
                f"(--container {profile.slurm.container if runtime == 'slurm' else 'docker'})"
            )
        missing = missing_train_packages()
        if missing:
            raise ReprokitError(
                f"the trainers run in this Python ({sys.executable}), which lacks {', '.join(missing[:4])}"
                f"{' and more' if len(missing) > 4 else ''}: install the kit with its train extra "
                f"({installed.pip_install('train')}), or run the cells in the kit's image (--container docker)"
            )

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
