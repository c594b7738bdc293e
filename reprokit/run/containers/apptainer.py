"""Apptainer (Singularity): a .sif image, on this machine or inside each Slurm task."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from reprokit import images
from reprokit.contract.errors import ReprokitError
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run.containers.base import LOCAL, SCRATCH_ENV, SRUN, Container, Launch, start_process
from reprokit.run.containers.images_on_nodes import NodeImageOptions, in_image_setup, node_image
from reprokit.run.handles import Handle


class Apptainer(Container):
    name = "apptainer"
    options_class = NodeImageOptions
    launches = frozenset({LOCAL, SRUN})

    def check(self, profile: Profile, runtime: str) -> None:
        if runtime == "local" and shutil.which("apptainer") is None:
            raise ReprokitError(
                "the apptainer container platform needs `apptainer` on PATH; it is not installed here"
            )
        node_image(self.options, profile, "apptainer", self.name)

    def command(self, cell: Cell, profile: Profile, image: str, mount: Path) -> list[str]:
        gpu = profile.slurm.apptainer_flags
        binds = ",".join([f"{mount}:{mount}", *(f"{p}:{p}:ro" for p in cell.data.values())])
        return ["apptainer", "exec", *gpu, "--bind", binds, image]

    def launch(self, cell: Cell, run_dir: Path, profile: Profile, how: str, mount: Path) -> Launch:
        image = self.options.image or str(images.export_path(profile, "apptainer"))
        prefix = self.command(cell, profile, image, mount)
        if how == SRUN:
            return Launch(setup=in_image_setup(profile), prefix=prefix, image=image)
        run_dir = run_dir.resolve()
        # Apptainer passes the host's environment in: the kit's own interpreter must not leak in.
        env = {
            "RUN_DIR": str(run_dir),
            "REPROKIT_IMAGE_TAG": images.image_tag(profile),
            # --data folders are bound read-only: the trainer's writable views of them go beside the run.
            SCRATCH_ENV: str(run_dir / ".scratch"),
        }
        launch = Launch(prefix=prefix, env=env, clear=("PYTHON", "REPROKIT_TRAINERS_PATH"), image=image)

        def start() -> Handle:
            node_image(self.options, profile, "apptainer", self.name)
            return start_process(launch, run_dir)

        shown = (
            "# in the Apptainer image, with the session folder bound:\n"
            + shlex.join(launch.argv(run_dir))
            + "\n"
        )
        return Launch(prefix=prefix, env=env, clear=launch.clear, image=image, shown=shown, start=start)
