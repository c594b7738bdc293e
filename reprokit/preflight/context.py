"""What every preflight check reads: the plan a session would run, on which runtime and platform, where
its results would go, and what the checks before it found."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reprokit.plan import accelerators, recipes
from reprokit.plan.cells import Cell
from reprokit.plan.planner import Plan
from reprokit.plan.recipes import Recipe
from reprokit.plan.request import Request
from reprokit.preflight.findings import Finding
from reprokit.run.runtimes.base import Runtime


@dataclass
class Context:
    plan: Plan
    request: Request
    runtime: Runtime
    # Where the session's results would go (--results, else results/); the preflight's own runs go below it.
    out: Path
    # Whether a few real steps of each trainer and loader are run (--no-steps: the quick checks only).
    steps: bool = True
    # Seconds allowed to each stepped cell.
    step_timeout: float = 900.0
    findings: list[Finding] = field(default_factory=list)
    # The stepped cells' run directories (the steps check), read by the checks after it.
    stepped: dict[str, Path] = field(default_factory=dict)
    # Why the Hugging Face hub cannot be reached from here (the data check); None: reachable or not asked.
    # The stepped runs then run offline, as they would end up anyway, without the hub client's retries.
    hub_unreachable: str | None = None
    # The hub datasets the cells would download into this machine's datasets cache (the data check);
    # the storage check asks room for them, and none where the cells would train on given or synthetic data.
    hub_datasets: list[str] = field(default_factory=list)
    # The devices the cells would run on, as the driver named them, and their key in the recipes'
    # references (the devices check); None where not this machine's or not listed.
    device_name: str | None = None
    device_key: str | None = None
    # A --devices count the driver's tool could not verify (it is missing, fails or hangs): used as given.
    devices_unverified: int | None = None
    _recipes: dict[str, Recipe] = field(default_factory=dict)

    @property
    def cells(self) -> list[Cell]:
        return self.plan.cells

    @property
    def profile(self) -> accelerators.Profile:
        return self.plan.profile

    @property
    def container(self) -> str:
        return self.plan.container

    def recipe(self, cell: Cell) -> Recipe:
        """The cell's recipe, loaded once for the checks (each reads it per cell: 35 loads of 3 files
        for the 16 cells of `all`, 0.9 s of a 9 s --no-steps preflight)."""
        source = cell.recipe_file or cell.recipe
        if source not in self._recipes:
            self._recipes[source] = recipes.load(source)
        return self._recipes[source]

    def blocked_everywhere(self) -> list[Finding]:
        """What stops every cell (the machine, its image, its storage): no step would run."""
        return [f for f in self.findings if f.blocks and not f.cells]
