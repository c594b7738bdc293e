"""A session: the cells of one `inv reproduce`/`inv run`, run one after another into results/<session>/.

Each cell's run directory is its own; a failed cell is recorded and the matrix goes on; an
interrupted session resumes (`--resume SESSION`) without rerunning complete cells. The session
owns the one supervision loop every runtime's cells go through (`run_cell`): the clock, the
timeout, Ctrl-C and termination signals, the progress line, and the settling of the run directory.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from . import accelerators, collect, containers, recipes, rundirs, runtimes
from . import cells as cells_module
from .cells import Cell, expand
from .data import resolve as resolve_data
from .errors import ReprokitError, StartFailed
from .gitinfo import kit_revision
from .handles import Ended
from .progress import MatrixProgress
from .runtimes.base import Runtime, write_run_dir_inputs

RESULTS_DIR = Path("results")
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
    container: str = "none"


def choose_scale(scale: str, accelerator: str) -> str:
    if scale != "auto":
        return scale
    return "smoke" if accelerator == "cpu" else "published"


def choose_runtime(
    runtime: str, container: str, profile: accelerators.Profile
) -> tuple[str, str, str | None]:
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
        if not containers.REGISTRY.load(container).serves(runtime_class.launches):
            served = [
                n
                for n in containers.REGISTRY.names()
                if containers.REGISTRY.load(n).serves(runtime_class.launches)
            ]
            raise ReprokitError(f"the {runtime} runtime runs cells in {', '.join(served)}, not {container}")
        return runtime, container, None
    if not chosen_automatically and runtime_class.launches == "local":
        # `--runtime local` said on its own means this machine as it is: no container.
        return runtime, "none", None
    chosen, why = runtime_class(runtime_class.options_class(), None).auto_container(profile)
    return runtime, chosen, why


def plan(
    names: list[str],
    accelerator: str = "auto",
    scale: str = "auto",
    runtime: str = "auto",
    variants: list[str] | None = None,
    devices: int | None = None,
    nodes: int | list[int] | None = None,
    container: str = "auto",
    fit_devices: bool = True,
    data: dict[str, str] | None = None,
    repeats: int = 1,
    profiled: bool = False,
) -> Plan:
    """The cells to run. A list of node counts runs every cell at each (ids end in --<n>n), so the
    report can give each multi-node cell's scaling efficiency over its single-node twin.
    `fit_devices`: published cells run locally on at most the devices this machine has (not wanted
    when only rendering for another machine). `profiled`: every cell traces a few steps (--profile)."""
    messages: list[str] = []
    chosen_accelerator = accelerators.resolve(accelerator)
    profile = accelerators.get(chosen_accelerator)
    chosen_scale = choose_scale(scale, chosen_accelerator)
    chosen_runtime, chosen_container, why = choose_runtime(runtime, container, profile)
    if accelerator == "auto" or scale == "auto" or why:
        found = "No accelerator" if chosen_accelerator == "cpu" else f"Accelerator {chosen_accelerator}"
        reason = f" ({why})" if why else ""
        inside = "" if chosen_container == "none" else f" in {chosen_container}"
        messages.append(
            f"{found} here: running the {chosen_scale} scale with the {chosen_runtime} runtime{inside}{reason}."
        )
    if fit_devices and chosen_scale == "published" and devices is None and chosen_runtime == "local":
        # Published runs used 8 devices; on a smaller machine run per device and compare per device.
        devices = min(accelerators.device_count(chosen_accelerator), 8)
    cells: list[Cell] = []
    recipe_names = names or recipes.available()
    loaded = {name: recipes.load(name) for name in recipe_names}
    real_data = resolve_data(list(loaded.values()), data or {})
    for name in recipe_names:
        recipe = loaded[name]
        messages.extend(f"warning: {w}" for w in recipe.warnings)
        wanted = [v for v in (variants or []) if v in {x.name for x in recipe.variants}] or None
        if variants and wanted is None and len(recipe_names) == 1:
            expand(recipe, name, chosen_accelerator, chosen_scale, variants)  # raises: names the variants
        if variants and wanted is None:
            continue
        counts = nodes if isinstance(nodes, list) else [nodes]
        for count in counts:
            suffix = f"--{count}n" if len(counts) > 1 else ""
            for repeat in range(1, repeats + 1):
                # Repetition k of a cell reads repetition k of the cell it needs (same suffix).
                again = f"{suffix}--r{repeat}" if repeats > 1 else suffix
                for cell in expand(
                    recipe, name, chosen_accelerator, chosen_scale, wanted, devices, count, again, real_data,
                    profiled,
                ):
                    cell.repeat, cell.repeats = repeat, repeats
                    cell.series_id = cells_module.cell_id(cell.recipe, cell.variant, suffix)
                    cells.append(cell)
    return Plan(
        chosen_accelerator, chosen_scale, chosen_runtime, cells, messages, devices, nodes, chosen_container
    )


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
    # The runtime's and the container platform's options (--partition, --image, ...), by name.
    runtime_options: dict[str, Any] = field(default_factory=dict)
    container: str = "auto"
    # Site settings in effect (reprokit.yaml, REPROKIT_* variables), recorded with their sources.
    settings: dict[str, Any] = field(default_factory=dict)
    # The user's real data: --data KEY=PATH (and the `data` setting).
    data: dict[str, str] = field(default_factory=dict)
    # Runs of each cell (--repeat N): results give their median and spread.
    repeat: int = 1
    # --profile: every cell traces a few steps with torch.profiler.
    profile: bool = False


def _recipe_ref(name: str) -> str:
    """A kit recipe by name stays a name; any other recipe file becomes an absolute path (a resume
    finds it without the --recipes folder it came from)."""
    path = recipes.resolve_path(name)
    return name if recipes.is_kit_recipe(path) and path.stem == name else str(path.resolve())


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
        "container": the_plan.container,
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


def _stored_runtime(stored: dict[str, Any]) -> tuple[str, str]:
    """(runtime, container) of a stored session; sessions from before containers were their own
    axis said `docker` for Docker on this machine."""
    runtime, container = stored.get("runtime") or "local", stored.get("container")
    if runtime == "docker":
        return "local", "docker"
    if container is None:  # the Slurm runtime chose its platform from its options then
        container = (stored.get("request", {}).get("runtime_options") or {}).get("container") or "auto"
    return runtime, container


def _conflicts(stored: dict[str, Any], request: Request) -> list[str]:
    """Flags given with --resume that would plan other cells than the session's."""
    asked = stored.get("request", {})
    found = []
    runtime, container = _stored_runtime(stored)
    used = {"accelerator": stored.get("accelerator"), "scale": stored.get("scale"), "runtime": runtime,
            "container": container}  # fmt: skip
    for key, value in used.items():
        given = getattr(request, key)
        if given != "auto" and given not in (value, asked.get(key)):
            found.append(f"--{key} {given} (the session used {value})")
    if request.recipes and [_recipe_ref(n) for n in request.recipes] != asked.get("recipes"):
        found.append(
            f"recipes {' '.join(request.recipes)} (the session ran {' '.join(asked.get('recipes') or ['all'])})"
        )
    if request.variants and request.variants != asked.get("variants"):
        found.append(
            f"--variant {' '.join(request.variants)} (the session ran {' '.join(asked.get('variants') or ['all'])})"
        )
    if request.profile and not asked.get("profile"):
        found.append("--profile (the session traced nothing)")
    for key in ("devices", "nodes"):
        given = getattr(request, key)
        if given is not None and given != stored.get(key):
            used_value = stored.get(key) or "each recipe's own"
            found.append(f"--{key} {given} (the session used {used_value})")
    return found


def plan_request(request: Request, fit_devices: bool = True) -> Plan:
    """The plan of what the user asked for, flags as given."""
    return plan(
        request.recipes,
        request.accelerator,
        request.scale,
        request.runtime,
        request.variants or None,
        request.devices,
        request.nodes,
        request.container,
        fit_devices,
        request.data,
        request.repeat,
        request.profile,
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
    runtime, container = _stored_runtime(stored)
    the_plan = plan(
        asked.get("recipes") or [],
        stored["accelerator"],
        stored["scale"],
        runtime,
        asked.get("variants") or None,
        stored.get("devices"),
        stored.get("nodes"),
        container,
        data=asked.get("data") or {},
        repeats=int(asked.get("repeat") or 1),
        profiled=bool(asked.get("profile")),
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
    stored_options = {k: v for k, v in (asked.get("runtime_options") or {}).items() if k != "container"}
    effective = Request(
        **{
            **{k: v for k, v in asked.items() if k in Request.__dataclass_fields__},
            "runtime": runtime,
            "container": container,
            "timeout": request.timeout if request.timeout is not None else asked.get("timeout"),
            "runtime_options": {**stored_options, **request.runtime_options},
            "settings": request.settings or asked.get("settings") or {},
        }
    )
    return the_plan, effective


def mark_resumed(session_dir: Path) -> None:
    stored = collect.session_plan(session_dir)
    if stored:
        stored.setdefault("resumed_at", []).append(time.strftime(collect.TIME_FORMAT))
        rundirs.write_json_atomic(session_dir / collect.SESSION_FILE, stored)


# ---------------------------------------------------------------------------------------------
# The runtime and container platform of a plan, with their options


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


def build_runtime(the_plan: Plan, options: dict[str, Any] | None = None) -> Runtime:
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


# ---------------------------------------------------------------------------------------------
# Running: the one supervision loop


def _interrupt(signum: int, frame: object) -> None:
    # Once: a second SIGTERM (a batch system repeats it) must not cut short stopping the cell.
    for sig in TERMINATION_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def _terminate_like_ctrl_c() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, `kill`, a batch system's stop) stop a session the way
    Ctrl-C does: the running cell is stopped and recorded as interrupted. Python's default would
    exit at once and leave the trainer running, orphaned, in its own session."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in TERMINATION_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_cell(
    runtime: Runtime,
    cell: Cell,
    run_dir: Path,
    profile: accelerators.Profile,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Start one cell, follow it until it ends, a timeout stops it or Ctrl-C does, and settle its run
    directory; returns its summary. A summary the trainer wrote with status ok is never replaced."""
    try:
        handle = runtime.start(cell, run_dir, profile)
    except StartFailed as exc:
        return rundirs.finish(run_dir, None, str(exc))
    started = time.monotonic()
    reason: str | None = None
    try:
        while (ended := handle.poll()) is None:
            elapsed = time.monotonic() - started
            if timeout is not None and elapsed > timeout:
                ended, reason = handle.stop(), "timeout"
                break
            if progress is not None:
                progress(rundirs.last_throughput(run_dir) or handle.describe(elapsed))
            time.sleep(handle.poll_seconds)
    except KeyboardInterrupt:
        stopped = handle.stop()
        handle.close()
        rundirs.finish(run_dir, stopped.exit_code, "interrupted")
        raise
    handle.close()
    return settle(run_dir, ended, reason)


def settle(run_dir: Path, ended: Ended, reason: str | None = None) -> dict:
    return rundirs.finish(run_dir, ended.exit_code, reason or ended.reason)


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
    runtime = build_runtime(the_plan, runtime_options)
    profile = accelerators.get(the_plan.accelerator)
    # Absolute: cells run in their own run directory, where a relative path would mean another place.
    runs = session_dir.resolve() / "runs"
    outcomes: dict[str, dict] = {}
    checked = False
    with _terminate_like_ctrl_c(), MatrixProgress(console, len(the_plan.cells)) as bars:
        for index, cell in enumerate(the_plan.cells, 1):
            run_dir = runs / cell.cell_id
            label = f"[{index}/{len(the_plan.cells)}] {cell.cell_id}"
            if resume and rundirs.is_complete(run_dir):
                outcomes[cell.cell_id] = rundirs.summary(run_dir) or {}
                bars.finish_cell(f"{label}: complete, not rerun")
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
                if not checked:  # once, before the first cell: no engine, no cluster, no image
                    runtime.check(profile)
                    checked = True
                steps = cell.args.get("max_steps")
                bars.start_cell(label, steps if isinstance(steps, int) and steps > 0 else None)
                outcome = run_cell(
                    runtime,
                    cell,
                    run_dir,
                    profile,
                    timeout=timeout,
                    progress=lambda text, run_dir=run_dir: bars.update(run_dir, text),
                )
            outcomes[cell.cell_id] = outcome
            if report_line is not None:
                report_line(cell, outcome)
                bars.finish_cell("")
            else:
                bars.finish_cell(describe(label, cell, outcome))
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
