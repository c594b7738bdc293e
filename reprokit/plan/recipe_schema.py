"""The recipe schema: what a recipe file may hold, validated strictly (closed pydantic models) so that
every error names the file, the key path and what was expected (recipes/README.md describes it)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from reprokit.contract.trainers import PACKAGE as TRAINERS_PACKAGE
from reprokit.contract.trainers import contract
from reprokit.plan.references import NAME_PATTERN, PUBLICATION, Reference, Strict

__all__ = ["NAME_PATTERN", "PUBLICATION", "Reference", "Strict"]

SCALES = ("published", "smoke")
# A kit trainer by name (reprokit_trainers.<name>), or a dotted module path of the user's own.
TRAINER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class Publication(Strict):
    title: str
    organization: str
    year: int
    source: str = Field(description="Where the numbers come from, e.g. 'recipes/bridgetower/SOURCES.md §1'")
    url: str | None = None


def _require_pin(kind: str, hub_id: str, revision: str | None, unpinned: str | None) -> None:
    # A hub id ("org/name") without a revision silently follows the hub's main branch. Where no
    # source gives the commit, the recipe must say so in `unpinned`, and the kit warns about it.
    if "/" in hub_id and not revision and not unpinned:
        raise ValueError(
            f"hub {kind} {hub_id!r} needs a pinned revision (a commit sha), or an 'unpinned' reason"
        )
    if revision and not re.fullmatch(r"[0-9a-f]{40}", revision):
        raise ValueError(f"{kind} revision {revision!r} is not a 40-character commit sha")


class Model(Strict):
    id: str
    revision: str | None = None
    unpinned: str | None = Field(default=None, description="why no revision is pinned (shown as a warning)")
    parameters: str | None = None
    architecture: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _pinned(self) -> Model:
        _require_pin("model", self.id, self.revision, self.unpinned)
        return self


class Dataset(Strict):
    id: str
    config: str | None = None
    revision: str | None = None
    columns: dict[str, str] = Field(default_factory=dict)
    splits: dict[str, int] = Field(default_factory=dict)
    synthetic: dict[str, Any] = Field(default_factory=dict)
    data: dict[str, DataKey] = Field(
        default_factory=dict, description="the real data a user can give with --data KEY=PATH"
    )
    unpinned: str | None = None
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _pinned(self) -> Dataset:
        _require_pin("dataset", self.id, self.revision, self.unpinned)
        return self


# What a trainer records of the software that ran (summary.json `software`), where the choice shows
# in throughput or in what is compared. A recipe's `published_software.kernels` uses the same keys.
SOFTWARE_KEYS: tuple[str, ...] = tuple(contract()["software_keys"])


class PublishedSoftware(Strict):
    """The stack a publication ran, and the software behaviour of its published variants."""

    source: str = Field(
        description="where these facts were read (a section of its folder's recipes/<name>/SOURCES.md, upstream code)"
    )
    stack: dict[str, str] = Field(
        default_factory=dict, description="framework and library versions, GPU generation: what ran then"
    )
    kernels: dict[str, str] = Field(
        default_factory=dict,
        description=f"the trainer's recorded software of a published variant, by key ({', '.join(SOFTWARE_KEYS)})",
    )
    accelerators: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="per accelerator profile, the kernels that differ there (a publication that ran one "
        "stack on GPUs and another on Gaudi)",
    )
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known_keys(self) -> PublishedSoftware:
        _check_software_keys("published_software.kernels", self.kernels)
        for accelerator, kernels in self.accelerators.items():
            _check_software_keys(f"published_software.accelerators.{accelerator}", kernels)
        return self


def _check_software_keys(where: str, kernels: dict[str, str]) -> None:
    unknown = sorted(set(kernels) - set(SOFTWARE_KEYS))
    if unknown:
        raise ValueError(
            f"{where}: unknown software key(s) {', '.join(unknown)}; known: {', '.join(SOFTWARE_KEYS)}"
        )


class Variant(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    args: dict[str, Any] = Field(default_factory=dict)
    accelerators: list[str] | None = None
    references: list[Reference] = Field(default_factory=list)
    baseline: bool = False
    needs: dict[str, str] = Field(
        default_factory=dict, description="trainer arg -> variant whose checkpoint it takes"
    )
    published: dict[str, Any] = Field(
        default_factory=dict, description="values as published where the run differs"
    )
    group: str = Field(
        default="main",
        pattern=NAME_PATTERN,
        description="variants compared with each other: speedups are over the baseline of the same group "
        "(a post's first version has its own baseline)",
    )
    changes: list[str] | None = Field(
        default=None, description="the trainer args this rung changes over the one before it (a ladder)"
    )
    notes: list[str] = Field(default_factory=list)
    software: dict[str, str] = Field(
        default_factory=dict,
        description="this variant's software where it differs from published_software.kernels (a ladder's rung)",
    )
    beyond: str | None = Field(
        default=None,
        description="the published variant this one goes beyond with today's faster software: it is judged by "
        "its speedup over that variant, measured in the same session, never against a published figure",
    )

    @model_validator(mode="after")
    def _known_software(self) -> Variant:
        _check_software_keys(f"variant {self.name!r} software", self.software)
        if self.beyond and self.references:
            raise ValueError(
                f"variant {self.name!r} goes beyond the publication: it has no published references"
            )
        return self


class DataKey(Strict):
    """Real data a user gives with `--data KEY=PATH`: the trainer argument it fills and its layout."""

    arg: str
    layout: Literal["imagenet", "token_labels", "folder"]
    help: str
    replaces: list[str] = Field(
        default_factory=list,
        description="the trainer arguments of a stand-in this data replaces (synthetic_data, random_init): "
        "dropped from a cell given the data, whatever its scale says, so what was given is what runs",
    )


class PublishedCommand(Strict):
    """A command line as published, verbatim, with where and in which version."""

    command: str
    source: str
    version: str
    variants: list[str] = Field(
        default_factory=list, description="the variants this command is the source of"
    )
    notes: list[str] = Field(default_factory=list)


class Scale(Strict):
    devices: int | None = Field(default=None, ge=1)
    nodes: int = Field(default=1, ge=1)
    args: dict[str, Any] = Field(default_factory=dict)
    architecture: dict[str, Any] | None = None
    variants: list[str] | None = None
    notes: list[str] = Field(default_factory=list)
    # Trace every cell of this scale with torch.profiler, as `inv reproduce --profile` does.
    profile: bool = False
    run_dir_bytes: int | None = Field(
        default=None,
        ge=0,
        description="what one run directory of this scale writes at most (logs, events, tables, the checkpoint "
        "its trainer saves): measured for a scale that runs here (the largest of its run directories, on "
        "each runtime: Slurm's job files make it larger), from the model's size otherwise; the preflight's "
        "storage check adds them up with a margin, beside the session's own files (without it: 64 MiB a cell)",
    )


class NodeRun(Strict):
    offline: dict[str, Any] = Field(
        default_factory=dict,
        description="the trainer arguments a cell of this recipe takes on a bare node, where nothing can be "
        "downloaded (random weights, synthetic data of the real shapes): the node's slices and the GPU "
        "bench add them to every cell of it (reprokit/barenode/slices.py)",
    )
    bench: list[str] | None = Field(
        default=None,
        description="the variants `make bench-gpu` runs on one CUDA device (benchmarks/gpu.py): null, every "
        "variant this recipe has for cuda; an empty list leaves the recipe out",
    )


class Recipe(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    title: str
    publication: Publication
    trainer: str = Field(
        pattern=TRAINER_PATTERN,
        description="a kit trainer (a package of reprokit_trainers with its arguments.json) or a dotted module path to run with python -m",
    )
    unit: Literal["samples/s", "img/s"]
    devices: int = Field(ge=1, description="devices per node in the published runs")
    model: Model
    dataset: Dataset
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    accelerator_args: dict[str, dict[str, Any]] = Field(default_factory=dict)
    published_commands: list[PublishedCommand] = Field(default_factory=list)
    tolerance: float = Field(
        default=0.10, gt=0, lt=1, description="relative tolerance of a reproduced figure"
    )
    variants: list[Variant] = Field(min_length=1)
    scales: dict[Literal["published", "smoke"], Scale]
    notes: list[str] = Field(default_factory=list)
    assumptions: list[str] = Field(
        default_factory=list, description="what the verdicts rest on that no publication states"
    )
    published_software: PublishedSoftware | None = None
    node: NodeRun = Field(default_factory=NodeRun, description="how a bare node runs this recipe's cells")

    def expected_software(self, variant: Variant, accelerator: str | None = None) -> dict[str, str]:
        """The software a published variant must have run on ``accelerator`` to be judged (empty:
        nothing declared; a variant beyond the publication is held to nothing)."""
        if variant.beyond or self.published_software is None:
            return {}
        published = self.published_software
        return {**published.kernels, **published.accelerators.get(accelerator or "", {}), **variant.software}

    def releases(self) -> dict[str, list[Reference]]:
        """Every figure by the release it belongs to (its id), the publication's first: what
        --reference picks from."""
        found: dict[str, list[Reference]] = {PUBLICATION: []}
        for variant in self.variants:
            for reference in variant.references:
                found.setdefault(reference.release_id, []).append(reference)
        return found

    def release_named(self, given: str) -> str | None:
        """The id of the release `given` names (its id, or its release as written, in any case); None
        where this recipe has none of that name."""
        wanted = given.strip().casefold()
        for release_id, figures in self.releases().items():
            if wanted == release_id.casefold() or any(
                (r.release or "").casefold() == wanted for r in figures
            ):
                return release_id
        return None

    def published_command(self, variant: str) -> PublishedCommand | None:
        return next((c for c in self.published_commands if variant in c.variants), None)

    @property
    def trainer_module(self) -> str:
        return trainer_module(self.trainer)

    @property
    def warnings(self) -> list[str]:
        return [
            f"{kind} {item.id} is not pinned to a revision: {item.unpinned}"
            for kind, item in (("model", self.model), ("dataset", self.dataset))
            if item.unpinned
        ]

    @model_validator(mode="after")
    def _consistent(self) -> Recipe:
        names = [v.name for v in self.variants]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"variant names must be unique, repeated: {', '.join(duplicates)}")
        missing = [s for s in SCALES if s not in self.scales]
        if missing:
            raise ValueError(f"scales must define {', '.join(missing)}")
        unknown = [n for n in self.node.bench or [] if n not in names]
        if unknown:
            raise ValueError(
                f"node.bench names unknown variant {unknown[0]!r}; its variants: {', '.join(names)}"
            )
        for variant in self.variants:
            for arg, other in variant.needs.items():
                if other not in names:
                    raise ValueError(f"variant {variant.name!r}: needs.{arg} names unknown variant {other!r}")
            if any(r.ratio is not None for r in variant.references) and not any(
                v.baseline and v.group == variant.group for v in self.variants
            ):
                raise ValueError(
                    f"variant {variant.name!r} has a ratio reference but its group {variant.group!r} "
                    "has no variant with 'baseline: true'"
                )
            if variant.beyond is not None:
                published = next((v for v in self.variants if v.name == variant.beyond), None)
                if published is None or published.beyond is not None:
                    raise ValueError(
                        f"variant {variant.name!r}: beyond names {variant.beyond!r}, which is not a published variant"
                    )
        for variant in self.variants:
            keys = [
                (r.release_id, r.device, r.devices, r.nodes)
                for r in variant.references
                if r.value is not None
            ]
            twice = sorted({k[0] for k in keys if keys.count(k) > 1} - {PUBLICATION})
            if twice:
                raise ValueError(
                    f"variant {variant.name!r}: release {twice[0]!r} has two figures for one device and setup"
                )
        for group in {v.group for v in self.variants}:
            baselines = [v.name for v in self.variants if v.group == group and v.baseline]
            if len(baselines) > 1:
                raise ValueError(f"group {group!r} has more than one baseline: {', '.join(baselines)}")
        for command in self.published_commands:
            for name in command.variants:
                if name not in names:
                    raise ValueError(f"published_commands ({command.source}) names unknown variant {name!r}")
        for scale_name, scale in self.scales.items():
            for name in scale.variants or []:
                if name not in names:
                    raise ValueError(f"scales.{scale_name}.variants names unknown variant {name!r}")
        return self


def trainer_module(trainer: str) -> str:
    """The module `python -m` runs: a kit trainer's package, or the user's dotted module as given."""
    return trainer if "." in trainer else f"{TRAINERS_PACKAGE}.{trainer}"
