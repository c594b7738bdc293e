"""Recipes: one YAML file per published benchmark, validated against a strict schema.

A recipe pins what the publication depends on (model and dataset revisions, hyperparameters as
published, reference numbers) and what is needed to run it offline (the architecture, the data's
shapes). Every error names the file, the key path and what was expected, on one line.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import ReprokitError

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
SCALES = ("published", "smoke")
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Publication(Strict):
    title: str
    organization: str
    year: int
    source: str = Field(description="Where the numbers come from, e.g. 'SOURCES.md §1'")
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
    unpinned: str | None = None
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _pinned(self) -> Dataset:
        _require_pin("dataset", self.id, self.revision, self.unpinned)
        return self


class Reference(Strict):
    """A published figure: an absolute throughput on a device, or a speedup over the baseline."""

    device: str | None = None
    devices: int | None = Field(default=None, ge=1)
    nodes: int = Field(default=1, ge=1)
    value: float | None = Field(default=None, gt=0)
    ratio: float | None = Field(default=None, gt=0)
    note: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Reference:
        if (self.value is None) == (self.ratio is None):
            raise ValueError("give exactly one of 'value' (absolute) or 'ratio' (speedup over the baseline)")
        if self.value is not None and (self.device is None or self.devices is None):
            raise ValueError("an absolute reference needs 'device' and 'devices'")
        return self

    @property
    def per_device(self) -> float | None:
        return None if self.value is None else self.value / (self.devices or 1)


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
    notes: list[str] = Field(default_factory=list)


class Scale(Strict):
    devices: int | None = Field(default=None, ge=1)
    nodes: int = Field(default=1, ge=1)
    args: dict[str, Any] = Field(default_factory=dict)
    architecture: dict[str, Any] | None = None
    variants: list[str] | None = None
    notes: list[str] = Field(default_factory=list)


class Recipe(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    title: str
    publication: Publication
    trainer: str = Field(pattern=r"^[A-Za-z0-9_]+\.py$")
    unit: Literal["samples/s", "img/s"]
    devices: int = Field(ge=1, description="devices per node in the published runs")
    model: Model
    dataset: Dataset
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    accelerator_args: dict[str, dict[str, Any]] = Field(default_factory=dict)
    published_commands: dict[str, str] = Field(default_factory=dict)
    tolerance: float = Field(
        default=0.10, gt=0, lt=1, description="relative tolerance of a reproduced figure"
    )
    variants: list[Variant] = Field(min_length=1)
    scales: dict[Literal["published", "smoke"], Scale]
    notes: list[str] = Field(default_factory=list)

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
        for variant in self.variants:
            for arg, other in variant.needs.items():
                if other not in names:
                    raise ValueError(f"variant {variant.name!r}: needs.{arg} names unknown variant {other!r}")
            if any(r.ratio is not None for r in variant.references) and not any(
                v.baseline for v in self.variants
            ):
                raise ValueError(
                    f"variant {variant.name!r} has a ratio reference but no variant is 'baseline: true'"
                )
            _check_token_grid(variant.name, {**self.hyperparameters, **variant.args})
        for scale_name, scale in self.scales.items():
            for name in scale.variants or []:
                if name not in names:
                    raise ValueError(f"scales.{scale_name}.variants names unknown variant {name!r}")
        return self


def _check_token_grid(variant: str, args: dict[str, Any]) -> None:
    """VOLO's token grid is the image size / 16: a token-label map of any other size cannot match it."""
    img, size = args.get("img_size"), args.get("token_label_size")
    if img is not None and size is not None and int(size) != int(img) // 16:
        raise ValueError(
            f"variant {variant!r}: token_label_size {size} does not match img_size {img} "
            f"(the token grid is img_size / 16 = {int(img) // 16}); record a published value under 'published'"
        )


def _format_errors(source: str, error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        location = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key (check the spelling; see recipes/README or an existing recipe)"
        parts.append(f"{location}: {message}")
    head = f"{source}: " + ("" if len(parts) == 1 else f"{len(parts)} problems: ")
    return head + "; ".join(parts)


def available() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def resolve_path(name_or_path: str) -> Path:
    """A recipe is named (``bridgetower``) or given by path (``path/to/my.yaml``)."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.parent != Path("."):
        if not candidate.is_file():
            raise ReprokitError(f"recipe file {name_or_path} does not exist")
        return candidate
    path = RECIPES_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ReprokitError(
            f"unknown recipe {name_or_path!r}; known recipes: {', '.join(available()) or 'none'}"
        )
    return path


def load(name_or_path: str) -> Recipe:
    path = resolve_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ReprokitError(f"{path}{where}: not valid YAML: {problem}") from None
    if not isinstance(raw, dict):
        raise ReprokitError(f"{path}: expected a mapping of recipe keys at the top level")
    try:
        return Recipe.model_validate(raw)
    except ValidationError as exc:
        raise ReprokitError(_format_errors(str(path), exc)) from None


def load_all() -> list[Recipe]:
    return [load(name) for name in available()]


def recipe_hash(name_or_path: str) -> str:
    """A short content hash: results carry it, so a number is traced to the exact recipe text."""
    return hashlib.sha256(resolve_path(name_or_path).read_bytes()).hexdigest()[:12]
