"""A session: the cells of one `inv reproduce`/`inv run`, run one after another into results/<session>/.

Each cell's run directory is its own; a failed cell is recorded and the matrix goes on; an
interrupted session resumes (`--resume SESSION`) without rerunning complete cells.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from . import accelerators, recipes, rundirs, runtimes
from .cells import ROOT, Cell, expand
from .errors import ReprokitError

RESULTS_DIR = ROOT / "results"
console = Console(stderr=True, highlight=False)


@dataclass
class Plan:
    accelerator: str
    scale: str
    runtime: str
    cells: list[Cell]
    messages: list[str]


def choose_scale(scale: str, accelerator: str) -> str:
    if scale != "auto":
        return scale
    return "smoke" if accelerator == "cpu" else "published"


def choose_runtime(runtime: str, accelerator: str) -> tuple[str, str | None]:
    """The runtime to use, and a line that says why when it was chosen automatically."""
    if runtime in runtimes.RUNTIMES:
        return runtime, None
    if runtime != "auto":
        raise ReprokitError(
            f"unknown runtime {runtime!r}; known runtimes: {', '.join(runtimes.RUNTIMES)} (or auto)"
        )
    from .runtimes import docker as docker_runtime

    engine = docker_runtime.engine_status()
    if engine is None:
        if docker_runtime.image_available(accelerator):
            return (
                "docker",
                f"Docker engine answers and the {accelerator} image is here: using the docker runtime.",
            )
        return (
            "local",
            f"Docker engine answers but no {accelerator} image is built (`inv build`): using the local runtime.",
        )
    return "local", f"No container engine ({engine}): using the local runtime."


def plan(
    names: list[str],
    accelerator: str = "auto",
    scale: str = "auto",
    runtime: str = "auto",
    variants: list[str] | None = None,
    devices: int | None = None,
    nodes: int | None = None,
) -> Plan:
    messages: list[str] = []
    chosen_accelerator = accelerators.resolve(accelerator)
    chosen_scale = choose_scale(scale, chosen_accelerator)
    chosen_runtime, why = choose_runtime(runtime, chosen_accelerator)
    if accelerator == "auto" or scale == "auto":
        what = "no accelerator" if chosen_accelerator == "cpu" else f"accelerator {chosen_accelerator}"
        messages.append(f"Found {what}: running the {chosen_scale} scale.")
    if why:
        messages.append(why)
    if chosen_scale == "published" and devices is None and chosen_runtime != "slurm":
        # Published runs used 8 devices; on a smaller machine run per device and compare per device.
        devices = min(accelerators.device_count(chosen_accelerator), 8)
    cells: list[Cell] = []
    recipe_names = names or recipes.available()
    for name in recipe_names:
        recipe = recipes.load(name)
        messages.extend(f"warning: {w}" for w in recipe.warnings)
        wanted = [v for v in (variants or []) if v in {x.name for x in recipe.variants}] or None
        if variants and wanted is None and len(recipe_names) == 1:
            expand(recipe, name, chosen_accelerator, chosen_scale, variants)  # raises: names the variants
        if variants and wanted is None:
            continue
        cells += expand(recipe, name, chosen_accelerator, chosen_scale, wanted, devices, nodes)
    return Plan(chosen_accelerator, chosen_scale, chosen_runtime, cells, messages)


def new_session_dir(out: str | None, session: str | None) -> Path:
    base = Path(out) if out else RESULTS_DIR
    name = session or time.strftime("%Y%m%d-%H%M%S")
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def resume_dir(out: str | None, session: str) -> Path:
    base = Path(out) if out else RESULTS_DIR
    path = Path(session) if Path(session).is_dir() else base / session
    if not path.is_dir():
        raise ReprokitError(f"no session {session!r} to resume under {base}")
    return path


def run_cells(
    the_plan: Plan,
    session_dir: Path,
    resume: bool = False,
    timeout: float | None = None,
    runtime_options: dict | None = None,
    report_line: Callable[[Cell, dict], None] | None = None,
) -> list[dict]:
    """Run every cell; returns their summaries. Failures are recorded, never raised."""
    runtime = runtimes.get(the_plan.runtime, **(runtime_options or {}))
    profile = accelerators.get(the_plan.accelerator)
    runs = session_dir / "runs"
    outcomes: dict[str, dict] = {}
    for index, cell in enumerate(the_plan.cells, 1):
        run_dir = runs / cell.cell_id
        label = f"[{index}/{len(the_plan.cells)}] {cell.cell_id}"
        if resume and rundirs.is_complete(run_dir):
            outcomes[cell.cell_id] = rundirs.summary(run_dir) or {}
            console.print(f"{label}: complete, not rerun")
            continue
        if run_dir.exists():
            _clear_outputs(run_dir)
        failed_needs = [c for c in cell.needed_cells().values() if outcomes.get(c, {}).get("status") != "ok"]
        if failed_needs:
            outcome = rundirs.skip(run_dir, f"needs {', '.join(failed_needs)}, which did not complete")
        else:
            with console.status(f"{label}: starting") as status:
                outcome = runtime.run(
                    cell,
                    run_dir,
                    profile,
                    timeout=timeout,
                    progress=lambda text, label=label, status=status: status.update(f"{label}: {text}"),
                )
        outcomes[cell.cell_id] = outcome
        if report_line is not None:
            report_line(cell, outcome)
        else:
            console.print(describe(label, cell, outcome))
    return list(outcomes.values())


def _clear_outputs(run_dir: Path) -> None:
    """A rerun starts from a clean run directory, so no stale file mixes into the new result."""
    import shutil

    for path in run_dir.iterdir():
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def describe(label: str, cell: Cell, outcome: dict) -> str:
    status = outcome.get("status")
    if status == "ok":
        rate = outcome.get("samples_per_second")
        rate_text = (
            f"{rate:,.2f} {cell.unit}" if isinstance(rate, int | float) else "no rate (no step after warm-up)"
        )
        return f"[green]ok[/green]     {label}: {rate_text} over {outcome.get('steps')} steps"
    return f"[red]{status}[/red] {label}: {outcome.get('error')}"
