"""Where the trainers package (reprokit_trainers) lives on this machine. The host finds it to run
it or to put it into an image; it never imports it (the trainers import torch)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from reprokit.errors import ReprokitError
from reprokit.plan.recipes import TRAINERS_PACKAGE


def package_dir() -> Path:
    spec = importlib.util.find_spec(TRAINERS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ReprokitError(
            f"the trainers package {TRAINERS_PACKAGE} is not installed with the kit (reinstall reprokit)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def search_path() -> str:
    """What run.sh puts first on PYTHONPATH: REPROKIT_TRAINERS_PATH (a trainer under development,
    the tests' fakes) before the folder that holds the kit's own trainers."""
    kit = str(package_dir().parent)
    given = os.environ.get("REPROKIT_TRAINERS_PATH")
    return f"{given}{os.pathsep}{kit}" if given else kit
