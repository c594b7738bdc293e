"""reprokit's tasks: thin, each a docstring (its --help), its flags, and a call into the kit.

`reprokit TASK` (the installed command), `python -m reprokit TASK` and, in a checkout, `inv TASK`
run these. The recipe-running tasks share one options object (options.RunOptions); site settings
(settings.py) fill the flags not given.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from invoke import Collection, Exit, task

from . import accelerators, cells, data, recipes, report, session, settings
from . import reproduce as reproducing
from .errors import ReprokitError
from .options import PLUGIN_OPTIONS, RENDER_FIELDS, RUN_FIELDS, KitTask, RunOptions, options_task

T = TypeVar("T")


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


# ---------------------------------------------------------------------------------------------
# From flags and settings to what the kit works with


def with_settings(options: RunOptions) -> tuple[RunOptions, settings.Settings]:
    """Options with the site settings filling what no flag gave; the recipe folders put to use."""
    site = settings.load()
    filled = replace(
        options,
        runtime=options.runtime or site.get("runtime", "auto"),
        container=options.container or site.get("container", "auto"),
        out=options.out or site.get("results"),
        partition=options.partition or site.get("partition"),
        account=options.account or site.get("account"),
        time_limit=options.time_limit or site.get("time_limit"),
        exclusive=options.exclusive and bool(site.get("exclusive", True)),
        image=options.image or site.get("image"),
        timeout=options.timeout or site.get("timeout"),
        recipes=[*site.get("recipes", []), *options.recipes],
    )
    recipes.use_dirs(filled.recipes)
    return filled, site


def _parsed(value: Any, convert: Callable[[Any], T], problem: str) -> T | None:
    """A flag's value converted; None where it was not given, and ``problem`` as the one-line error
    where it does not convert."""
    if value in (None, ""):
        return None
    try:
        return convert(value)
    except ValueError:
        raise ReprokitError(problem) from None


def _int(value) -> int | None:
    return _parsed(value, int, f"{value!r}: give a whole number")


def _nodes(value) -> int | list[int] | None:
    """--nodes 2, or a list 1,2 (each cell at each count)."""
    counts = _parsed(
        value,
        lambda text: [int(part) for part in str(text).split(",")],
        f"--nodes {value}: give a number of nodes, or a list such as 1,2",
    )
    if counts is None:
        return None
    if any(count < 1 for count in counts) or len(set(counts)) != len(counts):
        raise ReprokitError(f"--nodes {value}: node counts must be distinct and at least 1")
    return counts[0] if len(counts) == 1 else counts


def _timeout(value) -> float | None:
    return _parsed(value, float, f"--timeout {value}: give seconds")


def _repeat(value) -> int:
    count = _int(value) or 1
    if count < 1:
        raise ReprokitError(f"--repeat {value}: give how many times to run each cell (1 or more)")
    return count


def request_of(names: list[str], options: RunOptions, site: settings.Settings) -> session.Request:
    plugin_options = {key: getattr(options, key) for key in PLUGIN_OPTIONS if key in options.given()}
    return session.Request(
        recipes=names,
        accelerator=options.accelerator,
        scale=options.scale,
        runtime=options.runtime,
        container=options.container,
        variants=list(options.variant),
        devices=_int(options.devices),
        nodes=_nodes(options.nodes),
        timeout=_timeout(options.timeout),
        runtime_options=plugin_options,
        settings=site.record(),
        data={**site.get("data", {}), **data.parse(options.data)},
        repeat=_repeat(options.repeat),
        profile=options.profile,
    )


def _session_folder(path: str) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        folder = session.RESULTS_DIR / path
    if not folder.is_dir():
        raise ReprokitError(f"no session folder {path!r} (give results/<session>)")
    return folder


# ---------------------------------------------------------------------------------------------
# Recipes


@task(
    name="recipes",
    help={"recipes": "a folder of your own recipes, searched after the kit's (repeatable)"},
    iterable=["recipes"],
)
@friendly
def recipes_(c, recipes=None):
    """List the recipes, their variants and the publications they reproduce."""
    with_settings(RunOptions(recipes=list(recipes or [])))
    from . import recipes as kit_recipes

    for name in kit_recipes.available():
        recipe = kit_recipes.load(name)
        print(f"{name:14s} {recipe.title}  [{recipe.publication.organization}, {recipe.publication.year}]")
        for variant in recipe.variants:
            only = f"  (only {', '.join(variant.accelerators)})" if variant.accelerators else ""
            print(f"{'':16s}{variant.name}{only}")


@options_task(
    ("accelerator", "scale", "variant", "devices", "recipes"),
    recipe="required",
    defaults={"scale": "published"},
    extra={"json_": (False, "print the recipe and its cells as JSON")},
)
@friendly
def show(c, recipe, options: RunOptions, json_=False):
    """Show a recipe's resolved cells: the trainer arguments, devices and published references."""
    options, _ = with_settings(options)
    loaded = recipes.load(recipe)
    chosen = accelerators.resolve(options.accelerator)
    found = cells.expand(
        loaded,
        recipe,
        chosen,
        session.choose_scale(options.scale, chosen),
        options.variant or None,
        _int(options.devices),
    )
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


# ---------------------------------------------------------------------------------------------
# Images


@task(
    help={
        "accelerator": "cuda, gaudi2, cpu or auto (this machine's; default)",
        "base_image": "build on this base instead of the profile's (a private registry, or a local one)",
        "wheelhouse": "install the pins from this folder (`inv wheelhouse`), served on 127.0.0.1: no internet",
        "force": "rebuild even when the image is up to date",
        "dry_run": "print the `docker build` command and build nothing",
        "without_vendor": "build without the profile's vendor files (gaudi2: optimum-habana's mediapipe "
        "modules); the image then refuses the variants that need them",
    }
)
@friendly
def build(
    c, accelerator="auto", base_image=None, wheelhouse=None, force=False, dry_run=False, without_vendor=False
):
    """Build the accelerator's pinned image (a cache hit when nothing changed)."""
    from . import images

    profile = accelerators.get(accelerators.resolve(accelerator))
    if dry_run:
        print(images.dry_run(profile, base_image, wheelhouse, not without_vendor, session.console))
        return
    folder = Path(wheelhouse) if wheelhouse else None
    result = images.build(profile, base_image, folder, force, session.console, not without_vendor)
    print(result.tag)


@task(
    help={
        "accelerator": "cuda, gaudi2, cpu or auto (this machine's; default)",
        "dest": "folder to fill with wheels (default: wheelhouse/<accelerator>)",
        "python_version": "the image's Python (default: its base's, bases.yaml)",
        "without_vendor": "leave out the profile's vendor files (for a build with --without-vendor)",
    }
)
@friendly
def wheelhouse(c, accelerator="auto", dest=None, python_version=None, without_vendor=False):
    """Download exactly the wheels the image's pip layer installs (its lock), for the base's Python and
    glibc, for an offline `inv build --wheelhouse`."""
    from . import images

    profile = accelerators.get(accelerators.resolve(accelerator))
    folder = Path(dest or f"wheelhouse/{profile.name}")
    wheels = images.wheelhouse(profile, folder, python_version)
    size = sum(w.stat().st_size for w in wheels) / 2**30
    print(f"{len(wheels)} wheels ({size:.1f} GiB) in {folder}")
    if profile.vendor is not None and not without_vendor:
        from .images import vendor

        staged = vendor.stage(profile, folder)
        print(f"{len(staged)} vendor files (sha256 checked) in {folder / 'vendor'}")


@task(
    help={
        "accelerator": "cuda, gaudi2, cpu or auto (this machine's; default)",
        "write": "write the resolved set as the profile's lock (docker/locks/<accelerator>.txt)",
        "check": "resolve with the lock as constraints and fail when it no longer holds",
    }
)
@friendly
def pins(c, accelerator="auto", write=False, check=False):
    """Resolve the image's pins against what its base ships (pip, without pulling the base): what the
    pip layer installs, and whether it would replace anything the base provides."""
    from .images import pins as resolving

    profile = accelerators.get(accelerators.resolve(accelerator))
    base = profile.base_manifest
    session.console.print(
        f"Resolving the {profile.name} pins against {base.reference} (Python {base.python}, glibc {base.glibc})"
    )
    with session.console.status("pip resolving against the base's model"):
        found = resolving.resolve(
            profile, lock=profile.lock_file if check and profile.lock_file.exists() else None
        )
    problems = found.problems(base)
    if problems:
        raise ReprokitError(f"{profile.name} pins do not resolve on {base.reference}: {'; '.join(problems)}")
    for name, (old, new) in found.replaced.items():
        print(f"replaces the base's {name} {old} with {new}: {base.may_replace.get(name, '?')}")
    locked = resolving.read_lock(profile.lock_file)
    if check and locked != found.install:
        changed = sorted(set(locked.items()) ^ set(found.install.items()))
        raise ReprokitError(
            f"{profile.lock_file} no longer matches the resolution ({len(changed)} differences, e.g. {changed[0]}); "
            f"rewrite it with `inv pins --accelerator {profile.name} --write`"
        )
    if write:
        profile.lock_file.write_text(resolving.lock_text(found, base))
        print(f"{len(found.install)} pins -> {profile.lock_file}")
        return
    for name, version in sorted(found.install.items()):
        print(f"{name}=={version}")


@task(
    name="export",
    help={
        "accelerator": "cuda, gaudi2, cpu or auto (this machine's; default)",
        "format": "enroot (a squashfs for pyxis: `enroot import`) or apptainer (a .sif: `apptainer build`)",
        "dest": "file to write (default: exports/<image tag>.sqsh|.sif, what --container pyxis|apptainer looks for)",
        "dry_run": "print the command and run nothing",
    },
)
@friendly
def export_(c, accelerator="auto", format="enroot", dest=None, dry_run=False):  # noqa: A002 - the flag's name
    """Turn the built image (`inv build`) into a file for Slurm nodes: enroot squashfs or Apptainer .sif."""
    from . import images

    profile = accelerators.get(accelerators.resolve(accelerator))
    command, target = images.export(profile, format, Path(dest) if dest else None, dry_run=dry_run)
    print(" ".join(command) if dry_run else target)


# ---------------------------------------------------------------------------------------------
# Running


@options_task(
    RENDER_FIELDS,
    recipe="optional",
    recipe_help="a recipe name or path (default: all recipes)",
)
@friendly
def render(c, recipe, options: RunOptions):
    """Write the Dockerfile and each cell's run directory as a session would, to read or run by hand.

    The run directories are rendered/<accelerator>-<scale>/runs/<cell>/: cell.json and run.sh, and
    with --runtime slurm sbatch.sh and bind-rank.sh; a cell that reads another's checkpoint finds it
    beside it, as in a session."""
    from . import images

    options, site = with_settings(options)
    request = request_of([recipe] if recipe else [], options, site)
    the_plan = session.plan_request(request, fit_devices=False)
    runtime = session.build_runtime(the_plan, request.runtime_options)
    profile = accelerators.get(the_plan.accelerator)
    out = Path(options.out or "rendered")
    from .images.build import vendor_for

    files, included = vendor_for(profile, None, True, session.console)
    context = images.write_context(
        profile, out / "docker" / profile.name, images.context_files(profile, files, included)
    )
    print(context / "Dockerfile")
    runs = out / f"{the_plan.accelerator}-{the_plan.scale}" / "runs"
    for cell in the_plan.cells:
        print(runtime.prepare(cell, runs / cell.cell_id, profile))


def _run(recipe_names: list[str], options: RunOptions) -> None:
    options, site = with_settings(options)
    request = request_of(recipe_names, options, site)
    reproducing.reproduce(request, options.out, options.resume, options.dry_run)


@options_task(RUN_FIELDS, recipe="required")
@friendly
def run(c, recipe, options: RunOptions):
    """Run one recipe's cells into a new session folder, then collect and report."""
    _run([recipe], options)


@options_task(RUN_FIELDS, recipe="optional", recipe_help="a recipe name or path (default: all recipes)")
@friendly
def reproduce(c, recipe, options: RunOptions):
    """Rerun the published recipes at the scale that fits this machine, then collect and report."""
    _run([recipe] if recipe else [], options)


# ---------------------------------------------------------------------------------------------
# Results


@task(help={"session": "a session folder (results/<session>)"})
@friendly
def collect(c, session_):
    """Rebuild results.csv and results.jsonl of a session from its run directories."""
    table = report.collect.collect(_session_folder(session_))
    print(f"{len(table)} cells -> {Path(session_) / 'results.csv'}")


@task(name="report", help={"session": "a session folder (results/<session>)"})
@friendly
def report_(c, session_):
    """Write a session's report: report.md, a self-contained report.html and the plots; print its table."""
    written = report.write(_session_folder(session_))
    report.print_table(written.table)
    print(written.html)
    print(written.markdown)


def _results(results: str | None) -> Path:
    """The results folder: --results, else the `results` setting, else results/."""
    folder = Path(results or settings.load().get("results") or session.RESULTS_DIR)
    if not folder.is_dir():
        raise ReprokitError(f"no results folder {folder} (--results DIR, or the `results` setting)")
    return folder


RESULTS_HELP = "the results folder of the sessions (default: the `results` setting, else results/)"


@task(
    name="history",
    klass=KitTask,
    positional=["recipe"],
    optional_positional=("recipe",),
    help={
        "recipe": "only this recipe",
        "cell": "only cells whose id contains this",
        "device": "only runs on devices whose name contains this (H100, a100-80gb, ...)",
        "results": RESULTS_HELP,
    },
)
@friendly
def history_(c, recipe=None, cell=None, device=None, results=None):
    """Every session's numbers over time: a table here, and history.html (a plot per cell) in the
    results folder."""
    from . import history

    folder = _results(results)
    table = history.rows(folder, recipe or None, cell, device)
    if not table:
        raise ReprokitError(
            f"no completed cell under {folder} matches (sessions: {len(list(folder.glob('*/results.jsonl')))})"
        )
    history.print_table(table)
    print(history.write(folder, table))


@task(
    name="compare",
    klass=KitTask,
    positional=["a", "b"],
    optional_positional=("a", "b"),
    help={
        "a": "the first session: a folder, a name under the results folder, latest or previous (default: previous)",
        "b": "the second session, in the same forms (default: latest)",
        "threshold": "a change within this percentage is `same` (default 5)",
        "fail_on_regression": "exit 1 when a cell regressed by more than this percentage (CI of an image build)",
        "results": RESULTS_HELP,
    },
)
@friendly
def compare_(c, a=None, b=None, threshold=5.0, fail_on_regression=None, results=None):
    """Per cell, B over A with a verdict (regressed, improved, same: the spread of repeated runs counts)
    and what changed between them: image, kit revision, recipe, driver, CUDA, torch, device, host."""
    from . import compare

    # Two session folders need no results folder; a name, latest or previous is looked up in one.
    given = [Path(x) for x in (a, b) if x]
    if results is None and len(given) == 2 and all((x / "results.jsonl").is_file() for x in given):
        folder = given[1].resolve().parent
    else:
        folder = _results(results)
    first, second, found = compare.compare(folder, a or "previous", b or "latest", float(threshold) / 100)
    compare.print_table(first, second, found)
    if fail_on_regression is not None:
        limit = float(fail_on_regression) / 100
        worse = [
            x for x in found if x.verdict == compare.REGRESSED and x.ratio is not None and 1 - x.ratio > limit
        ]
        if worse:
            names = ", ".join(f"{x.cell_id} ({x.ratio:.2f}x)" for x in worse)
            raise ReprokitError(f"{len(worse)} cell(s) regressed by more than {fail_on_regression}%: {names}")


@task(
    name="export-results",
    help={
        "session": "a session folder (results/<session>)",
        "to": "where to: mlflow",
        "tracking_uri": "an MLflow tracking URI (default: sqlite in the results folder, results/mlflow.db)",
    },
)
@friendly
def export_results(c, session_, to="mlflow", tracking_uri=None):
    """Log a session into MLflow: a run per cell with its parameters, per-step samples/s and loss, its
    numbers and provenance, under one run per session carrying the report."""
    if to != "mlflow":
        raise ReprokitError(f"--to {to}: the kit exports to mlflow")
    from . import mlflow_export

    uri, made = mlflow_export.export(_session_folder(session_), tracking_uri)
    print(f"{len(made)} runs logged to {uri}" + ("" if made else " (the session was there already)"))


ns = Collection(
    recipes_, show, render, build, pins, wheelhouse, export_, run, reproduce, collect, report_,
    history_, compare_, export_results,
)  # fmt: skip
