"""The trainers package (reprokit_trainers) as the host knows it: where it lives on this machine (to
run it or to put it into an image; the host never imports it: the trainers import torch), and the
run-directory contract it owns (reprokit_trainers/contract.json), which the host loads."""

from __future__ import annotations

import importlib.util
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError

PACKAGE = "reprokit_trainers"


def package_dir() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ReprokitError(
            f"the trainers package {PACKAGE} is not installed with the kit (reinstall reprokit)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def search_path() -> str:
    """What run.sh puts first on PYTHONPATH: REPROKIT_TRAINERS_PATH (a trainer under development,
    the tests' fakes) before the folder that holds the kit's own trainers."""
    kit = str(package_dir().parent)
    given = os.environ.get("REPROKIT_TRAINERS_PATH")
    return f"{given}{os.pathsep}{kit}" if given else kit


@cache
def contract() -> dict[str, Any]:
    """The run-directory contract: schema version, file names, definitions, departure kinds, software keys."""
    return json.loads((package_dir() / "contract.json").read_text())
