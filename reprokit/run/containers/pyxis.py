"""pyxis + enroot: Slurm's container plug-in on DGX-style clusters (`srun --container-image`)."""

from __future__ import annotations

import shlex
from pathlib import Path

from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run import images
from reprokit.run.containers.base import SCRATCH_ENV, SRUN, Container, Launch
from reprokit.run.containers.images_on_nodes import NodeImageOptions, node_image


class Pyxis(Container):
    name = "pyxis"
    options_class = NodeImageOptions
    launches = frozenset({SRUN})

    def check(self, profile: Profile, runtime: str) -> None:
        node_image(self.options, profile, "enroot", self.name)

    def launch(self, cell: Cell, run_dir: Path, profile: Profile, how: str, mount: Path) -> Launch:
        image = self.options.image or str(images.export_path(profile, "enroot"))
        return Launch(
            setup=_in_image_setup(profile),
            flags=[
                f"--container-image={image}",
                "--container-mounts="
                + ",".join([f"{mount}:{mount}", *(f"{p}:{p}:ro" for p in cell.data.values())]),
                "--no-container-mount-home",
            ],
            image=image,
        )


def _in_image_setup(profile: Profile) -> list[str]:
    """In the image: its own interpreter and trainers (sbatch passes the submitting shell's
    environment on, and a host path must not leak in)."""
    return [
        "# In the image: its own interpreter and trainers (sbatch passes the submitting shell's",
        "# environment on, and a host path must not leak in).",
        "unset PYTHON REPROKIT_TRAINERS_PATH",
        f"export REPROKIT_IMAGE_TAG={shlex.quote(images.image_tag(profile))}",
        "# --data folders are bound read-only; the trainer reads a cache it must write locks into through a",
        "# writable view made here (the session folder is bound read-write on every node).",
        f'export {SCRATCH_ENV}="$RUN_DIR/.scratch"',
    ]
