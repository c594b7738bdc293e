"""The plan's runtime and container platform, made from their registries and given the options each
declares (`--partition` is the Slurm runtime's, `--image` the container platforms'); an option
that neither declares is refused in one line naming whose it is."""

from __future__ import annotations

import dataclasses
from typing import Any

from reprokit.contract.errors import ReprokitError
from reprokit.plan.planner import Plan
from reprokit.run import containers, runtimes
from reprokit.run.runtimes.base import Runtime


def _option_owners() -> dict[str, str]:
    """Every plug-in option name -> the plug-in that declares it (for one-line refusals)."""
    owners: dict[str, str] = {}
    for registry, kind in ((runtimes.REGISTRY, "runtime"), (containers.REGISTRY, "container platform")):
        for name in registry.names():
            try:
                plugin = registry.load(name)
            except ReprokitError:
                continue
            for item in dataclasses.fields(plugin.options_class):
                owners.setdefault(item.name, f"the {name} {kind}")
    return owners


def runtime_for(the_plan: Plan, options: dict[str, Any] | None = None) -> Runtime:
    """The plan's runtime with its container platform, each given the options it declares; an option
    that neither declares is refused in one line that names whose it is."""
    options = dict(options or {})
    runtime_class = runtimes.REGISTRY.load(the_plan.runtime)
    container_class = containers.REGISTRY.load(the_plan.container)
    taken = {f.name for f in dataclasses.fields(runtime_class.options_class)}
    taken |= {f.name for f in dataclasses.fields(container_class.options_class)}
    stray = [key for key in options if key not in taken]
    if stray:
        owners = _option_owners()
        what = "; ".join(
            f"--{key.replace('_', '-')} is an option of {owners.get(key, 'no runtime or container platform')}"
            for key in stray
        )
        inside = "" if the_plan.container == "none" else f" in {the_plan.container}"
        raise ReprokitError(f"{what} (this session runs {the_plan.runtime}{inside})")

    def made(cls: type) -> Any:
        return cls.options_class(
            **{
                k: v
                for k, v in options.items()
                if k in {f.name for f in dataclasses.fields(cls.options_class)}
            }
        )

    return runtime_class(made(runtime_class), container_class(made(container_class)))
