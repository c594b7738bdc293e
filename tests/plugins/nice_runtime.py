"""A runtime plug-in, whole: cells on this machine at a lower CPU priority (`nice`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from reprokit.run.containers.none import environment
from reprokit.run.handles import Handle, ProcessHandle
from reprokit.run.runtimes.base import Runtime, write_run_dir_inputs


@dataclass(frozen=True)
class NiceOptions:
    niceness: int = 10


class NiceRuntime(Runtime):
    name = "nice"
    options_class = NiceOptions

    def start(self, cell, run_dir: Path, profile) -> Handle:
        script = write_run_dir_inputs(cell, profile, run_dir)
        command = [
            "nice",
            "-n",
            str(self.options.niceness),
            "bash",
            "-c",
            'echo "niceness $(nice)"; exec bash "$0"',
            str(script),
        ]
        return ProcessHandle(command, run_dir, {**os.environ, **environment(run_dir)})
