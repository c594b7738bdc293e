"""Cells: one run each, a recipe's variant resolved for one accelerator and one scale.

A cell carries the trainer's arguments exactly as they will be passed, so `inv show` prints
what will run, `run.sh` spells it out, and `cell.json` records it next to the results.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from reprokit import __version__
from reprokit.contract import trainers
from reprokit.contract.errors import ReprokitError
from reprokit.contract.gitinfo import kit_revision
from reprokit.contract.trainers import contract
from reprokit.plan import accelerators, arguments, release_choice
from reprokit.plan.data import apply as apply_data
from reprokit.plan.recipes import Recipe, Variant, recipe_hash, resolve_path, trainer_module


@dataclass
class Cell:
    cell_id: str
    recipe: str
    title: str
    variant: str
    scale: str
    accelerator: str
    devices: int
    nodes: int
    trainer: str
    unit: str
    args: dict[str, Any]
    references: list[dict[str, Any]]
    baseline: bool = False
    # The variant's published figures on the other accelerators' devices: not comparable with
    # this cell's number, but their ratios to the baseline's are (the report's published speedups).
    other_references: list[dict[str, Any]] = field(default_factory=list)
    needs: dict[str, str] = field(default_factory=dict)
    published: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tolerance: float = 0.10
    recipe_file: str = ""
    recipe_hash: str = ""
    kit_version: str = __version__
    kit_revision: str | None = None
    # Appended to the cell ids of a session that runs each cell at several node counts ("--2n").
    id_suffix: str = ""
    # Speedups compare variants of one group (a post's first version has its own baseline).
    group: str = "main"
    # What the verdicts rest on that the publication does not state (shown in the report).
    assumptions: list[str] = field(default_factory=list)
    # The user's real data (--data KEY=PATH), as given.
    data: dict[str, str] = field(default_factory=dict)
    # Repetitions (--repeat N): this is run `repeat` of `repeats`; they share the series id, the cell id
    # without the repetition's suffix, under which results give their median and spread.
    repeat: int = 1
    repeats: int = 1
    series_id: str = ""
    # The software this cell must run to be judged (recipe published_software + the variant's own),
    # and, for a variant beyond the publication, the published variant it is measured against.
    software: dict[str, str] = field(default_factory=dict)
    beyond: str | None = None
    # The trainer's argument roles (its schema's): which arguments are the batch, the workers, the step
    # cap and the switches it records; results read them from cell.json, knowing no trainer.
    roles: dict[str, Any] = field(default_factory=dict)
    # The stack the publication ran (framework and library versions, GPU generation) and where that
    # was read: the report prints it beside the versions the cell ran.
    published_stack: dict[str, str] = field(default_factory=dict)
    published_stack_source: str | None = None
    # The torch.profiler schedule the trainer runs (--profile, or the scale's `profile`), in steps.
    profile: dict[str, int] | None = None
    schema_version: int = contract()["schema_version"]

    @property
    def trainer_module(self) -> str:
        """What run.sh runs with `python -m`."""
        return trainer_module(self.trainer)

    def argv(self) -> list[str]:
        """The trainer's arguments, ``--output_dir`` excepted (the runtime sets it)."""
        return to_argv(self.args)

    def global_batch(self) -> tuple[int, int] | None:
        """(per-device batch, global batch over every node and device), from the trainer's batch role."""
        per_device = self.args.get(self.roles.get("batch_per_device", ""))
        if not isinstance(per_device, int):
            return None
        return per_device, per_device * self.devices * self.nodes

    def needed_cells(self) -> dict[str, str]:
        """Trainer arg -> cell id of the cell whose output it consumes."""
        return {arg: cell_id(self.recipe, other, self.id_suffix) for arg, other in self.needs.items()}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cell_id(recipe: str, variant: str, suffix: str = "") -> str:
    return f"{recipe}--{variant}{suffix}"


def to_argv(args: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for key, value in args.items():
        if value is None:
            continue
        flag = f"--{key}"
        if value is True:
            argv.append(flag)
        elif value is False:
            # Said explicitly: some published flags default to true (--remove_unused_columns).
            argv += [flag, "false"]
        elif isinstance(value, list | tuple):
            argv += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        else:
            argv += [flag, str(value)]
    return argv


def argv_lines(argv: list[str]) -> list[list[str]]:
    """argv grouped as `--flag values...`, one group per line of run.sh."""
    lines: list[list[str]] = []
    for token in argv:
        if token.startswith("--") or not lines:
            lines.append([token])
        else:
            lines[-1].append(token)
    return lines


def shell_args(argv: list[str]) -> list[str]:
    """Group argv into one `--flag values...` string per line, shell-quoted, to show."""
    return [" ".join(shlex.quote(t) for t in line) for line in argv_lines(argv)]


def _model_args(recipe: Recipe, architecture: dict[str, Any] | None) -> dict[str, Any]:
    args: dict[str, Any] = {"model_name_or_path": recipe.model.id}
    if recipe.model.revision:
        args["model_revision"] = recipe.model.revision
    if architecture:
        args["model_config_json"] = architecture
    return args


def _dataset_args(recipe: Recipe) -> dict[str, Any]:
    data = recipe.dataset
    args: dict[str, Any] = {"dataset_name": data.id}
    if data.config:
        args["dataset_config_name"] = data.config
    if data.revision:
        args["dataset_revision"] = data.revision
    args.update({f"{key}_column": column for key, column in data.columns.items()})
    args.update({f"synthetic_{key}": value for key, value in data.synthetic.items()})
    return args


# What a traced cell traces: one step of the profiler's own warm-up, then three, right after the
# trainer's throughput warm-up (its steps are excluded from samples/s for the same reason).
PROFILE_STEPS = {"warmup": 1, "active": 3}


def profile_schedule(args: dict[str, Any]) -> dict[str, int]:
    """The --profile schedule of a cell with these trainer arguments."""
    return {"wait": int(args.get("throughput_warmup_steps") or 0), **PROFILE_STEPS}


def left_out(recipe: Recipe, variant: Variant, accelerator: str, scale: str) -> str | None:
    """Why ``variant`` gives no cell on ``accelerator`` at ``scale``, in a phrase; None where it gives one."""
    if not accelerators.get(accelerator).runs(variant.accelerators):
        return f"variant {variant.name} of {recipe.name} runs only on {', '.join(variant.accelerators)}, not {accelerator}"
    only = recipe.scales[scale].variants
    if only is not None and variant.name not in only:
        return (
            f"variant {variant.name} of {recipe.name} has no {scale} scale "
            f"(the {scale} scale runs {', '.join(only)})"
        )
    return None


def nothing_to_run(recipe: Recipe, accelerator: str, scale: str, variants: list[str] | None = None) -> str:
    """Why a recipe gives no cell here: each asked variant's reason, or what its variants run on."""
    asked = [v for v in recipe.variants if not variants or v.name in variants]
    reasons = [why for v in asked if (why := left_out(recipe, v, accelerator, scale))]
    if variants:
        return "; ".join(reasons)
    runs_on = sorted({a for v in recipe.variants for a in (v.accelerators or [accelerator])})
    return (
        f"recipe {recipe.name} has no variant for {accelerator} at the {scale} scale "
        f"(its variants run on {', '.join(runs_on)})"
    )


def expand(
    recipe: Recipe,
    recipe_name_or_path: str,
    accelerator: str,
    scale: str,
    variants: list[str] | None = None,
    devices: int | None = None,
    nodes: int | None = None,
    id_suffix: str = "",
    data: dict[str, str] | None = None,
    profiled: bool = False,
    release: str | None = None,
) -> list[Cell]:
    """The cells of one recipe on one accelerator at one scale, in an order that runs `needs` first.
    `data`: the user's real data by key (checked already, data.resolve), for the keys this recipe takes.
    `profiled`: trace a few steps of each cell (so does a scale that says `profile: true`).
    `release`: the id of the release whose figures judge the cells (release_choice.release_for; None: the publication's)."""
    profile = accelerators.get(accelerator)
    if "." not in recipe.trainer and recipe.trainer not in trainers.kit_trainers():
        raise ReprokitError(
            f"{resolve_path(recipe_name_or_path)}: trainer: {recipe.trainer!r} is not one of the kit's trainers "
            f"({', '.join(trainers.kit_trainers())}); name one, or your own module by its dotted path"
        )
    if scale not in recipe.scales:
        raise ReprokitError(f"unknown scale {scale!r}; known scales: {', '.join(recipe.scales)} (or auto)")
    scale_def = recipe.scales[scale]
    known = [v.name for v in recipe.variants]
    for name in variants or []:
        if name not in known:
            raise ReprokitError(
                f"recipe {recipe.name!r} has no variant {name!r}; its variants: {', '.join(known)}"
            )
    chosen = [
        v
        for v in recipe.variants
        if profile.runs(v.accelerators)
        and (scale_def.variants is None or v.name in scale_def.variants)
        and (not variants or v.name in variants)
    ]
    path = resolve_path(recipe_name_or_path)
    digest = recipe_hash(recipe_name_or_path)
    revision = kit_revision()
    architecture = scale_def.architecture or recipe.model.architecture
    cells = []
    for variant in chosen:
        args: dict[str, Any] = {}
        args.update(_model_args(recipe, architecture))
        args.update(_dataset_args(recipe))
        args.update(recipe.hyperparameters)
        # A variant run as written for another accelerator (ROCm's for CUDA) takes its arguments too.
        for name in (*profile.runs_variants_of, profile.name):
            args.update(recipe.accelerator_args.get(name, {}))
        args.update(variant.args)
        args.update(scale_def.args)
        used = apply_data(recipe, args, data or {})
        schedule = profile_schedule(args) if profiled or scale_def.profile else None
        if schedule:
            args["profile"] = schedule
        wrong = arguments.problems(recipe.trainer, args)
        if wrong:
            raise ReprokitError(f"{path}: variant {variant.name} ({scale}, {profile.name}): {wrong[0]}")
        cells.append(
            Cell(
                cell_id=cell_id(recipe.name, variant.name, id_suffix),
                recipe=recipe.name,
                title=recipe.title,
                variant=variant.name,
                scale=scale,
                accelerator=profile.name,
                devices=devices or scale_def.devices or recipe.devices,
                nodes=nodes or scale_def.nodes,
                trainer=recipe.trainer,
                unit=recipe.unit,
                args=args,
                references=[
                    r.model_dump(exclude_none=True)
                    for r in release_choice.references_for(variant, profile.name, release)
                ],
                other_references=[
                    r.model_dump(exclude_none=True)
                    for r in release_choice.of_release(variant, release)
                    if r not in release_choice.references_for(variant, profile.name, release)
                ],
                baseline=variant.baseline,
                group=variant.group,
                assumptions=list(recipe.assumptions),
                data=used,
                needs=dict(variant.needs),
                published=dict(variant.published),
                notes=[*recipe.notes, *scale_def.notes, *variant.notes],
                tolerance=recipe.tolerance,
                recipe_file=str(path.resolve()),
                recipe_hash=digest,
                kit_revision=revision,
                id_suffix=id_suffix,
                software=recipe.expected_software(variant, profile.name),
                beyond=variant.beyond,
                roles=arguments.roles(recipe.trainer),
                published_stack=dict(recipe.published_software.stack) if recipe.published_software else {},
                published_stack_source=recipe.published_software.source
                if recipe.published_software
                else None,
                profile=schedule,
            )
        )
    return _dependency_order(cells)


def _dependency_order(cells: list[Cell]) -> list[Cell]:
    by_variant = {c.variant: c for c in cells}
    ordered: list[Cell] = []
    seen: set[str] = set()

    def visit(cell: Cell, stack: tuple[str, ...]) -> None:
        if cell.variant in seen:
            return
        if cell.variant in stack:
            raise ReprokitError(
                f"recipe {cell.recipe!r}: variants need each other in a cycle: {' -> '.join(stack)}"
            )
        for other in cell.needs.values():
            if other in by_variant:
                visit(by_variant[other], (*stack, cell.variant))
        seen.add(cell.variant)
        ordered.append(cell)

    for cell in cells:
        visit(cell, ())
    return ordered
