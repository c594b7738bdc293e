"""A container platform plug-in, whole: no image, but run.sh never sees the named host variables."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from reprokit.run.containers.base import Container, SrunPart
from reprokit.run.containers.none import environment
from reprokit.run.handles import Handle, ProcessHandle


@dataclass(frozen=True)
class ScrubbedOptions:
    scrub: tuple[str, ...] = field(default=("HF_TOKEN",))


class Scrubbed(Container):
    name = "scrubbed"
    options_class = ScrubbedOptions

    def prefix(self) -> list[str]:
        return ["env", *(f"--unset={name}" for name in self.options.scrub)]

    def start_local(self, cell, run_dir: Path, profile) -> Handle:
        command = [*self.prefix(), "bash", str(run_dir / "run.sh")]
        return ProcessHandle(command, run_dir, {**os.environ, **environment(run_dir)})

    def srun(self, cell, run_dir: Path, profile, mount: Path) -> SrunPart:
        return SrunPart(prefix=self.prefix())
