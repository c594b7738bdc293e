"""Runtimes start a cell's run.sh somewhere (this machine, a container, a Slurm job) and settle its outcome."""

from __future__ import annotations

from typing import Protocol

from ..errors import ReprokitError

RUNTIMES = ("local", "docker", "slurm")


class Runtime(Protocol):
    name: str

    def run(self, cell, run_dir, profile, timeout: float | None = None, progress=None) -> dict: ...


def get(name: str, **options) -> Runtime:
    if name == "local":
        from .local import LocalRuntime

        return LocalRuntime()
    if name == "docker":
        from .docker import DockerRuntime

        return DockerRuntime(**options)
    if name == "slurm":
        from .slurm import SlurmRuntime

        return SlurmRuntime(**options)
    raise ReprokitError(f"unknown runtime {name!r}; known runtimes: {', '.join(RUNTIMES)} (or auto)")
