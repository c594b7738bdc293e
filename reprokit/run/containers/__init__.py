"""Container platforms: what a cell's run.sh runs in. One module each; one registry line each."""

from __future__ import annotations

from reprokit.run.plugins import Registry

REGISTRY = Registry(
    "container platform",
    {
        "none": "reprokit.run.containers.none:NoContainer",
        "docker": "reprokit.run.containers.docker:Docker",
        "pyxis": "reprokit.run.containers.pyxis:Pyxis",
        "apptainer": "reprokit.run.containers.apptainer:Apptainer",
    },
    group="reprokit.containers",
)
