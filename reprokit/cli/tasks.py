"""reprokit's tasks: thin, each a docstring (its --help), its flags, and a call into the kit.

`reprokit TASK` (the installed command), `python -m reprokit TASK` and, in a checkout, `inv TASK`
run these. The recipe-running tasks share one options object (options.RunOptions) whose values
become the planner's Request in one place (options.request); site settings fill the flags not given.
The image tasks are in image_tasks.py, the results tasks in result_tasks.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from invoke import Collection

from reprokit import pipeline as reproducing
from reprokit.cli import fleet_tasks, image_tasks, pipes, result_tasks
from reprokit.cli.options import (
    PREFLIGHT_FIELDS,
    RENDER_FIELDS,
    RESUME_FIELDS,
    RUN_FIELDS,
    RunOptions,
    count,
    recipe_names,
    request,
    with_settings,
    writable_folder,
)
from reprokit.cli.tasking import friendly, options_task, task
from reprokit.contract import trainers
from reprokit.contract.console import console
from reprokit.contract.errors import PreflightFailed, ReprokitError
from reprokit.contract.textsafe import line
from reprokit.judge import other_devices, releases
from reprokit.plan import cells, listing, recipe_schema, recipes, release_choice
from reprokit.plan.planner import choose_scale
from reprokit.run.placement import plan
from reprokit.run.plugin_options import runtime_for

RECIPES_HELP = "a recipe name or path, several separated by commas, or all (the default)"
# `inv TASK --help | head`: invoke prints the help before any task runs, so the quiet end of a closed
# pipe is installed when the tasks are loaded.
pipes.quiet_broken_pipe()


@task(
    name="recipes",
    help={
        "recipes": "a folder of your own recipes, searched after the kit's (repeatable)",
        "json_": "print them as JSON (its schema: reprokit/schemas/recipes.schema.json)",
    },
    iterable=["recipes"],
)
@friendly
def recipes_(c, recipes=None, json_=False):
    """List the recipes, their variants and the publications they reproduce."""
    with_settings(RunOptions(recipes=list(recipes or [])))
    from reprokit.plan import recipes as kit_recipes

    found = kit_recipes.load_unique(kit_recipes.available())
    if json_:
        from reprokit import schemas

        print(schemas.dumps("recipes", {"recipes": [_recipe_json(recipe) for recipe in found.values()]}))
        return
    # A recipe is a file anyone can write: its words reach the terminal as text, never as its controls.
    for name, recipe in found.items():
        publication = recipe.publication
        print(line(f"{name:14s} {recipe.title}  [{publication.organization}, {publication.year}]"))
        for variant in recipe.variants:
            only = f"  (only {', '.join(variant.accelerators)})" if variant.accelerators else ""
            print(line(f"{'':16s}{variant.name}{only}"))


def _recipe_json(recipe) -> dict:
    return {
        "name": recipe.name,
        "title": recipe.title,
        "unit": recipe.unit,
        "devices": recipe.devices,
        "publication": recipe.publication.model_dump(),
        "variants": [
            {
                "name": v.name,
                "accelerators": v.accelerators,
                "baseline": v.baseline,
                "group": v.group,
                "beyond": v.beyond,
            }
            for v in recipe.variants
        ],  # fmt: skip
        "references": _releases_json(recipe),
    }


@options_task(
    ("accelerator", "scale", "variant", "devices", "recipes", "reference"),
    defaults={"scale": "published"},
    extra={"json_": (False, "print the recipe and its cells as JSON")},
)
@friendly
def show(c, recipe, options: RunOptions, json_=False):
    """Show a recipe's resolved cells: the trainer arguments, devices and published references, and
    every release it has figures of (what --reference picks)."""
    options, _ = with_settings(options)
    loaded = recipes.load(recipe)
    chosen = listing.resolve(options.accelerator).name
    scale = choose_scale(options.scale, chosen)
    release = release_choice.release_for({loaded.name: loaded}, options.reference)[loaded.name]
    found = cells.expand(
        loaded,
        recipe,
        chosen,
        scale,
        options.variant or None,
        count("--devices", options.devices, "devices per node"),
        release=release,
    )
    if not found:
        raise ReprokitError(cells.nothing_to_run(loaded, chosen, scale, options.variant or None))
    if json_:
        payload = {
            "recipe": loaded.name,
            "title": loaded.title,
            "publication": loaded.publication.model_dump(),
            "model": loaded.model.model_dump(exclude_none=True),
            "dataset": loaded.dataset.model_dump(exclude_none=True),
            "hyperparameters": loaded.hyperparameters,
            "published_commands": [c.model_dump() for c in loaded.published_commands],
            "assumptions": loaded.assumptions,
            "warnings": loaded.warnings,
            "references": _releases_json(loaded),
            "cells": [c_.to_json() for c_ in found],
        }
        print(json.dumps(payload, indent=2))
        return
    for warning in loaded.warnings:
        print(line(f"warning: {warning}"))
    if trainers.locate(loaded.trainer_module) is None:
        print(
            line(
                f"warning: trainer module {loaded.trainer_module} is not on this machine: an image must have it"
            )
        )
    _print_releases(loaded, release)
    for cell in found:
        print()
        print(
            line(f"{cell.cell_id}  ({cell.scale}, {cell.accelerator}, {cell.nodes}x{cell.devices} devices)")
        )
        for ref in cell.references:
            what = (
                f"{ref['value']} {cell.unit} on {ref['devices']} {ref['device']}"
                if "value" in ref
                else f"{ref['ratio']}x"
            )
            if ref.get("release"):
                what += f", {releases.said(ref)}"
            print(line(f"  published: {what}" + (f"  ({ref['note']})" if ref.get("note") else "")))
        if not any("value" in ref for ref in cell.references):  # nothing published for this accelerator
            world = cell.devices * cell.nodes
            for ref in other_devices.figures(cell.other_references, None, world, cell.nodes):
                print(line(f"  {other_devices.labelled(ref, cell.unit)}"))
        for key, value in cell.published.items():
            print(line(f"  published {key}={value}, run with {key}={cell.args.get(key)}"))
        for note in cell.notes:
            print(line(f"  note: {note}"))
        # Shell words are quoted (render/shell_values.py); a control character in one is shown, never sent.
        print("  " + " \\\n    ".join(line(word) for word in cells.shell_args(cell.argv())))


def _releases_json(recipe) -> list[dict]:
    """Each release the recipe has figures of, with its figures (variant, device, devices, value)."""
    found = []
    for release_id, figures in recipe.releases().items():
        # The publication's figures are one "release" only as --reference names them: what software
        # each ran (where its source says) stays on the figure itself.
        first = figures[0] if figures and release_id != recipe_schema.PUBLICATION else None
        found.append(
            {
                "id": release_id,
                "release": first.release if first else None,
                "date": first.date if first else None,
                "commit": first.commit if first else None,
                "figures": [
                    {"variant": v.name, "device": r.device, "devices": r.devices, "value": r.value}
                    for v in recipe.variants
                    for r in v.references
                    if r.release_id == release_id and r.value is not None
                ],
            }
        )
    return found


def _print_releases(recipe, chosen: str | None) -> None:
    """The releases a user can judge against (--reference), the one in use marked."""
    found = _releases_json(recipe)
    if len(found) < 2:
        return  # the publication's figures alone: nothing to pick
    print(line(f"references by release (--reference ID; judged against: {chosen or found[0]['id']}):"))
    for item in found:
        figures = ", ".join(
            f"{f['value']} on {f['devices']} {f['device']} ({f['variant']})" for f in item["figures"]
        )
        if item["release"]:
            what = f"{item['release']}, {item['date']}, {(item['commit'] or '')[:9]}"
        else:
            what = f"the publication's figures ({recipe.publication.source}; the default)"
        print(line(f"  {item['id']}: {what}" + (f": {figures}" if item["release"] else "")))


# ---------------------------------------------------------------------------------------------
# Running


@options_task(
    RENDER_FIELDS,
    recipe_help=RECIPES_HELP,
    extra={"out": (None, "the folder to write into (default: rendered/); it holds no session")},
)
@friendly
def render(c, recipe, options: RunOptions, out=None):
    """Write the Dockerfile and each cell's run directory as a session would, to read or run by hand.

    The run directories are rendered/<accelerator>-<scale>/runs/<cell>/: cell.json and run.sh, and
    with --runtime slurm sbatch.sh and bind-rank.sh; a cell that reads another's checkpoint finds it
    beside it, as in a session. Nothing goes to the results folder (--results of the other tasks)."""
    from reprokit import images
    from reprokit.images.build import vendor_for

    options, site = with_settings(options)
    if out:
        writable_folder(out, "--out")
    asked = request(recipe_names(recipe), options, site)
    the_plan = plan(asked, fit_devices=False)
    runtime = runtime_for(the_plan, asked.runtime_options)
    profile = the_plan.profile
    out = Path(out or "rendered")
    files, included = vendor_for(profile, None, True, console)
    context = images.write_context(
        profile, out / "docker" / profile.name, images.context_files(profile, files, included)
    )
    print(context / "Dockerfile")
    runs = out / f"{the_plan.accelerator}-{the_plan.scale}" / "runs"
    for cell in the_plan.cells:
        print(runtime.prepare(cell, runs / cell.cell_id, profile))


def _run(names: list[str], options: RunOptions) -> None:
    options, site = with_settings(options)
    reproducing.reproduce(request(names, options, site), options.results, options.resume, options.dry_run)


@options_task(RUN_FIELDS)
@friendly
def run(c, recipe, options: RunOptions):
    """Run one recipe's cells into a new session folder, then collect and report."""
    _run([recipe], options)


@options_task(RUN_FIELDS, recipe_help=RECIPES_HELP, fallback="all")
@friendly
def reproduce(c, recipe, options: RunOptions):
    """Rerun the published recipes at the scale that fits this machine, then collect and report.

    With --dry-run, print each cell's run.sh (and what its runtime wraps around it), then the preflight's
    quick checks of the session (`preflight --no-steps`: devices, image, trainers, storage, data) and each
    cell's answer; exit 3 where they would refuse a cell (2: a usage error, nothing planned)."""
    _run(recipe_names(recipe), options)


@options_task(
    RESUME_FIELDS,
    positional="session",
    recipe_help="the session to finish: its folder, its name under the results folder, latest or previous",
)
@friendly
def resume(c, session, options: RunOptions):
    """Finish a session: rerun its stored plan (session.json), keeping the cells that completed."""
    _run([], replace(options, resume=session))


@options_task(
    PREFLIGHT_FIELDS,
    recipe_help=RECIPES_HELP,
    fallback="all",
    extra={
        "steps": (
            True,
            "run a few real steps of each trainer and loader variant (--no-steps: the quick checks only)",
        ),
        "json_": (False, "print the answers as JSON (its schema: reprokit/schemas/preflight.schema.json)"),
    },
)
@friendly
def preflight(c, recipe, options: RunOptions, steps=True, json_=False):
    """Check this machine before a long run: per cell of the session `reproduce` would run with these
    flags, would it be judged, or why not (devices, image, storage, data, a few real steps, the
    collective across nodes). Exits non-zero on any cell that would not."""
    import time

    from reprokit import preflight as checking

    started = time.monotonic()
    options, site = with_settings(options)
    asked = request(recipe_names(recipe), options, site)
    report = checking.run(asked, options.results, steps)
    if json_:
        from reprokit import schemas

        print(schemas.dumps("preflight", report.to_json(time.monotonic() - started)))
    else:
        for message in report.messages:
            console.print(message)
        print(checking.describe(asked, report))
        print(report.table())
        console.print(f"Preflight took {time.monotonic() - started:.0f} s.")
    refusal = report.refusal()
    if refusal:
        raise PreflightFailed(refusal)


ns = Collection(
    recipes_, show, render, image_tasks.build, image_tasks.pins, image_tasks.wheelhouse, image_tasks.export_,
    run, reproduce, resume, preflight, result_tasks.collect, result_tasks.report, result_tasks.history, result_tasks.compare,
    result_tasks.export_results, fleet_tasks.accept,
)  # fmt: skip
