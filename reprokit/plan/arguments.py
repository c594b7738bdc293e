"""Trainer arguments checked before anything is launched: each kit trainer ships a light schema of its
arguments (types, ranges, choices, and the roles of the arguments the host reads:
arguments.json in the trainer's package, recipes/<recipe>/<trainer>/ or reprokit_trainers/<trainer>/; a user's trainer may ship one beside its module) that the trainer checks
its own arguments with, and the host checks every cell's with (inv show, render, run, reproduce), so a
recipe with `per_device_train_batch_size: 0` is refused in one line before an image build or a queue wait.

The checker is the trainers' own stdlib-only module (reprokit_trainers/common/process/argschema.py), loaded from
its file: one implementation, and no trainer code that imports torch runs on the host.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from reprokit.contract import trainers
from reprokit.contract.errors import ReprokitError


@cache
def _checker() -> ModuleType | None:
    try:
        path = trainers.package_dir() / "common" / "process" / "argschema.py"
    except ReprokitError:
        return None
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("reprokit_trainer_schema", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trainer_folder(trainer: str) -> Path | None:
    """The folder of a trainer, found without importing anything: a kit trainer's package, or the
    folder of a user's module (REPROKIT_TRAINERS_PATH first, then this Python's path)."""
    if "." not in trainer:
        try:
            return trainers.package_folder(trainer)
        except ReprokitError:
            return None
    parts = trainer.split(".")
    search = [p for p in os.environ.get("REPROKIT_TRAINERS_PATH", "").split(os.pathsep) if p] + sys.path
    for entry in search:
        candidate = Path(entry or ".").joinpath(*parts)
        if candidate.is_dir():
            return candidate
        if candidate.with_suffix(".py").is_file():
            return candidate.parent
    return None


def schema(trainer: str) -> dict[str, Any] | None:
    """A trainer's argument schema (arguments.json in its folder); None for a trainer without one.
    Found afresh each time (REPROKIT_TRAINERS_PATH may change where a user's trainer is), read once."""
    folder = trainer_folder(trainer)
    return _read(folder / "arguments.json") if folder is not None else None


@cache
def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def roles(trainer: str | None) -> dict[str, Any]:
    """The arguments the host reads without knowing the trainer (schema `roles`): `batch_per_device`,
    `workers`, `max_steps`, `synthetic_rows` (the count of synthetic rows a trainer makes up front, cut
    to what a shortened run consumes) (argument names) and `switches` (argument -> {recorded, label}).
    Empty for a trainer without a schema."""
    return (schema(trainer) or {}).get("roles", {}) if trainer else {}


def problems(trainer: str, args: dict[str, Any]) -> list[str]:
    """What is wrong with `args` for `trainer`: 'key: must be at least 1, got 0', one per key."""
    found = schema(trainer)
    checker = _checker()
    if found is None or checker is None:
        return []
    return checker.check(found, args)
