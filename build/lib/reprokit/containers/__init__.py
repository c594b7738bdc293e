"""Container platforms: what a cell's run.sh runs in. One module each; one registry line each."""

from __future__ import annotations

from ..plugins import Registry

REGISTRY = Registry(
    "container platform",
    {
        "none": "reprokit.containers.none:NoContainer",
        "docker": "reprokit.containers.docker:Docker",
        "pyxis": "reprokit.containers.pyxis:Pyxis",
        "apptainer": "reprokit.containers.apptainer:Apptainer",
    },
    group="reprokit.containers",
)
