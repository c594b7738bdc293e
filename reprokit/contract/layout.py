"""Where the kit's own folders are: `recipes/`, `docker/`, `accelerators/` and `scripts/jobs/` at the top of a
checkout, read in place, or inside the installed package (`reprokit/bundle/`), where the wheel
carries them (in a checkout, reprokit/bundle/ holds links to the top-level folders: how setuptools
finds them for the wheel). (The trainers, `scripts/reprokit_trainers/`, are a package of their own: trainers.py.)"""

from __future__ import annotations

from pathlib import Path

from reprokit.contract.errors import ReprokitError

PACKAGE = Path(__file__).resolve().parent.parent
# The wheel carries the checkout's top-level folders here (a checkout: links to them, the same folders).
BUNDLE = PACKAGE / "bundle"


def folder(name: str, in_checkout: str | None = None) -> Path:
    """The kit's folder `name` (in a checkout: `in_checkout`, default the same), wherever it runs from."""
    for candidate in (BUNDLE / name, PACKAGE.parent / (in_checkout or name)):
        if candidate.is_dir():
            # Resolved: in a checkout, errors and rendered paths name docker/..., not the link's path.
            return candidate.resolve()
    raise ReprokitError(f"the kit's {name}/ folder is missing from {PACKAGE.parent} (reinstall reprokit)")


RECIPES = folder("recipes")
DOCKER = folder("docker")
# The job scripts the host renders: run.sh (what a container runs), sbatch.sh, bind-rank.sh.
JOBS = folder("jobs", "scripts/jobs")
# One folder per accelerator: its profile, base image facts, lock and vendor code (plan/accelerators.py).
ACCELERATORS = folder("accelerators")
