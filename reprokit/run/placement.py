"""Where and in what a session's cells run: the runtime and container platform chosen from their
registries (beside them, in run/), and the plan made with that choice: what every caller that plans
for a session takes (`plan`), so that planning (plan/) never reaches up for the registries."""

from __future__ import annotations

from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators, planner
from reprokit.plan.request import Request
from reprokit.run import containers, runtimes


def choose(runtime: str, container: str, profile: accelerators.Profile) -> tuple[str, str, str | None]:
    """(runtime, container platform, why they were chosen when chosen automatically)."""
    if runtime == "docker":
        # The kit's first runtimes fused where and in what: `--runtime docker` is Docker on this machine.
        if container not in ("auto", "docker"):
            raise ReprokitError(f"--runtime docker runs in Docker; it cannot take --container {container}")
        runtime, container = "local", "docker"
    chosen_automatically = runtime == "auto"
    if chosen_automatically:
        runtime = "local"
    runtime_class = runtimes.REGISTRY.load(runtime)
    if container != "auto":
        if runtime_class.launches not in containers.REGISTRY.load(container).launches:
            served = [
                n
                for n in containers.REGISTRY.names()
                if runtime_class.launches in containers.REGISTRY.load(n).launches
            ]
            raise ReprokitError(f"the {runtime} runtime runs cells in {', '.join(served)}, not {container}")
        return runtime, container, None
    if not chosen_automatically and runtime_class.launches == "local":
        # `--runtime local` said on its own means this machine as it is: no container.
        return runtime, "none", None
    chosen, why = runtime_class(runtime_class.options_class(), None).auto_container(profile)
    return runtime, chosen, why


def plan(request: Request, *, fit_devices: bool = True) -> planner.Plan:
    """`request`'s plan (plan/planner.py), its runtime and container platform chosen here."""
    return planner.plan(request, choose, fit_devices=fit_devices)
