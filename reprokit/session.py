"""A session: the cells of one `inv reproduce`/`inv run`, run one after another into results/<session>/.

Each cell's run directory is its own; a failed cell is recorded and the matrix goes on; an
interrupted session resumes (`--resume SESSION`) without rerunning complete cells.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from . import accelerators, collect, recipes, rundirs, runtimes
from .cells import ROOT, Cell, expand, kit_revision
from .errors import ReprokitError
from .render import write_run_dir_inputs

RESULTS_DIR = ROOT / "results"
TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class Plan:
    accelerator: str
    scale: str
    runtime: str
    cells: list[Cell]
    messages: list[str]
    # What was passed on to every recipe's expansion (None: each recipe's own), for --resume.
    devices: int | None = None
    nodes: int | list[int] | None = None


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
                f"a Docker engine answers and the {accelerator} image is built",
            )
        return (
            "local",
            f"a Docker engine answers but no {accelerator} image is built; `inv build` makes it",
        )
    return "local", f"no container engine: {engine}"


def plan(
    names: list[str],
    accelerator: str = "auto",
    scale: str = "auto",
    runtime: str = "auto",
    variants: list[str] | None = None,
    devices: int | None = None,
    nodes: int | list[int] | None = None,
) -> Plan:
    """The cells to run. A list of node counts runs every cell at each (ids end in --<n>n), so the
    report can give each multi-node cell's scaling efficiency over its single-node twin."""
    messages: list[str] = []
    chosen_accelerator = accelerators.resolve(accelerator)
    chosen_scale = choose_scale(scale, chosen_accelerator)
    chosen_runtime, why = choose_runtime(runtime, chosen_accelerator)
    if accelerator == "auto" or scale == "auto" or why:
        found = "No accelerator" if chosen_accelerator == "cpu" else f"Accelerator {chosen_accelerator}"
        reason = f" ({why})" if why else ""
        messages.append(
            f"{found} here: running the {chosen_scale} scale with the {chosen_runtime} runtime{reason}."
        )
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
        counts = nodes if isinstance(nodes, list) else [nodes]
        for count in counts:
            suffix = f"--{count}n" if len(counts) > 1 else ""
            cells += expand(recipe, name, chosen_accelerator, chosen_scale, wanted, devices, count, suffix)
    return Plan(chosen_accelerator, chosen_scale, chosen_runtime, cells, messages, devices, nodes)


def new_session_dir(out: str | None, session: str | None) -> Path:
    base = Path(out) if out else RESULTS_DIR
    base.mkdir(parents=True, exist_ok=True)
    if session:
        path = base / session
        path.mkdir(exist_ok=True)
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    # Two sessions started in the same second must not share (and mix) one folder.
    for suffix in ["", *(f"-{n}" for n in range(2, 1000))]:
        path = base / f"{stamp}{suffix}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ReprokitError(f"cannot make a new session folder under {base}: too many named {stamp}-*")


def resume_dir(out: str | None, session: str) -> Path:
    base = Path(out) if out else RESULTS_DIR
    path = Path(session) if Path(session).is_dir() else base / session
    if not path.is_dir():
        raise ReprokitError(f"no session {session!r} to resume under {base}")
    return path


@dataclass
class Request:
    """What the user asked `inv reproduce` for, before anything was resolved: stored in
    session.json with the plan, so that `--resume SESSION` reruns the same cells without flags."""

    recipes: list[str] = field(default_factory=list)
    accelerator: str = "auto"
    scale: str = "auto"
    runtime: str = "auto"
    variants: list[str] = field(default_factory=list)
    devices: int | None = None
    nodes: int | list[int] | None = None
    timeout: float | None = None
    runtime_options: dict[str, Any] = field(default_factory=dict)


def _recipe_ref(name: str) -> str:
    """A recipe by name stays a name; a recipe file becomes an absolute path (resume runs anywhere)."""
    path = recipes.resolve_path(name)
    return name if path.parent == recipes.RECIPES_DIR and path.stem == name else str(path.resolve())


def save_session(session_dir: Path, the_plan: Plan, request: Request) -> Path:
    """session.json: the request and its resolved plan, written when the session starts."""
    stored = asdict(request)
    stored["recipes"] = [_recipe_ref(n) for n in request.recipes]
    payload = {
        "session": session_dir.name,
        "created_at": time.strftime(collect.TIME_FORMAT),
        "kit_revision": kit_revision(),
        "request": stored,
        "accelerator": the_plan.accelerator,
        "scale": the_plan.scale,
        "runtime": the_plan.runtime,
        "devices": the_plan.devices,
        "nodes": the_plan.nodes,
        "cells": [
            {
                "cell_id": c.cell_id,
                "recipe": c.recipe,
                "variant": c.variant,
                "scale": c.scale,
                "accelerator": c.accelerator,
                "devices": c.devices,
                "nodes": c.nodes,
                "baseline": c.baseline,
                "recipe_file": c.recipe_file,
                "recipe_hash": c.recipe_hash,
            }
            for c in the_plan.cells
        ],
        "resumed_at": [],
    }
    path = session_dir / collect.SESSION_FILE
    rundirs.write_json_atomic(path, payload)
    return path


def _conflicts(stored: dict[str, Any], request: Request) -> list[str]:
    """Flags given with --resume that would plan other cells than the session's."""
    asked = stored.get("request", {})
    found = []
    for key in ("accelerator", "scale", "runtime"):
        given = getattr(request, key)
        if given != "auto" and given not in (stored.get(key), asked.get(key)):
            found.append(f"--{key} {given} (the session used {stored.get(key)})")
    if request.recipes and [_recipe_ref(n) for n in request.recipes] != asked.get("recipes"):
        found.append(
            f"recipes {' '.join(request.recipes)} (the session ran {' '.join(asked.get('recipes') or ['all'])})"
        )
    if request.variants and request.variants != asked.get("variants"):
        found.append(
            f"--variant {' '.join(request.variants)} (the session ran {' '.join(asked.get('variants') or ['all'])})"
        )
    for key in ("devices", "nodes"):
        given = getattr(request, key)
        if given is not None and given != stored.get(key):
            used = stored.get(key) or "each recipe's own"
            found.append(f"--{key} {given} (the session used {used})")
    return found


def plan_request(request: Request) -> Plan:
    """The plan of what the user asked for, flags as given."""
    return plan(
        request.recipes,
        request.accelerator,
        request.scale,
        request.runtime,
        request.variants or None,
        request.devices,
        request.nodes,
    )


def resume_plan(session_dir: Path, request: Request) -> tuple[Plan, Request]:
    """The plan of a session being resumed: its stored plan, re-expanded to the same cells."""
    stored = collect.session_plan(session_dir)
    if not stored:
        the_plan = plan_request(request)
        the_plan.messages.append(
            f"{session_dir.name} has no {collect.SESSION_FILE}: planned from the flags given instead."
        )
        return the_plan, request
    conflicts = _conflicts(stored, request)
    if conflicts:
        raise ReprokitError(
            f"--resume {session_dir.name} reruns the session's own plan ({session_dir / collect.SESSION_FILE}); "
            f"leave out {'; '.join(conflicts)}"
        )
    asked = stored.get("request", {})
    the_plan = plan(
        asked.get("recipes") or [],
        stored["accelerator"],
        stored["scale"],
        stored["runtime"],
        asked.get("variants") or None,
        stored.get("devices"),
        stored.get("nodes"),
    )
    by_id = {c.cell_id: c for c in the_plan.cells}
    wanted = stored.get("cells") or []
    missing = [c["cell_id"] for c in wanted if c["cell_id"] not in by_id]
    if missing:
        raise ReprokitError(
            f"session {session_dir.name} planned {', '.join(missing)}, which the recipes no longer give; "
            "start a new session"
        )
    for item in wanted:
        now = by_id[item["cell_id"]].recipe_hash
        if item.get("recipe_hash") and now != item["recipe_hash"]:
            the_plan.messages.append(
                f"warning: recipe {item['recipe']} changed since the session started "
                f"(hash {item['recipe_hash']} -> {now}); cells kept from before ran the old one"
            )
    the_plan.messages[:] = list(dict.fromkeys(the_plan.messages))
    the_plan.cells = [by_id[c["cell_id"]] for c in wanted]
    effective = Request(
        **{
            **{k: v for k, v in asked.items() if k in Request.__dataclass_fields__},
            "timeout": request.timeout if request.timeout is not None else asked.get("timeout"),
            "runtime_options": {**(asked.get("runtime_options") or {}), **request.runtime_options},
        }
    )
    return the_plan, effective


def mark_resumed(session_dir: Path) -> None:
    stored = collect.session_plan(session_dir)
    if stored:
        stored.setdefault("resumed_at", []).append(time.strftime(collect.TIME_FORMAT))
        rundirs.write_json_atomic(session_dir / collect.SESSION_FILE, stored)


def _interrupt(signum: int, frame: object) -> None:
    # Once: a second SIGTERM (a batch system repeats it) must not cut short stopping the cell.
    for sig in TERMINATION_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def _terminate_like_ctrl_c() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, `kill`, a batch system's stop) stop a session the way
    Ctrl-C does: the running cell's process group is stopped and recorded as interrupted. Python's
    default would exit at once and leave the trainer running, orphaned, in its own session."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in TERMINATION_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_cells(
    the_plan: Plan,
    session_dir: Path,
    resume: bool = False,
    timeout: float | None = None,
    runtime_options: dict | None = None,
    report_line: Callable[[Cell, dict], None] | None = None,
) -> list[dict]:
    """Run every cell; returns their summaries. Failures are recorded, never raised; an interrupt
    (Ctrl-C, SIGTERM, SIGHUP) stops the running cell, records it as interrupted and propagates."""
    runtime = runtimes.get(the_plan.runtime, **(runtime_options or {}))
    profile = accelerators.get(the_plan.accelerator)
    runs = session_dir / "runs"
    outcomes: dict[str, dict] = {}
    with _terminate_like_ctrl_c():
        for index, cell in enumerate(the_plan.cells, 1):
            run_dir = runs / cell.cell_id
            label = f"[{index}/{len(the_plan.cells)}] {cell.cell_id}"
            if resume and rundirs.is_complete(run_dir):
                outcomes[cell.cell_id] = rundirs.summary(run_dir) or {}
                console.print(f"{label}: complete, not rerun")
                continue
            if run_dir.exists():
                _clear_outputs(run_dir)
            needs = cell.needed_cells().values()
            failed_needs = [c for c in needs if outcomes.get(c, {}).get("status") != "ok"]
            if failed_needs:
                # cell.json and run.sh still go in: the row says what was skipped, and how to run it.
                write_run_dir_inputs(cell, profile, run_dir)
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
