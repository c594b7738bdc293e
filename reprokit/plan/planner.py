"""Planning: a `Request` becomes the cells of a session, on one accelerator, at one scale, with the
runtime and container platform they run in.

A list of node counts runs every cell at each (ids end in --<n>n), so the report can give each
multi-node cell's scaling efficiency over its single-node twin; `--repeat N` runs each cell N times
(ids end in --r<k>), and results give the median of each series.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reprokit.contract import trainers
from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators, listing, recipes
from reprokit.plan.cells import Cell, cell_id, expand, left_out, nothing_to_run
from reprokit.plan.data import resolve as resolve_data
from reprokit.plan.release_choice import release_for
from reprokit.plan.request import Request


@dataclass
class Plan:
    # The accelerator's profile, resolved once: every stage takes it from here.
    profile: accelerators.Profile
    scale: str
    runtime: str
    cells: list[Cell]
    messages: list[str]
    # What was passed on to every recipe's expansion (None: each recipe's own), for --resume.
    devices: int | None = None
    nodes: int | list[int] | None = None
    container: str = "none"

    @property
    def accelerator(self) -> str:
        return self.profile.name


# (runtime asked, container asked, the accelerator's profile) -> (runtime, container platform, why they
# were chosen when chosen automatically). The registries live in run/ (reprokit/run/placement.py):
# planning is handed the choice rather than reaching up for them.
Choose = Callable[[str, str, accelerators.Profile], tuple[str, str, "str | None"]]


def choose_scale(scale: str, accelerator: str) -> str:
    if scale != "auto":
        return scale
    return "smoke" if accelerator == "cpu" else "published"


def fitted_devices(
    accelerator: str, scale: str, asked: int | None, here: listing.Devices | None = None
) -> int | None:
    """The devices per cell on this machine: what --devices asked, checked against what is here where
    it can be listed, or, for published cells, the published 8 capped at what is here (a smaller
    machine runs and is compared per device). A machine whose devices cannot be counted, or whose
    layout cannot hold the ranks (MIG), is refused in one line: a count is never guessed. `here`:
    the listing already made (the driver's tool is not run twice)."""
    if asked is None and scale != "published":
        return None  # each recipe's own (the smoke scale: one device)
    try:
        here = here or listing.devices_here(accelerator)
    except listing.CannotCount:
        if asked is not None:
            return asked  # the user's count, which nothing here can check
        raise
    wanted = asked if asked is not None else min(here.count, 8)
    refusal = here.refusal(wanted, asked=asked is not None)
    if refusal:
        raise ReprokitError(refusal)
    return wanted


def trainers_found(cells: list[Cell], container: str) -> list[str]:
    """Each cell's trainer module where `python -m` would find it, for a session about to run (or a dry
    run of one): without a container, in this machine's Python (a module that is not there is
    refused); in an image, it must be in the image (said, since the host cannot see into it; the
    preflight imports it there). Not part of planning: a plan rendered here may run elsewhere."""
    said = []
    for module in dict.fromkeys(c.trainer_module for c in cells):
        if trainers.locate(module) is not None:
            continue
        if container == "none":
            raise ReprokitError(
                f"trainer module {module} is not on this machine (REPROKIT_TRAINERS_PATH, the kit's trainers, "
                "this Python's path), where the cells would run it: install it, or put its folder on "
                "REPROKIT_TRAINERS_PATH"
            )
        said.append(
            f"warning: trainer module {module} is not on this machine: the {container} image must have it"
        )
    return said


def plan(request: Request, choose: Choose, *, fit_devices: bool = True) -> Plan:
    """The cells of `request`, in the runtime and container platform `choose` picks (callers outside
    run/ take `reprokit.run.placement.plan`); an empty plan is an error naming why. `fit_devices`: the plan is for this
    machine (published cells run locally on at most the devices it has, on one node); not wanted when
    only rendering for another machine."""
    messages: list[str] = []
    profile = listing.resolve(request.accelerator)
    accelerator = profile.name
    scale = choose_scale(request.scale, accelerator)
    runtime, container, why = choose(request.runtime, request.container, profile)
    if request.accelerator == "auto" or request.scale == "auto" or why:
        found = "No accelerator" if accelerator == "cpu" else f"Accelerator {accelerator}"
        reason = f" ({why})" if why else ""
        inside = "" if container == "none" else f" in {container}"
        messages.append(
            f"{found} here: running the {scale} scale with the {runtime} runtime{inside}{reason}."
        )
    devices = request.devices
    loaded = recipes.load_unique(request.recipes or recipes.available())
    names = list(loaded)
    real_data = resolve_data(list(loaded.values()), request.data)
    releases = release_for(loaded, request.reference)
    messages.extend(
        f"note: recipe {name} has no figures of release {request.reference}: its cells are judged against none"
        for name, recipe in loaded.items()
        if request.reference and recipe.release_named(request.reference) is None
    )
    found: list[Cell] = []
    empty: list[str] = []
    for name in names:
        recipe = loaded[name]
        messages.extend(f"warning: {w}" for w in recipe.warnings)
        wanted = [v for v in request.variants if v in {x.name for x in recipe.variants}] or None
        if request.variants and wanted is None and len(names) == 1:
            expand(recipe, name, accelerator, scale, request.variants)  # raises: names the variants
        if request.variants and wanted is None:
            continue
        asked_for = [v for v in recipe.variants if wanted and v.name in wanted]
        messages.extend(
            f"warning: {why}; left out" for v in asked_for if (why := left_out(recipe, v, accelerator, scale))
        )
        before = len(found)
        counts = request.nodes if isinstance(request.nodes, list) else [request.nodes]
        for count in counts:
            suffix = f"--{count}n" if len(counts) > 1 else ""
            for repeat in range(1, request.repeat + 1):
                # Repetition k of a cell reads repetition k of the cell it needs (same suffix).
                again = f"{suffix}--r{repeat}" if request.repeat > 1 else suffix
                for cell in expand(
                    recipe,
                    name,
                    accelerator,
                    scale,
                    wanted,
                    devices,
                    count,
                    again,
                    real_data,
                    request.profile,
                    releases[name],
                ):
                    cell.repeat, cell.repeats = repeat, request.repeat
                    cell.series_id = cell_id(cell.recipe, cell.variant, suffix)
                    found.append(cell)
        if len(found) == before:
            empty.append(nothing_to_run(recipe, accelerator, scale, wanted))
            if not wanted:
                messages.append(f"note: {empty[-1]}")
    if not found:
        # Every recipe and variant asked for was left out: an empty session is never what was meant.
        raise ReprokitError(f"nothing to run: {'; '.join(dict.fromkeys(empty))}")
    if fit_devices and runtime == "local":
        several = sorted({c.nodes for c in found if c.nodes > 1})
        if several:
            raise ReprokitError(
                f"--nodes {','.join(map(str, several))}: the local runtime runs cells on this machine only; "
                "several nodes need --runtime slurm"
            )
        # After the recipes are checked: a bad recipe is named before the machine is looked at.
        devices = fitted_devices(accelerator, scale, request.devices)
        for cell in found if devices is not None else []:
            cell.devices = devices
    return Plan(profile, scale, runtime, found, messages, devices, request.nodes, container)
