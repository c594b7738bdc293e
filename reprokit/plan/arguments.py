"""Trainer arguments checked before anything is launched: each kit trainer ships a light schema of its
arguments (types, ranges, choices: reprokit_trainers/<trainer>/arguments.json) that the trainer checks
its own arguments with, and the host checks every cell's with (inv show, render, run, reproduce), so a
recipe with `per_device_train_batch_size: 0` is refused in one line before an image build or a queue wait.

The checker is the trainers' own stdlib-only module (reprokit_trainers/common/schema.py), loaded from
its file: one implementation, and no trainer code that imports torch runs on the host.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from types import ModuleType
from typing import Any

from reprokit import trainers
from reprokit.errors import ReprokitError


@cache
def _checker() -> ModuleType | None:
    try:
        path = trainers.package_dir() / "common" / "schema.py"
    except ReprokitError:
        return None
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("reprokit_trainer_schema", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def schema(trainer: str) -> dict[str, Any] | None:
    """A kit trainer's argument schema; None for a trainer without one (a user's own module)."""
    if "." in trainer:
        return None
    try:
        path = trainers.package_dir() / trainer / "arguments.json"
    except ReprokitError:
        return None
    return json.loads(path.read_text()) if path.exists() else None


def problems(trainer: str, args: dict[str, Any]) -> list[str]:
    """What is wrong with `args` for `trainer`: 'key: must be at least 1, got 0', one per key."""
    found = schema(trainer)
    checker = _checker()
    if found is None or checker is None:
        return []
    return checker.check(found, args)
