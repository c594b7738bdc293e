"""Runtimes: where a cell's run.sh runs. One module each; one registry line each."""

from __future__ import annotations

from ..plugins import Registry

REGISTRY = Registry(
    "runtime",
    {
        "local": "reprokit.runtimes.local:LocalRuntime",
        "slurm": "reprokit.runtimes.slurm:SlurmRuntime",
    },
    group="reprokit.runtimes",
)
