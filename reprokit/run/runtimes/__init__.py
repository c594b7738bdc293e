"""Runtimes: where a cell's run.sh runs. One module each; one registry line each."""

from __future__ import annotations

from reprokit.run.plugins import Registry

REGISTRY = Registry(
    "runtime",
    {
        "local": "reprokit.run.runtimes.local:LocalRuntime",
        "slurm": "reprokit.run.runtimes.slurm:SlurmRuntime",
    },
    group="reprokit.runtimes",
)
