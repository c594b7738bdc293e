"""reprokit tasks: rerun published accelerator training benchmarks. `inv --help TASK` explains one."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from invoke import Exit, task

from reprokit import accelerators, cells, recipes, render, report, session
from reprokit import reproduce as reproduce_
from reprokit.errors import ReprokitError

COMMON_HELP = {
    "accelerator": "cuda, gaudi2, cpu or auto (detect this machine's; default)",
    "scale": "published, smoke or auto (published with an accelerator, smoke without; default)",
    "runtime": "local, docker, slurm or auto (docker when an engine and the image are there; default)",
    "variant": "run only this variant (repeatable); `inv show RECIPE` lists them",
    "out": "results folder (default: results/)",
    "devices": "devices per node (default: the published count, capped at what this machine has)",
    "nodes": "nodes (Slurm runtime); with run/reproduce a list such as 1,2 runs every cell at each "
    "count and reports the scaling efficiency",
}
# Options of the Slurm runtime (`--runtime slurm`), passed on to it as runtime_options.
SLURM_HELP = {
    "partition": "Slurm partition to submit to (default: the cluster's default)",
    "account": "Slurm account to charge",
    "time_limit": "Slurm time limit per cell job (sbatch --time: minutes or [D-]HH:MM:SS)",
    "exclusive": "whole nodes per job (default); --no-exclusive shares them",
    "container": "pyxis, apptainer, none (this interpreter, on shared storage) or auto (pyxis on GPUs; default)",
    "image": "image to run in: a squashfs/.sif or image reference with --runtime slurm (default: the "
    "`inv export` file), a tag with --runtime docker (default: `inv build`'s)",
}


def slurm_options(partition=None, account=None, time_limit=None, exclusive=True, container=None, image=None):
    """The Slurm flags given (defaults left out, so a resumed session keeps its own)."""
    given = {
        "partition": partition,
        "account": account,
        "time_limit": time_limit,
        "exclusive": None if exclusive else False,
        "container": container,
        "image": image,
    }
    return {key: value for key, value in given.items() if value is not None}


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
        runtime="slurm: also write each cell's sbatch.sh and bind-rank.sh (default: local, run.sh only)",
        **SLURM_HELP,
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
    runtime="local",
    partition=None,
    account=None,
    time_limit=None,
    exclusive=True,
    container=None,
    image=None,
):
    """Render the Dockerfile and one run.sh + cell.json per cell (and sbatch.sh with --runtime slurm)."""
    options = slurm_options(partition, account, time_limit, exclusive, container, image)
    if runtime not in ("local", "docker", "slurm"):
        raise ReprokitError(f"unknown runtime {runtime!r}; known runtimes: local, docker, slurm")
    if options and runtime != "slurm":
        raise ReprokitError(
            f"--{', --'.join(options).replace('_', '-')} are Slurm options: add --runtime slurm"
        )
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
            if runtime == "slurm":
                from reprokit.runtimes import slurm

                opts = slurm.SlurmOptions(**options)
                print(slurm.write_job_inputs(cell, profile, run_dir, opts, mount=run_dir.parent))
            else:
                print(render.write_run_dir_inputs(cell, profile, run_dir))


@task(
    help={
        "accelerator": "cuda, gaudi2, cpu or auto (this machine's; default)",
        "base_image": "build on this base instead of the profile's (a private registry, or a local one)",
        "wheelhouse": "install the pins from this folder (`inv wheelhouse`), served on 127.0.0.1: no internet",
        "force": "rebuild even when the image is up to date",
        "dry_run": "print the `docker build` command and build nothing",
    }
)
@friendly
def build(c, accelerator="auto", base_image=None, wheelhouse=None, force=False, dry_run=False):
    """Build the accelerator's pinned image (a cache hit when nothing changed)."""
    from reprokit import images

    profile = accelerators.get(accelerators.resolve(accelerator))
    if dry_run:
        print(images.dry_run(profile, base_image, wheelhouse))
        return
    folder = Path(wheelhouse) if wheelhouse else None
    result = images.build(profile, base_image, folder, force, session.console)
    print(result.tag)


@task(
    help={
        "accelerator": "cuda, gaudi2, cpu or auto (this machine's; default)",
        "dest": "folder to fill with wheels (default: wheelhouse/<accelerator>)",
        "python_version": "the image's Python (default 3.11: the cpu image's Debian bookworm)",
    }
)
@friendly
def wheelhouse(c, accelerator="auto", dest=None, python_version="3.11"):
    """Download the image's pinned wheels (and their dependencies) for an offline `inv build --wheelhouse`."""
    from reprokit import images

    profile = accelerators.get(accelerators.resolve(accelerator))
    folder = Path(dest or f"wheelhouse/{profile.name}")
    wheels = images.wheelhouse(profile, folder, python_version)
    size = sum(w.stat().st_size for w in wheels) / 2**30
    print(f"{len(wheels)} wheels ({size:.1f} GiB) in {folder}")


@task(
    name="export",
    help={
        "accelerator": "cuda, gaudi2, cpu or auto (this machine's; default)",
        "format": "enroot (a squashfs for pyxis: `enroot import`) or apptainer (a .sif: `apptainer build`)",
        "dest": "file to write (default: exports/<image tag>.sqsh|.sif, what --runtime slurm looks for)",
        "dry_run": "print the command and run nothing",
    },
)
@friendly
def export_(c, accelerator="auto", format="enroot", dest=None, dry_run=False):
    """Turn the built image (`inv build`) into a file for Slurm nodes: enroot squashfs or Apptainer .sif."""
    from reprokit.runtimes import slurm

    profile = accelerators.get(accelerators.resolve(accelerator))
    command, target = slurm.export(profile, format, Path(dest) if dest else None, dry_run=dry_run)
    print(" ".join(command) if dry_run else target)


def _int(value):
    return None if value in (None, "") else int(value)


def _nodes(value):
    """--nodes 2, or a list 1,2 (each cell at each count)."""
    if value in (None, ""):
        return None
    try:
        counts = [int(part) for part in str(value).split(",")]
    except ValueError:
        raise ReprokitError(f"--nodes {value}: give a number of nodes, or a list such as 1,2") from None
    if any(count < 1 for count in counts) or len(set(counts)) != len(counts):
        raise ReprokitError(f"--nodes {value}: node counts must be distinct and at least 1")
    return counts[0] if len(counts) == 1 else counts


def _reproduce(
    names, accelerator, scale, runtime, variant, out, devices, nodes, resume, timeout, dry_run, options=None
):
    request = session.Request(
        recipes=list(names),
        accelerator=accelerator,
        scale=scale,
        runtime=runtime,
        variants=list(variant or []),
        devices=_int(devices),
        nodes=_nodes(nodes),
        timeout=float(timeout) if timeout else None,
        runtime_options=dict(options or {}),
    )
    reproduce_.reproduce(request, out, resume, dry_run)


RUN_HELP = helps(
    *COMMON_HELP,
    **SLURM_HELP,
    resume="a session to finish (name or folder): reruns its stored plan, keeping complete cells",
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
    partition=None,
    account=None,
    time_limit=None,
    exclusive=True,
    container=None,
    image=None,
):
    """Run one recipe's cells into a new session folder, then collect and report."""
    options = slurm_options(partition, account, time_limit, exclusive, container, image)
    _reproduce(
        [recipe], accelerator, scale, runtime, variant, out, devices, nodes, resume, timeout, dry_run, options
    )


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
    partition=None,
    account=None,
    time_limit=None,
    exclusive=True,
    container=None,
    image=None,
):
    """Rerun the published recipes at the scale that fits this machine, then collect and report."""
    options = slurm_options(partition, account, time_limit, exclusive, container, image)
    _reproduce(
        recipe or [],
        accelerator,
        scale,
        runtime,
        variant,
        out,
        devices,
        nodes,
        resume,
        timeout,
        dry_run,
        options,
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
    """Write a session's report: report.md, a self-contained report.html and the plots; print its table."""
    written = report.write(_session(session_))
    report.print_table(written.table)
    print(written.html)
    print(written.markdown)


def _session(path: str) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        folder = session.RESULTS_DIR / path
    if not folder.is_dir():
        raise ReprokitError(f"no session folder {path!r} (give results/<session>)")
    return folder
