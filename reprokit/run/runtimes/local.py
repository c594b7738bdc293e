"""The local runtime: run.sh on this machine, directly or in a container (Docker, Apptainer)."""

from __future__ import annotations

from pathlib import Path

from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run.containers.base import LOCAL, start_process
from reprokit.run.handles import Handle
from reprokit.run.runtimes.base import Runtime, write_run_dir_inputs


class LocalRuntime(Runtime):
    name = "local"

    def check(self, profile: Profile) -> None:
        self.container.check(profile, self.name)

    def auto_container(self, profile: Profile) -> tuple[str, str | None]:
        """Docker when an engine answers and this kit's image for the accelerator is built."""
        from reprokit import images

        engine = images.engine_status()
        if engine is not None:
            return "none", f"no container engine: {engine}"
        if images.image_info(images.image_tag(profile)) is not None:
            return "docker", f"a Docker engine answers and the {profile.name} image is built"
        return "none", f"a Docker engine answers but no {profile.name} image is built; `inv build` makes it"

    def start(self, cell: Cell, run_dir: Path, profile: Profile) -> Handle:
        write_run_dir_inputs(cell, profile, run_dir)
        launch = self.container.launch(cell, run_dir, profile, LOCAL, run_dir.resolve().parent.parent)
        return launch.start() if launch.start is not None else start_process(launch, run_dir)
