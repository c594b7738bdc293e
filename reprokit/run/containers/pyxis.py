"""pyxis + enroot: Slurm's container plug-in on DGX-style clusters (`srun --container-image`)."""

from __future__ import annotations

from pathlib import Path

from reprokit import images
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run.containers.base import SRUN, Container, Launch
from reprokit.run.containers.images_on_nodes import NodeImageOptions, in_image_setup, node_image


class Pyxis(Container):
    name = "pyxis"
    options_class = NodeImageOptions
    launches = frozenset({SRUN})

    def check(self, profile: Profile, runtime: str) -> None:
        node_image(self.options, profile, "enroot", self.name)

    def launch(self, cell: Cell, run_dir: Path, profile: Profile, how: str, mount: Path) -> Launch:
        image = self.options.image or str(images.export_path(profile, "enroot"))
        return Launch(
            setup=in_image_setup(profile),
            flags=[
                f"--container-image={image}",
                "--container-mounts="
                + ",".join([f"{mount}:{mount}", *(f"{p}:{p}:ro" for p in cell.data.values())]),
                "--no-container-mount-home",
            ],
            image=image,
        )
