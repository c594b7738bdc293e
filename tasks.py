"""reprokit tasks: rerun published accelerator training benchmarks. `inv --help TASK` explains one."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from invoke import Exit, task

from reprokit import accelerators, cells, recipes, render, report, session
from reprokit.errors import ReprokitError

COMMON_HELP = {
    "accelerator": "cuda, gaudi2, cpu or auto (detect this machine's; default)",
    "scale": "published, smoke or auto (published with an accelerator, smoke without; default)",
    "runtime": "local, docker, slurm or auto (docker when an engine and the image are there; default)",
    "variant": "run only this variant (repeatable); `inv show RECIPE` lists them",
    "out": "results folder (default: results/)",
    "devices": "devices per node (default: the published count, capped at what this machine has)",
    "nodes": "nodes (Slurm runtime)",
}


def helps(*names: str, **extra: str) -> dict[str, str]:
    return {**{n: COMMON_HELP[n] for n in names}, **extra}


def friendly(fn):
    """Kit errors become one line on stderr and an exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ReprokitError as exc:
            raise Exit(f"reprokit: {exc}", code=exc.exit_code) from None
        except KeyboardInterrupt:
            raise Exit(
                "reprokit: interrupted; what was measured is kept (resume with --resume SESSION)", code=130
            ) from None

    return wrapper


@task(name="recipes")
@friendly
def recipes_(c):
    """List the recipes, their variants and the publications they reproduce."""
    for name in recipes.available():
        recipe = recipes.load(name)
        print(f"{name:14s} {recipe.title}  [{recipe.publication.organization}, {recipe.publication.year}]")
        for variant in recipe.variants:
            only = f"  (only {', '.join(variant.accelerators)})" if variant.accelerators else ""
            print(f"{'':16s}{variant.name}{only}")


@task(
    iterable=["variant"],
    help=helps(
        "accelerator",
        "scale",
        "variant",
        "devices",
        recipe="a recipe name or a path to a recipe file",
        json="print the recipe and its cells as JSON",
    ),
)
@friendly
def show(c, recipe, accelerator="auto", scale="published", variant=None, json_=False, devices=None):
    """Show a recipe's resolved cells: the trainer arguments, devices and published references."""
    loaded = recipes.load(recipe)
    chosen = accelerators.resolve(accelerator)
    found = cells.expand(
        loaded, recipe, chosen, session.choose_scale(scale, chosen), variant or None, _int(devices)
    )
    if json_:
        payload = {
            "recipe": loaded.name,
            "title": loaded.title,
            "publication": loaded.publication.model_dump(),
            "model": loaded.model.model_dump(exclude_none=True),
            "dataset": loaded.dataset.model_dump(exclude_none=True),
            "hyperparameters": loaded.hyperparameters,
            "published_commands": loaded.published_commands,
            "warnings": loaded.warnings,
            "cells": [c_.to_json() for c_ in found],
        }
        print(json.dumps(payload, indent=2))
        return
    for warning in loaded.warnings:
        print(f"warning: {warning}")
    for cell in found:
        print(f"\n{cell.cell_id}  ({cell.scale}, {cell.accelerator}, {cell.nodes}x{cell.devices} devices)")
        for ref in cell.references:
            what = (
                f"{ref['value']} {cell.unit} on {ref['devices']} {ref['device']}"
                if "value" in ref
                else f"{ref['ratio']}x"
            )
            print(f"  published: {what}" + (f"  ({ref['note']})" if ref.get("note") else ""))
        for key, value in cell.published.items():
            print(f"  published {key}={value}, run with {key}={cell.args.get(key)}")
        for note in cell.notes:
            print(f"  note: {note}")
        print("  " + " \\\n    ".join(cells.shell_args(cell.argv())))


@task(
    name="render",
    positional=["recipe"],
    iterable=["variant"],
    help=helps(
        "accelerator",
        "scale",
        "variant",
        "devices",
        "nodes",
        recipe="a recipe name or path (default: all recipes)",
        out="folder to write to (default: rendered/)",
    ),
)
@friendly
def render_(
    c,
    recipe=None,
    accelerator="auto",
    scale="published",
    variant=None,
    out="rendered",
    devices=None,
    nodes=None,
):
    """Render the Dockerfile and one run.sh + cell.json per cell, to read, diff or run by hand."""
    chosen = accelerators.resolve(accelerator)
    profile = accelerators.get(chosen)
    out_dir = Path(out)
    context = render.write_build_context(profile, out_dir / "docker" / chosen)
    print(f"{context / 'Dockerfile'}")
    for name in [recipe] if recipe else recipes.available():
        loaded = recipes.load(name)
        for cell in cells.expand(
            loaded,
            name,
            chosen,
            session.choose_scale(scale, chosen),
            variant or None,
            _int(devices),
            _int(nodes),
        ):
            run_dir = out_dir / cell.recipe / f"{chosen}-{cell.scale}" / cell.variant
            print(render.write_run_dir_inputs(cell, profile, run_dir))


def _int(value):
    return None if value in (None, "") else int(value)


def _reproduce(names, accelerator, scale, runtime, variant, out, devices, nodes, resume, timeout, dry_run):
    the_plan = session.plan(names, accelerator, scale, runtime, variant, _int(devices), _int(nodes))
    for message in the_plan.messages:
        session.console.print(message)
    if dry_run:
        profile = accelerators.get(the_plan.accelerator)
        for cell in the_plan.cells:
            print(f"# {cell.cell_id} ({the_plan.runtime}, {cell.scale}, {cell.accelerator})")
            print(render.run_script(cell, profile))
        return None
    session_dir = session.resume_dir(out, resume) if resume else session.new_session_dir(out, None)
    session.console.print(f"Session: {session_dir}")
    outcomes = session.run_cells(
        the_plan, session_dir, resume=bool(resume), timeout=float(timeout) if timeout else None
    )
    path = report.write(session_dir)
    report.print_table(report.collect.rows(session_dir))
    session.console.print(f"Report: {path}\nTensorBoard: tensorboard --logdir {session_dir / 'tensorboard'}")
    failed = [o for o in outcomes if o.get("status") != "ok"]
    if failed:
        raise ReprokitError(f"{len(failed)} of {len(outcomes)} cells did not complete; see {path}")
    return session_dir


RUN_HELP = helps(
    *COMMON_HELP,
    resume="a session to finish: complete cells are kept, the others rerun",
    timeout="seconds allowed per cell before it is stopped and recorded as timed out",
    dry_run="print the run scripts that would run, and run nothing",
)


@task(iterable=["variant"], help={"recipe": "a recipe name or path", **RUN_HELP})
@friendly
def run(
    c,
    recipe,
    accelerator="auto",
    scale="auto",
    runtime="auto",
    variant=None,
    out=None,
    devices=None,
    nodes=None,
    resume=None,
    timeout=None,
    dry_run=False,
):
    """Run one recipe's cells into a new session folder, then collect and report."""
    _reproduce([recipe], accelerator, scale, runtime, variant, out, devices, nodes, resume, timeout, dry_run)


@task(iterable=["recipe", "variant"], help={"recipe": "a recipe (repeatable; default: all)", **RUN_HELP})
@friendly
def reproduce(
    c,
    recipe=None,
    accelerator="auto",
    scale="auto",
    runtime="auto",
    variant=None,
    out=None,
    devices=None,
    nodes=None,
    resume=None,
    timeout=None,
    dry_run=False,
):
    """Rerun the published recipes at the scale that fits this machine, then collect and report."""
    _reproduce(
        recipe or [], accelerator, scale, runtime, variant, out, devices, nodes, resume, timeout, dry_run
    )


@task(help={"session": "a session folder (results/<session>)"})
@friendly
def collect(c, session_):
    """Rebuild results.csv and results.jsonl of a session from its run directories."""
    table = report.collect.collect(_session(session_))
    print(f"{len(table)} cells -> {Path(session_) / 'results.csv'}")


@task(name="report", help={"session": "a session folder (results/<session>)"})
@friendly
def report_(c, session_):
    """Write a session's report (report.md) and print its table."""
    path = report.write(_session(session_))
    report.print_table(report.collect.rows(_session(session_)))
    print(path)


def _session(path: str) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        folder = session.RESULTS_DIR / path
    if not folder.is_dir():
        raise ReprokitError(f"no session folder {path!r} (give results/<session>)")
    return folder
