"""Apptainer (Singularity): a .sif image, on this machine or inside each Slurm task."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from reprokit.errors import ReprokitError
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run import images
from reprokit.run.containers.base import Container, SrunPart
from reprokit.run.containers.images_on_nodes import NodeImageOptions, node_image
from reprokit.run.containers.pyxis import _in_image_setup
from reprokit.run.handles import Handle, ProcessHandle


class Apptainer(Container):
    name = "apptainer"
    options_class = NodeImageOptions

    def check(self, profile: Profile, runtime: str) -> None:
        if runtime == "local" and shutil.which("apptainer") is None:
            raise ReprokitError(
                "the apptainer container platform needs `apptainer` on PATH; it is not installed here"
            )
        node_image(self.options, profile, "apptainer", self.name)

    def command(self, cell: Cell, profile: Profile, image: str, mount: Path) -> list[str]:
        gpu = ["--nv"] if profile.slurm.gres else []
        binds = ",".join([f"{mount}:{mount}", *(f"{p}:{p}:ro" for p in cell.data.values())])
        return ["apptainer", "exec", *gpu, "--bind", binds, image]

    def start_local(self, cell: Cell, run_dir: Path, profile: Profile) -> Handle:
        image = node_image(self.options, profile, "apptainer", self.name)
        mount = run_dir.resolve().parent.parent
        # Apptainer passes the host's environment in: the kit's own interpreter must not leak in.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "REPROKIT_TRAINERS_PATH")}
        env.update(RUN_DIR=str(run_dir.resolve()), REPROKIT_IMAGE_TAG=images.image_tag(profile))
        command = [*self.command(cell, profile, image, mount), "bash", str(run_dir.resolve() / "run.sh")]
        return ProcessHandle(command, run_dir, env)

    def local_dry_run(self, cell: Cell, run_dir: Path, profile: Profile) -> str:
        image = self.options.image or str(images.export_path(profile, "apptainer"))
        command = [
            *self.command(cell, profile, image, run_dir.resolve().parent.parent),
            "bash",
            str(run_dir / "run.sh"),
        ]
        return "# in the Apptainer image, with the session folder bound:\n" + shlex.join(command) + "\n"

    def srun(self, cell: Cell, run_dir: Path, profile: Profile, mount: Path) -> SrunPart:
        image = self.options.image or str(images.export_path(profile, "apptainer"))
        return SrunPart(
            setup=_in_image_setup(profile), prefix=self.command(cell, profile, image, mount), image=image
        )
